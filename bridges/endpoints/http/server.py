"""A lean HTTP/1.1 server on Trio: one task per connection, parsed by httptools (llhttp).

Why not hypercorn (which served the http family before): measured on one
webhook route (``bridges run``, wrk, 16 keep-alive senders), hypercorn and
h11 took about 0.5 ms of CPU per request, most of it in its per-request
tasks, queues and timers and in h11's pure-Python state machine; and under
a storm of connections closing at once its ``TCPServer._close()`` called
``send_eof()`` without holding its send lock, so a ``BusyResourceError``
stopped the whole server (every route on the address). This server does
only what the bridge needs: HTTP/1.1 (and 1.0) with keep-alive, the ASGI 3
calling convention for the apps mounted on it (``http`` scopes; a body is
read from the socket only when the app asks for it, so the socket itself is
the backpressure), TLS through :class:`trio.SSLStream`, and the limits a
server facing the internet needs:

- a request head (line and headers) must arrive whole within
  ``head_timeout`` s of the connection opening or of the previous answer
  (an idle keep-alive connection is closed then too), and be at most
  ``max_head`` bytes (431); until then the request reaches no app;
- bytes that are not HTTP get 400 and the connection is closed;
- an answer that leaves part of the request body unread is sent with
  ``Connection: close``, then the server half-closes and reads (and drops)
  up to :data:`MAX_LINGER_BYTES` for up to :data:`LINGER_TIMEOUT` s before it
  closes (a "lingering close", as Apache's): a client still sending its
  body reads the answer (a 413) instead of a connection reset;
- one connection's failure, whatever it is, ends that connection only.

A connection handles its requests one at a time; pipelined requests wait
in the parser (at most one read's worth of bytes). Two ASGI extensions
spare a webhook work: ``bridges.ready_body`` hands over a body that came
with its head whole (no body timer), and ``bridges.defer`` lets the app
return before it answers and give the answer later from another task (the
connection waits for the next head meanwhile, and sends nothing else and
runs no other app before that answer): one task wakeup per request
instead of two. A head is due ``head_timeout`` after the last answer, by
one timer task for the whole server. Stopping: no new
connections, idle ones are closed at once, requests in progress get
``graceful_timeout`` s to finish (their connection closes after the
answer), then are cancelled.
"""

from __future__ import annotations

import errno
import logging
import os
import ssl
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final
from urllib.parse import unquote

import httptools
import trio

from .heads import response_head

log = logging.getLogger("bridges.http.server")

Scope = MutableMapping[str, Any]
ASGIMessage = MutableMapping[str, Any]
App = Callable[
    [Scope, Callable[[], Awaitable[ASGIMessage]], Callable[[ASGIMessage], Awaitable[None]]],
    Awaitable[None],
]

#: Most bytes read from a socket at once.
READ_SIZE: Final = 64 * 1024
#: After an answer that left part of the request body unread (a 413, 408 or 503), the most
#: bytes still read (and dropped) before the connection is closed, so that the client
#: reads the answer instead of a reset.
MAX_LINGER_BYTES: Final = 4 * 1024 * 1024
#: After such an answer, the longest the lingering close waits for the client to stop, s.
LINGER_TIMEOUT: Final = 2.0
#: The ASGI scope's ``extensions`` key of :meth:`_Exchange.ready_body`.
READY_BODY: Final = "bridges.ready_body"
#: The ASGI scope's ``extensions`` key of :meth:`_Exchange.defer`.
DEFER: Final = "bridges.defer"
#: Errors of accept() that are the machine's state, not the listener's: wait and go on.
_ACCEPT_RETRY: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
#: What a peer that went away (or sent garbage over TLS) raises on its stream.
_GONE: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError)


class _Request:
    """One request as the parser gives it: head, then body chunks."""

    __slots__ = (
        "body",
        "complete",
        "expect",
        "head_done",
        "headers",
        "http_version",
        "keep_alive",
        "method",
        "url",
    )

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.body: deque[bytes] = deque()
        self.complete = False
        self.expect = False
        self.method = "GET"
        self.http_version = "1.1"
        self.keep_alive = True


