"""A keep-alive HTTP/1.1 client for the http sink, parsed by httptools (llhttp).

Why not httpx (which the sink used for every request before, and still uses
with ``http2 = true``): measured on a JSON-lines file -> http sink route,
httpx and httpcore took most of the sink's 0.8 ms of CPU per message, and
``concurrency = 64`` was *slower* than 8 (0.4-0.57x the rate at 1.8-2x the
CPU): httpcore's pool looks at every connection for every request
(``_assign_requests_to_connections``: ``is_idle`` and ``has_expired``, the
latter a ``select`` on each idle socket), so the cost of a request grows
with the number of connections. Here each of the sink's ``concurrency``
workers owns its connections (a :class:`Lane`, one connection per origin):
nothing is shared, nothing is scanned, and a request is one write and
(usually) one read.

What it does: HTTP/1.1 with keep-alive, ``Content-Length`` bodies out,
``Content-Length``, chunked or until-close answers in (at most ``limit``
bytes are read; a longer answer closes its connection), 1xx answers
skipped, TLS through :class:`trio.SSLStream` (ALPN ``http/1.1``). A
connection that the server closed while it was idle is noticed before it is
reused (its socket is readable), and a request on a reused connection that
fails before any byte of answer is sent once more on a new one. Timeouts
are the caller's (the sink's deadline for the whole exchange).
"""

from __future__ import annotations

import ssl
from typing import Final, NamedTuple

import httptools
import trio

#: Most bytes read from a socket at once.
READ_SIZE: Final = 64 * 1024


class Origin(NamedTuple):
    """Where a connection goes."""

    scheme: str
    host: str
    port: int


class Answer(NamedTuple):
    """A response: status, reason, headers (names lower-case, first wins), the body read."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes


class HttpError(Exception):
    """A request failed at the transport: connect, TLS, a broken or closed connection,
    an answer that is not HTTP."""


class _Response:
    """The parser's callbacks for one answer at a time."""

    __slots__ = ("body", "complete", "headers", "parser", "reason", "size", "status")

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.reset()

    def reset(self) -> None:
        self.status = 0
        self.reason = b""
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.size = 0
        self.complete = False

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.size += len(body)

    def on_message_complete(self) -> None:
        if self.status < 200:  # 100 Continue, 103 Early Hints: the answer is still to come
            self.reset()
        else:
            self.complete = True


class Connection:
    """One keep-alive connection to one origin."""

    def __init__(self, stream: trio.abc.Stream, socket: trio.socket.SocketType) -> None:
        self.stream = stream
        self.socket = socket
        self.reusable = True
        self.used = False

    def stale(self) -> bool:
        """True when the server closed it (or sent something unasked) while it was idle."""
        try:
            return self.socket.is_readable()
        except OSError:
            return True

    async def exchange(self, request: bytes, limit: int, *, head: bool = False) -> Answer:
        """Send ``request`` (head and body), read the answer (at most ``limit`` body bytes).

        Raises:
          HttpError: the connection broke, or the answer is not HTTP/1.x.
        """
        self.used = True
        self.reusable = False
        response = _Response()
        got_bytes = False
        try:
            await self.stream.send_all(request)
            while not response.complete:
                if head and response.status >= 200:
                    break  # (a HEAD answer has no body; the connection is not reused)
                if response.size >= limit:
                    break  # enough: the rest is not read, the connection is closed
                data = await self.stream.receive_some(READ_SIZE)
                if not data:
                    if response.status >= 200:  # an answer that ends at close: it is whole
                        response.complete = True
                        break
                    raise _Unanswered(got_bytes, "the server closed the connection")
                got_bytes = True
                response.parser.feed_data(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise _Unanswered(got_bytes, _text(exc)) from exc
        except httptools.HttpParserError as exc:
            raise HttpError(f"not an HTTP/1.1 answer: {exc}") from None
        if response.complete and not head and response.parser.should_keep_alive():
            self.reusable = True
        body = b"".join(response.body)
        return Answer(response.status, response.reason.decode("latin-1"), response.headers, body)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


class _Unanswered(HttpError):
    """Failed before (``answered`` False) or after the first byte of the answer."""

    def __init__(self, answered: bool, why: str) -> None:
        super().__init__(why)
        self.answered = answered


def _text(exc: BaseException) -> str:
    cause: BaseException | None = exc
    for _ in range(4):  # trio -> ssl: the last one knows
        if cause is None or str(cause):
            break
        cause = cause.__cause__ or cause.__context__
    if cause is not None and str(cause):
        return f"{type(cause).__name__}: {cause}"
    return type(exc).__name__


class Lane:
    """The connections of one worker: at most one per origin, used one request at a time."""

    def __init__(self, ssl_context: ssl.SSLContext | None) -> None:
        self._ssl_context = ssl_context
        self._connections: dict[Origin, Connection] = {}

    async def _connect(self, origin: Origin) -> Connection:
        try:
            tcp = await trio.open_tcp_stream(origin.host, origin.port)
        except OSError as exc:
            raise HttpError(f"cannot connect to {origin.host}:{origin.port}: {_text(exc)}") from exc
        stream: trio.abc.Stream = tcp
        if origin.scheme == "https":
            context = self._ssl_context or ssl.create_default_context()
            tls = trio.SSLStream(tcp, context, server_hostname=origin.host, https_compatible=True)
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as exc:
                await trio.aclose_forcefully(tcp)
                raise HttpError(f"TLS with {origin.host}:{origin.port}: {_text(exc)}") from exc
            stream = tls
        return Connection(stream, tcp.socket)

    async def exchange(
        self, origin: Origin, request: bytes, limit: int, *, head: bool = False
    ) -> Answer:
        """Send ``request`` to ``origin`` on this lane's connection (a new one when needed).

        Raises:
          HttpError: it could not be sent or answered (worth retrying).
        """
        connection = self._connections.pop(origin, None)
        if connection is not None and connection.stale():
            await connection.aclose()
            connection = None
        for attempt in range(2):
            if connection is None:
                connection = await self._connect(origin)
            reused = connection.used
            try:
                answer = await connection.exchange(request, limit, head=head)
            except _Unanswered as exc:
                await connection.aclose()
                connection = None
                if reused and not exc.answered and attempt == 0:
                    continue  # the server closed it as we reused it: once more, on a new one
                raise HttpError(str(exc)) from exc
            except BaseException:
                await connection.aclose()
                raise
            if connection.reusable:
                self._connections[origin] = connection
            else:
                await connection.aclose()
            return answer
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        """Close every connection."""
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.aclose()


def request_bytes(
    method: str, target: bytes, host: bytes, headers: list[tuple[str, str]], body: bytes
) -> bytes:
    """A whole HTTP/1.1 request: head and body.

    Raises:
      UnicodeEncodeError: a header that is not ASCII.
    """
    lines = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode("ascii"), target, host)]
    lines.extend(b"%s: %s\r\n" % (n.encode("ascii"), v.encode("ascii")) for n, v in headers)
    lines.append(b"content-length: %d\r\n\r\n" % len(body))
    lines.append(body)
    return b"".join(lines)
