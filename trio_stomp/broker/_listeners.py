"""The broker's listeners: plain STOMP, STOMP over TLS, STOMP over WebSocket.

Each listener accepts TCP connections and turns each into the byte stream
the connection code (:class:`~trio_stomp.broker._connection.Connection`)
runs a session over: as is (``stomp://``), after a TLS handshake
(``stomp+ssl://``), after the WebSocket upgrade (``ws://``), or both
(``wss://``). The handshakes run in the connection's own task, bounded by
:attr:`Limits.connect_timeout`, so a slow or broken client never holds up
the accept loop or anyone else. The WebSocket stream is the client's own
(:class:`trio_stomp._websocket.WebSocketStream`, server side): one adapter
for both ends, and no extra task per connection.
"""

from __future__ import annotations

import functools
import math
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, cast

import attrs
import trio

from .._transport import load_websocket
from ._config import Limits

if TYPE_CHECKING:
    from .._websocket import WebSocketStream

__all__ = ["Address", "Goodbye", "Listener", "open_listeners"]

#: A port on the broker's host, or ``(host, port)``; port 0 picks a free one.
Address = int | tuple[str, int]

PLAIN: Final = "stomp"
TLS: Final = "stomp+ssl"
WS: Final = "ws"
WSS: Final = "wss"
#: The path the broker advertises in ``ws_url``; any path is accepted.
WS_PATH: Final = "/ws"
#: The WebSocket Close code of a server that stops (RFC 6455 "going away").
GOING_AWAY: Final = 1001

#: Sends a stream's last word when the broker stops (see :meth:`Listener.goodbye`).
Goodbye = Callable[[], Awaitable[None]]


class HandshakeFailed(Exception):
    """A client's TLS handshake or WebSocket upgrade failed (it is dropped)."""


@attrs.define(eq=False)
class Listener:
    """One listening socket and how to turn its connections into STOMP streams."""

    scheme: str
    host: str
    sockets: list[trio.SocketListener]
    ssl_context: ssl.SSLContext | None = None

    @property
    def port(self) -> int:
        """The TCP port (the real one when 0 was asked)."""
        port: int = self.sockets[0].socket.getsockname()[1]
        return port

    @property
    def url(self) -> str:
        """``SCHEME://HOST:PORT``, plus ``/ws`` for WebSocket listeners."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        path = WS_PATH if self.scheme in (WS, WSS) else ""
        return f"{self.scheme}://{host}:{self.port}{path}"

    async def wrap(self, stream: trio.SocketStream, limits: Limits) -> trio.abc.HalfCloseableStream:
        """Run this listener's handshakes on a new connection.

        The caller closes ``stream`` if this fails or is cancelled.

        Raises:
          HandshakeFailed: the client failed a handshake or did not finish
            within ``limits.connect_timeout``.
        """
        if self.scheme == PLAIN:
            return stream
        timeout = limits.connect_timeout if limits.connect_timeout > 0 else math.inf
        with trio.move_on_after(timeout) as scope:
            try:
                return await self._handshake(stream, limits)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                cause = exc.__cause__
                raise HandshakeFailed(f"{self.scheme} handshake failed: {cause or exc}") from exc
        assert scope.cancelled_caught
        raise HandshakeFailed(f"{self.scheme} handshake took more than {timeout} s")

    def goodbye(self, stream: trio.abc.HalfCloseableStream) -> Goodbye | None:
        """What ends ``stream`` (from :meth:`wrap`) when the broker stops.

        It is sent after the shutdown ERROR, and the client is given the
        rest of ``close_timeout`` to answer it. A WebSocket gets a Close 1001
        ("going away"), which every WebSocket client answers at once; TCP and
        TLS have nothing to add (None): closing the socket is their end.
        """
        if self.scheme not in (WS, WSS):
            return None
        websocket = cast("WebSocketStream", stream)  # what _handshake made
        return functools.partial(websocket.send_eof, code=GOING_AWAY, reason="broker shutting down")

    async def _handshake(
        self, stream: trio.SocketStream, limits: Limits
    ) -> trio.abc.HalfCloseableStream:
        transport: trio.abc.Stream = stream
        if self.ssl_context is not None:
            tls = trio.SSLStream(stream, self.ssl_context, server_side=True, https_compatible=True)
            await tls.do_handshake()
            transport = tls
        if self.scheme in (WS, WSS):
            websocket = load_websocket()
            ws: trio.abc.HalfCloseableStream = await websocket.accept_websocket(
                transport, close_timeout=limits.close_timeout
            )
            return ws
        return _TLSStream(transport)


class _TLSStream(trio.abc.HalfCloseableStream):
    """A TLS stream with the half-close the connection code asks for.

    After its last frame (an ERROR, a RECEIPT for DISCONNECT) a connection
    sends EOF and waits for the client to close, so that closing with unread
    input cannot reset the connection and destroy that frame. TLS has no
    half-close (trio's SSLStream has no ``send_eof``); stopping writing and
    waiting for the client's close is the same thing less the FIN, so
    ``send_eof`` here only checks that the stream is still open.
    """

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._eof_sent = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof_sent:
            raise trio.ClosedResourceError("EOF was sent on this stream")
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        self._eof_sent = True
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


async def open_listeners(
    host: str,
    port: int,
    *,
    tls_port: Address | None = None,
    ws_port: Address | None = None,
    wss_port: Address | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> list[Listener]:
    """Open every listener the broker was asked for; the plain one comes first.

    Raises:
      ValueError: TLS listeners without ``ssl_context``, or ``ssl_context``
        without a TLS listener.
      ImportError: a WebSocket listener without the ``websocket`` extra.
      OSError: an address cannot be listened on (every socket opened so far
        is closed again).
    """
    wanted: list[tuple[str, str, int]] = [(PLAIN, host, port)]
    for scheme, address in ((TLS, tls_port), (WS, ws_port), (WSS, wss_port)):
        if address is not None:
            where = (host, address) if isinstance(address, int) else address
            wanted.append((scheme, *where))
    uses_tls = any(scheme in (TLS, WSS) for scheme, _, _ in wanted)
    if uses_tls and ssl_context is None:
        raise ValueError("a TLS listener (tls_port, wss_port) needs ssl_context")
    if ssl_context is not None and not uses_tls:
        raise ValueError("ssl_context was given but no TLS listener (tls_port, wss_port)")
    if any(scheme in (WS, WSS) for scheme, _, _ in wanted):
        load_websocket()
    listeners: list[Listener] = []
    try:
        for scheme, listen_host, listen_port in wanted:
            sockets = await _open_one(scheme, listen_host, listen_port)
            context = ssl_context if scheme in (TLS, WSS) else None
            listeners.append(Listener(scheme, listen_host, sockets, context))
    except BaseException:
        for listener in listeners:
            for socket in listener.sockets:
                await trio.aclose_forcefully(socket)
        raise
    return listeners


async def _open_one(scheme: str, host: str, port: int) -> list[trio.SocketListener]:
    try:
        opened = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        # Say which of the listeners failed; keep errno for callers that test it.
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise OSError(
            exc.errno, f"cannot listen on {where} for {scheme}://: {exc.strerror or exc}"
        ) from exc
    if port == 0:
        # Each address of the host would get its own ephemeral port: keep one,
        # so that one URL says where the broker is.
        for extra in opened[1:]:
            await trio.aclose_forcefully(extra)
        opened = opened[:1]
    return opened