class _BadRequest(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


class _Connection:
    """The parser's callbacks and one connection's requests, in order."""

    def __init__(self, server: HttpServer, stream: trio.abc.Stream, client: Any) -> None:
        self.server = server
        self.stream = stream
        self.client = client
        self.parser = httptools.HttpRequestParser(self)
        self.requests: deque[_Request] = deque()
        self.eof = False
        self.head_bytes = 0
        #: The connection's own scope: cancelled when a head does not arrive within
        #: ``head_timeout`` (by :meth:`HttpServer._expire_heads`) or by a stop, only
        #: while it waits for one (never while an app runs).
        self.scope = trio.CancelScope()
        #: A plain TCP socket's descriptor, read and written directly (no
        #: scheduler pass of its own per call: see :meth:`read`); -1 for TLS.
        self.fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        #: The exchange whose app deferred its answer and that is not answered yet.
        self.pending: _Exchange | None = None
        #: Waiting for a request head (in :meth:`next_request`).
        self.in_head_wait = False
        #: Set before its socket is closed: a deferred answer then writes nothing.
        self.closed = False

    # httptools calls these while feed_data() parses.
    def on_message_begin(self) -> None:
        self.requests.append(_Request())

    def on_url(self, url: bytes) -> None:
        self.requests[-1].url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        request = self.requests[-1]
        request.headers.append((name, value))
        if name == b"expect" and value.lower() == b"100-continue":
            request.expect = True

    def on_headers_complete(self) -> None:
        request = self.requests[-1]
        request.head_done = True
        request.method = self.parser.get_method().decode("ascii", "replace")
        request.http_version = self.parser.get_http_version()
        request.keep_alive = self.parser.should_keep_alive()
        self.head_bytes = 0

    def on_body(self, body: bytes) -> None:
        self.requests[-1].body.append(body)

    def on_message_complete(self) -> None:
        self.requests[-1].complete = True

    async def read(self) -> None:
        """Read once and parse; sets :attr:`eof` at the end of the stream.

        Raises:
          _BadRequest: not HTTP, an upgrade, or a head over the limit.
        """
        in_head = not self.requests or not self.requests[-1].head_done
        size = self.server.max_head if in_head else READ_SIZE
        data = await self._receive(size) if self.fd >= 0 else await self.stream.receive_some(size)
        if not data:
            self.eof = True
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            raise _BadRequest(400, "upgrade not supported") from None
        except httptools.HttpParserError as exc:
            raise _BadRequest(400, f"not HTTP/1.1: {exc}") from None
        if not self.requests or not self.requests[-1].head_done:
            self.head_bytes += len(data)
            if self.head_bytes > self.server.max_head:
                raise _BadRequest(431, "request head too large")

    async def _receive(self, size: int) -> bytes:
        """Read up to ``size`` bytes from the plain socket: at once when some are there
        (then one checkpoint, so a peer that keeps sending cannot hog the loop), else
        after waiting until it is readable (the wait is the scheduler pass).

        The socket is non-blocking (trio made it so); this skips
        ``SocketStream.receive_some``'s extra pass after each read, which costs
        as much as the rest of a small request's handling.
        """
        try:
            data = os.read(self.fd, size)
        except BlockingIOError:
            pass
        else:
            await trio.lowlevel.checkpoint()
            return data
        while True:
            await trio.lowlevel.wait_readable(self.fd)
            try:
                return os.read(self.fd, size)
            except BlockingIOError:
                continue

    async def send_all(self, data: bytes) -> None:
        """Send ``data``: straight into the plain socket's buffer when it fits (no
        scheduler pass), else (or over TLS) through the stream."""
        if self.fd >= 0:
            try:
                sent = os.write(self.fd, data)
            except BlockingIOError:
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        await self.stream.send_all(data)

    async def next_request(self) -> _Request | None:
        """The next request whose head is in, or None (closed, stopping).

        While it waits, the connection is in the server's list of heads due:
        one that does not come within ``head_timeout`` cancels :attr:`scope`,
        which closes the connection (one timer task for the whole server, not
        a cancel scope per request).
        """
        if self.requests and self.requests[0].head_done:
            return self.requests[0]
        waiting = self.server.waiting
        if self.pending is None:  # (else from when it is answered: see _Exchange.answer)
            waiting[self] = trio.current_time() + self.server.head_timeout
        self.in_head_wait = True
        try:
            while not (self.requests and self.requests[0].head_done):
                if self.eof:
                    return None
                await self.read()
        finally:
            self.in_head_wait = False
            waiting.pop(self, None)
        if self.scope.cancel_called:  # (due in the very tick the head arrived)
            return None
        return self.requests[0]

    async def serve(self) -> None:
        while not self.server.stopping or self.pending is not None:
            try:
                request = await self.next_request()
            except _BadRequest as bad:
                await self.answered()
                await self.refuse(bad)
                return
            # Answers go out in the order of their requests; a peer that half-closed
            # after its request (None) still reads its answer.
            await self.answered()
            if request is None or self.server.stopping:
                return
            if not await self.run_app(request):
                return
            self.requests.popleft()

    async def answered(self) -> None:
        """Wait until the answer an app deferred is out (at once when there is none)."""
        pending = self.pending
        if pending is not None:
            if not pending.sent:
                pending.answered = trio.Event()
                await pending.answered.wait()
            self.pending = None

    async def refuse(self, bad: _BadRequest) -> None:
        log.debug("%s: %s", self.client, bad)
        body = f"{bad}\n".encode()
        try:
            await self.send_all(response_head(bad.status, [], len(body), close=True) + body)
        except _GONE:
            return
        await self.linger()

    async def run_app(self, request: _Request) -> bool:
        """Run the app for ``request``; True when the connection stays open for the next."""
        server = self.server
        try:
            parsed = httptools.parse_url(request.url)
            path = unquote(parsed.path.decode("ascii"), errors="strict")
        except (httptools.HttpParserInvalidURLError, UnicodeDecodeError, ValueError):
            await self.refuse(_BadRequest(400, "bad request target"))
            return False
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version,
            "method": request.method,
            "scheme": server.scheme,
            "path": path,
            "raw_path": parsed.path,
            "query_string": parsed.query or b"",
            "root_path": "",
            "headers": request.headers,
            "client": self.client,
            "server": None,
        }
        exchange = _Exchange(self, request)
        scope["extensions"] = {READY_BODY: exchange.ready_body, DEFER: exchange.defer}
        try:
            await server.app(scope, exchange.receive, exchange.send)
        except _GONE:
            return False
        except Exception:
            log.exception("the app failed on %s %s", request.method, path)
            if exchange.status is None:
                await self.send_all(response_head(500, [], 0, close=True))
            return False
        if exchange.deferred and not exchange.sent:
            self.pending = exchange  # answered later, from another task (or the connection closes)
            return True
        if not exchange.sent:  # the app answered nothing (it saw the sender go away)
            return False
        if self.keep_alive(request, exchange.headers):
            return True
        if not request.complete:
            await self.linger()  # the rest of the body is on its way: let the answer be read
        return False

    def keep_alive(self, request: _Request, headers: list[tuple[bytes, bytes]]) -> bool:
        if not request.keep_alive or self.server.stopping or self.eof:
            return False
        if not request.complete or request.body:
            return False  # the body was not all read: close (after a linger)
        for name, value in headers:  # (a loop: a generator costs more for the usual 1 or 2)
            if name.lower() == b"connection" and value.lower() == b"close":
                return False
        return True

    async def linger(self) -> None:
        """Half-close, then drop what the peer still sends, for a bounded time and size."""
        if self.eof:
            return
        try:
            if isinstance(self.stream, trio.SocketStream):
                await self.stream.send_eof()
            dropped = 0
            with trio.move_on_after(LINGER_TIMEOUT):
                while dropped < MAX_LINGER_BYTES:
                    data = await self.stream.receive_some(READ_SIZE)
                    if not data:
                        break
                    dropped += len(data)
        except _GONE:
            pass


