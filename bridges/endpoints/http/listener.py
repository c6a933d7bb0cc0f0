"""One HTTP server per listen address, shared by every route (and the service) that uses it.

A bridge process may have several webhook routes on one ``listen`` address
with different paths, and the service (``/metrics``, ``/readyz``) may want
the same port. So the server is a process-wide resource
(:func:`bridges.shared_resource`, key ``("http-listener", host, port)``):
the first route that needs it starts the server (:mod:`.server`) inside the
process's nursery, later ones mount their path on it, and it stops after
every route has stopped. A route that restarts never takes the server (and
the other routes' paths) down with it.

The server is an ASGI app that dispatches on the exact path:

- a mounted path goes to its app (an ASGI 3 callable);
- a path that was mounted and is not right now (its route is restarting or
  stopping) answers **503** with ``Retry-After``, so a sender retries rather
  than giving up on a 404;
- ``GET /healthz`` (unless mounted explicitly) answers 200 ``ok`` while every
  path is mounted, else 503 naming the ones that are not;
- anything else: 404.

Use from other code (the service mounting ``/metrics``)::

    async with listen(context, "127.0.0.1:9000") as listener:
        with listener.mount("/metrics", metrics_app):
            ...
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from typing import Any, Final

import attrs
import trio

from bridges import Context, shared_resource

from .server import HttpServer

log = logging.getLogger("bridges.http")

Scope = MutableMapping[str, Any]
ASGIMessage = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[ASGIMessage]]
Send = Callable[[ASGIMessage], Awaitable[None]]
#: An ASGI 3 application.
App = Callable[[Scope, Receive, Send], Awaitable[None]]

HEALTH_PATH: Final = "/healthz"
#: What sending an answer raises when the peer went away: the answer is moot.
GONE: Final = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError)
#: How long the server lets requests in progress finish when it stops, s.
GRACEFUL_TIMEOUT: Final = 3.0
#: How long a connection may take to send a whole request head, s, and stay idle between
#: requests: a head sent a byte at a time is cut off here, before any route sees it, so it
#: never holds a place of ``max_pending``.
HEAD_TIMEOUT: Final = 5.0
#: The largest request head (line and headers), bytes; larger: 431 (a head is read at most
#: this many bytes at a time, so it is cut off by the next read at the latest).
MAX_HEAD: Final = 16 * 1024


@attrs.frozen
class ListenAddress:
    """Where a server listens, and its TLS files; routes on one address must agree."""

    host: str
    port: int
    certfile: str | None = None
    keyfile: str | None = None

    @classmethod
    def parse(
        cls, listen: str, certfile: str | None = None, keyfile: str | None = None
    ) -> ListenAddress:
        """``HOST:PORT`` or ``[V6]:PORT`` (port 0 picks a free one).

        Raises:
          ValueError: not of that shape, or a port out of range.
        """
        host, colon, port_text = listen.rpartition(":")
        if not colon or not host or not port_text.isdigit():
            raise ValueError(f"expected HOST:PORT, got {listen!r}")
        if host.startswith("["):
            if not host.endswith("]"):
                raise ValueError(f"expected [IPV6]:PORT, got {listen!r}")
            host = host[1:-1]
        port = int(port_text)
        if port > 65535:
            raise ValueError(f"port {port} is out of range")
        if (certfile is None) != (keyfile is None):
            raise ValueError("certfile and keyfile go together")
        return cls(host, port, certfile, keyfile)

    @property
    def key(self) -> tuple[str, str, int]:
        """The shared-resource key: one server per host and port."""
        return ("http-listener", self.host, self.port)

    @property
    def loopback(self) -> bool:
        """True when only this machine can connect."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def bind(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class HttpListener:
    """The ASGI app behind one server: paths mounted by routes and the service.

    Attributes:
      address: what it was opened with.
      urls: where it actually listens (``http://127.0.0.1:43121``), set once
        the server runs (port 0 resolved).
    """

    def __init__(self, address: ListenAddress) -> None:
        self.address = address
        self.urls: list[str] = []
        self._mounts: dict[str, App] = {}
        self._known: set[str] = set()
        #: The Retry-After of a path that is not mounted right now, s.
        self.retry_after = 5

    @property
    def port(self) -> int:
        """The port it listens on (the free one chosen for port 0)."""
        if not self.urls:
            return self.address.port
        return int(self.urls[0].rsplit(":", 1)[1])

    @property
    def url(self) -> str:
        """The first URL it listens on."""
        return self.urls[0] if self.urls else f"http://{self.address.bind}"

    @contextlib.contextmanager
    def mount(self, path: str, app: App) -> Iterator[None]:
        """Serve ``path`` with ``app`` for the ``with`` block; then it answers 503.

        Raises:
          ValueError: ``path`` does not start with ``/`` or is mounted already.
        """
        if not path.startswith("/"):
            raise ValueError(f"a path must start with '/', got {path!r}")
        if path in self._mounts:
            raise ValueError(f"{path} is already served on {self.url}")
        self._mounts[path] = app
        if path != HEALTH_PATH:  # (without its override, the built-in one answers again)
            self._known.add(path)
        try:
            yield
        finally:
            del self._mounts[path]

    def unavailable(self) -> list[str]:
        """Paths mounted before and not mounted now, sorted."""
        return sorted(self._known - self._mounts.keys())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind != "http":  # websocket: not served
            return
        try:
            await self._dispatch(scope, receive, send)
        except GONE:
            pass  # the sender went away: it retries (a webhook's id dedupes)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        app = self._mounts.get(path)
        if app is not None:
            await app(scope, receive, send)
        elif path in self._known:
            await respond(
                send,
                503,
                b"this route is not running; try again later\n",
                [(b"retry-after", str(self.retry_after).encode())],
            )
        elif path == HEALTH_PATH and scope["method"] in ("GET", "HEAD"):
            down = self.unavailable()
            if down:
                await respond(send, 503, ("not running: " + " ".join(down) + "\n").encode())
            else:
                await respond(send, 200, b"ok\n")
        else:
            await respond(send, 404, b"not found\n")


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def respond(
    send: Send,
    status: int,
    body: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Send a whole response (text/plain)."""
    all_headers = [(b"content-type", b"text/plain; charset=utf-8"), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


def _server(listener: HttpListener, address: ListenAddress) -> HttpServer:
    context = None
    if address.certfile is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(address.certfile, address.keyfile)
        context.set_alpn_protocols(["http/1.1"])
    return HttpServer(
        listener,
        head_timeout=HEAD_TIMEOUT,
        max_head=MAX_HEAD,
        graceful_timeout=GRACEFUL_TIMEOUT,
        ssl_context=context,
    )


def _url(scheme: str, socket: trio.socket.SocketType) -> str:
    host, port = socket.getsockname()[:2]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


@asynccontextmanager
async def open_listener(address: ListenAddress) -> AsyncIterator[HttpListener]:
    """Run a server on ``address`` for the block (:mod:`.server`, in this nursery).

    Leaving the block stops the server gracefully, even when the block is
    cancelled: answers already decided (a webhook's 2xx once its message is
    stored) still go out. The server runs shielded from outside cancellation
    and its stop is bounded: requests in progress get
    :data:`GRACEFUL_TIMEOUT` s, then are cut off.

    Raises:
      OSError: the address cannot be bound (in use, not local).
    """
    listener = HttpListener(address)
    server = _server(listener, address)
    try:
        sockets = await trio.open_tcp_listeners(address.port, host=address.host)
    except OSError as exc:
        message = f"cannot listen on {address.bind}: {exc.strerror or exc}"
        raise OSError(exc.errno, message) from None
    listener.urls = [_url(server.scheme, s.socket) for s in sockets]
    shield = trio.CancelScope(shield=True)

    async def run() -> None:
        with shield:
            await server.serve(sockets)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        log.info("listening on %s", " ".join(listener.urls))
        try:
            yield listener
        finally:
            server.stop()
            shield.deadline = trio.current_time() + GRACEFUL_TIMEOUT + 1.0


def listen(
    context: Context, address: ListenAddress | str
) -> AbstractAsyncContextManager[HttpListener]:
    """The server on ``address``: the process's shared one, or a private one outside a process.

    Routes (and the service) on one address share it; all must give the same
    TLS files.

    Raises:
      ValueError: a malformed address, or TLS files different from the
        server already running there.
    """
    if isinstance(address, str):
        address = ListenAddress.parse(address)
    return _checked(context, address)


@asynccontextmanager
async def _checked(context: Context, address: ListenAddress) -> AsyncIterator[HttpListener]:
    async with shared_resource(context, address.key, partial(open_listener, address)) as listener:
        if (listener.address.certfile, listener.address.keyfile) != (
            address.certfile,
            address.keyfile,
        ):
            raise ValueError(
                f"{address.bind} is already served with other TLS files "
                "(routes on one address must use the same certfile and keyfile)"
            )
        yield listener