class _Exchange:
    """One request's ASGI ``receive`` and ``send``."""

    __slots__ = (
        "answered",
        "connection",
        "continued",
        "deferred",
        "ended",
        "headers",
        "parts",
        "request",
        "sent",
        "status",
    )

    def __init__(self, connection: _Connection, request: _Request) -> None:
        self.connection = connection
        self.request = request
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.parts: list[bytes] = []
        self.sent = self.ended = self.deferred = False
        self.continued = not request.expect
        #: Set once a deferred answer is out, when the connection waits for it.
        self.answered: trio.Event | None = None

    def defer(self) -> Callable[[int, list[tuple[bytes, bytes]], bytes], None] | None:
        """Let the app return before it answers: the answer is then given by calling the
        returned function, from any task of this Trio run, once (later calls do nothing).

        Only for a plain socket whose request body was all read: None otherwise (then
        answer through ``send`` as usual). The connection reads the next request head
        meanwhile, but runs no app and sends nothing before this answer is out, and
        closes only after it (or when the answer cannot go out at once: the socket's
        buffer full, the peer gone). This spares the task a second wakeup per request.
        """
        request = self.request
        if self.connection.fd < 0 or self.sent or not request.complete or request.body:
            return None
        self.deferred = True
        return self.answer

    def answer(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """The deferred answer (see :meth:`defer`): written now, without waiting."""
        if self.sent:
            return
        self.sent = True
        self.status = status
        self.headers = headers
        connection = self.connection
        if not connection.closed:
            keep = connection.keep_alive(self.request, headers)
            head = response_head(status, headers, len(body), close=not keep)
            data = head if self.request.method == "HEAD" else head + body
            try:
                written = os.write(connection.fd, data)
            except OSError:  # (BlockingIOError too: a peer that does not read its answers)
                written = -1
            if written != len(data) or not keep:
                connection.scope.cancel()  # its answer cannot go out whole now: close
            elif connection.in_head_wait and connection.pending is self:
                server = connection.server
                if server.stopping:
                    connection.scope.cancel()
                else:  # (its head timeout starts now, as after any answer)
                    server.waiting[connection] = trio.current_time() + server.head_timeout
        if self.answered is not None:
            self.answered.set()

    def ready_body(self) -> bytes | None:
        """The whole body when the parser holds all of it already (then it is
        taken, as by ``receive``), else None: read it with ``receive``. An app
        gets it through the scope's ``extensions`` (:data:`READY_BODY`), and
        needs no timer for a body that is already here."""
        request = self.request
        if not request.complete or self.ended or self.sent:
            return None
        self.ended = True
        body = b"".join(request.body)
        request.body.clear()
        return body

    async def receive(self) -> ASGIMessage:
        """The next body chunk (read from the socket only now), or ``http.disconnect``."""
        request = self.request
        connection = self.connection
        while not request.body and not request.complete:
            if self.sent or connection.eof:
                return {"type": "http.disconnect"}
            if not self.continued:
                self.continued = True
                await connection.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            try:
                await connection.read()
            except (_BadRequest, *_GONE):
                connection.eof = True  # a broken body, or the peer went: the request is over
        if self.ended or self.sent:
            return {"type": "http.disconnect"}
        chunk = request.body.popleft() if request.body else b""
        more = bool(request.body) or not request.complete
        self.ended = not more
        return {"type": "http.request", "body": chunk, "more_body": more}

    async def send(self, message: ASGIMessage) -> None:
        """Take the answer; it goes out in one write with its last body part."""
        if self.sent:
            raise trio.ClosedResourceError("the answer was sent")
        kind = message["type"]
        if kind == "http.response.start":
            self.status = int(message["status"])
            self.headers.extend(message.get("headers", ()))
            return
        if kind != "http.response.body" or self.status is None:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        self.parts.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        self.sent = True
        body = b"".join(self.parts)
        keep = self.connection.keep_alive(self.request, self.headers)
        head = response_head(self.status, self.headers, len(body), close=not keep)
        await self.connection.send_all(head if self.request.method == "HEAD" else head + body)


class HttpServer:
    """Serve ``app`` on listeners until :meth:`stop`.

    Attributes:
      stopping: set by :meth:`stop`: no new requests are read.
    """

    def __init__(
        self,
        app: App,
        *,
        head_timeout: float,
        max_head: int,
        graceful_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.app = app
        self.head_timeout = head_timeout
        self.max_head = max_head
        self.graceful_timeout = graceful_timeout
        self.ssl_context = ssl_context
        self.scheme = "https" if ssl_context is not None else "http"
        self.stopping = False
        #: Connections waiting for a request head, with when it is due, the
        #: soonest first (every wait is ``head_timeout`` long).
        self.waiting: OrderedDict[_Connection, float] = OrderedDict()
        self._stop = trio.Event()

    def stop(self) -> None:
        """Stop accepting; close idle connections; let requests in progress finish."""
        self.stopping = True
        for connection in self.waiting:  # (not one whose deferred answer is still to come)
            connection.scope.cancel()
        self._stop.set()

    async def _expire_heads(self) -> None:
        """Close connections whose request head is overdue (the soonest due first)."""
        waiting = self.waiting
        while True:
            now = trio.current_time()
            while waiting:
                connection, due = next(iter(waiting.items()))
                if due > now:
                    break
                del waiting[connection]
                connection.scope.cancel()
            # (a wait that starts later is due later than now + head_timeout)
            await trio.sleep_until(
                next(iter(waiting.values())) if waiting else now + self.head_timeout
            )

    async def serve(self, listeners: list[trio.SocketListener]) -> None:
        """Accept and serve until :meth:`stop`, then for at most ``graceful_timeout`` s."""
        async with trio.open_nursery() as timer:
            timer.start_soon(self._expire_heads)
            async with trio.open_nursery() as connections:
                async with trio.open_nursery() as accepting:
                    for listener in listeners:
                        accepting.start_soon(self._accept, listener, connections)
                    await self._stop.wait()
                    accepting.cancel_scope.cancel()
                for listener in listeners:
                    await listener.aclose()
                connections.cancel_scope.deadline = trio.current_time() + self.graceful_timeout
            timer.cancel_scope.cancel()

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_RETRY:
                    raise
                log.warning("accept: %s (waiting 0.1 s)", exc.strerror or exc)
                await trio.sleep(0.1)
                continue
            nursery.start_soon(self._connection, stream)

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            client = stream.socket.getpeername()
        except OSError:
            client = None
        if isinstance(client, tuple):
            client = (client[0], client[1])
        served: trio.abc.Stream = stream
        if self.ssl_context is not None:
            served = trio.SSLStream(
                stream, self.ssl_context, server_side=True, https_compatible=True
            )
        connection = _Connection(self, served, client)
        try:
            with connection.scope:
                await connection.serve()
        except _GONE:
            pass  # the peer went away
        except Exception:  # one connection's failure never stops the server
            log.exception("connection from %s failed", client)
        finally:
            connection.closed = True
            self.waiting.pop(connection, None)
            await trio.aclose_forcefully(served)
