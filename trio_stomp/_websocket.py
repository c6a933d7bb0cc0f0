"""STOMP over WebSocket: a Trio stream that carries bytes in WebSocket messages.

:class:`WebSocketStream` wraps a connected byte stream (TCP or TLS) after the
HTTP upgrade, and is itself a plain :class:`trio.abc.Stream`, so the client
(:func:`trio_stomp.wrap_stream`) and the broker's connection code run over it
unchanged. The same class serves both ends: :func:`connect_websocket` makes
the client side, :func:`accept_websocket` the server side.

Why wsproto and no background task: trio-websocket runs a reader task per
connection in a nursery its caller must provide, so a stream built on it
could not be returned by ``open_stream`` without handing a nursery through
every layer (and through reconnect and failover). wsproto (the sans-IO core
that trio-websocket itself is built on) needs no task: ``receive_some``
reads the transport and feeds wsproto in the caller's task, answers pings
there, and ``send_all`` frames the bytes in the caller's task. The stream's
lifetime is the lifetime of the object; nothing can outlive the caller's
``async with``. It is installed by the ``websocket`` extra
(``pip install trio-stomp[websocket]``).

Framing: STOMP-over-WebSocket peers such as ActiveMQ expect each STOMP frame
in one message, and a heart-beat EOL as a message of its own.
``send_all`` therefore finds frame boundaries in what it is given
(:class:`~trio_stomp.frame.FrameSplitter`: the header block, then ``content-length`` or the
NUL) and sends one binary message per frame; a frame cut across two
``send_all`` calls continues as a fragment of the same message. Incoming
text and binary messages are both delivered as bytes, in order; message
boundaries carry no meaning on the way in (RabbitMQ and stomp.js may split a
frame across messages or put several in one), so nothing is buffered per
message and memory stays bounded by one transport read.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Final

import trio
import wsproto
import wsproto.events as ws_events
import wsproto.utilities
from wsproto.connection import ConnectionState, ConnectionType

from ._errors import ConnectFailed
from .frame import FrameSplitter

__all__ = [
    "STOMP_SUBPROTOCOLS",
    "WebSocketStream",
    "accept_websocket",
    "connect_websocket",
]

#: What a client offers and a server picks from, best first (the STOMP spec's names).
STOMP_SUBPROTOCOLS: Final = ("v12.stomp", "v11.stomp", "v10.stomp")
#: Bytes read from the transport at a time (and the most one read can buffer).
READ_SIZE: Final = 64 * 1024
#: Default bound on waiting for the peer's Close in :meth:`WebSocketStream.aclose`, s.
CLOSE_TIMEOUT: Final = 2.0

_NORMAL_CLOSURES: Final = frozenset({1000, 1001, 1005})
_OPEN: Final = ConnectionState.OPEN


class WebSocketStream(trio.abc.HalfCloseableStream):
    """A byte stream over one open WebSocket connection (client or server side).

    Get one from :func:`connect_websocket` or :func:`accept_websocket`. It
    owns ``transport`` and closes it.

    - ``send_all`` sends each STOMP frame in its own binary message (see
      :class:`~trio_stomp.frame.FrameSplitter`).
    - ``receive_some`` returns the payload of incoming text and binary
      messages as bytes (text is UTF-8), answers pings, and returns ``b""``
      once the peer has closed the WebSocket (answering its Close) or the
      transport ended. A Close with an error code, or a WebSocket protocol
      violation, raises :class:`trio.BrokenResourceError` with the reason.
    - ``send_eof`` sends our Close: nothing more can be sent, and what the
      peer sent before its answering Close can still be received. Unlike a
      TCP half-close, the peer answers with its own Close and stops sending.
    - ``aclose`` sends a Close (code 1000) and waits up to ``close_timeout``
      seconds for the peer's, then closes the transport. Cancelled (or via
      :func:`trio.aclose_forcefully`) it just closes the transport.

    Attributes:
      subprotocol: the negotiated subprotocol (``v12.stomp``...), or None.
      close_code, close_reason: the peer's Close, once received.
    """

    def __init__(
        self,
        transport: trio.abc.Stream,
        protocol: wsproto.WSConnection,
        *,
        subprotocol: str | None,
        close_timeout: float = CLOSE_TIMEOUT,
        early_events: Sequence[ws_events.Event] = (),
    ) -> None:
        self.transport = transport
        self.subprotocol = subprotocol
        self.close_code: int | None = None
        self.close_reason: str | None = None
        self._ws = protocol
        self._close_timeout = close_timeout
        self._splitter = FrameSplitter()
        self._inbox = bytearray()
        self._control = bytearray()  # pongs and Close answers waiting for the transport
        self._send_lock = trio.StrictFIFOLock()
        self._sending = False
        self._receiving = False
        self._closed = False  # aclose() was called
        self._eof_sent = False  # send_eof() was called
        self._eof = False  # nothing more will arrive
        self._error: str | None = None  # why the peer's side broke, once it did
        self._torn = False  # a write was interrupted: the framing on the wire is lost
        # What arrived with the upgrade (a client may pipeline its first frames).
        self._handle([*early_events, *protocol.events()], transport_ended=False)

    def __repr__(self) -> str:
        side = "client" if self._ws.client else "server"
        return f"<WebSocketStream {side} {self.subprotocol or '-'} {self._ws.state.name}>"

    # -- sending -------------------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data``, one binary message per STOMP frame.

        Raises:
          trio.ClosedResourceError: we closed the stream or sent EOF.
          trio.BrokenResourceError: the peer closed the WebSocket, or the
            transport broke.
          trio.BusyResourceError: another task is sending.
        """
        with self._send_conflict():
            await trio.lowlevel.checkpoint_if_cancelled()
            self._check_can_send()
            # The lock is taken before framing: cancelled while waiting for it,
            # nothing was framed, so the framing state stays in step with the wire.
            async with self._send_lock:
                self._check_can_send()
                send = self._ws.send
                out = b"".join(
                    send(ws_events.BytesMessage(data=piece, message_finished=last))
                    for piece, last in self._splitter.split(bytes(data))
                )
                await self._transmit(out)

    async def wait_send_all_might_not_block(self) -> None:
        """Wait until the transport might take more data without blocking."""
        with self._send_conflict():
            if self._closed:
                raise trio.ClosedResourceError("the WebSocket stream is closed")
            async with self._send_lock:
                await self.transport.wait_send_all_might_not_block()

    async def send_eof(self, *, code: int = 1000, reason: str | None = None) -> None:
        """Send our Close frame: a half-close, see the class documentation.

        Args:
          code, reason: what the Close says; 1000 (normal closure) unless
            told otherwise (a server going away sends 1001).

        Raises:
          trio.ClosedResourceError: the stream is closed.
          trio.BusyResourceError: another task is sending.
        """
        with self._send_conflict():
            if self._closed:
                raise trio.ClosedResourceError("the WebSocket stream is closed")
            self._eof_sent = True
            if self._ws.state is not _OPEN or self._torn:
                await trio.lowlevel.checkpoint()
                return
            async with self._send_lock:
                if self._ws.state is _OPEN:
                    try:
                        await self._transmit(self._ws.send(ws_events.CloseConnection(code, reason)))
                    except trio.BrokenResourceError:
                        pass  # the peer is gone: it is closed either way

    def _check_can_send(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the WebSocket stream is closed")
        if self._torn:
            raise trio.BrokenResourceError("an earlier write to the WebSocket was interrupted")
        if self._eof_sent:
            raise trio.ClosedResourceError("EOF was sent on this WebSocket stream")
        if self._ws.state is not _OPEN:
            raise trio.BrokenResourceError(self._error or "the peer closed the WebSocket")

    def _send_conflict(self) -> _Conflict:
        return _Conflict(self, "sending")

    async def _transmit(self, data: bytes) -> None:
        """Write ``data`` after any queued control frames; the send lock is held."""
        if self._control:
            data = bytes(self._control) + data
            self._control.clear()
        if not data:
            await trio.lowlevel.checkpoint()
            return
        try:
            await self.transport.send_all(data)
        except trio.ClosedResourceError:
            raise
        except BaseException:
            # Part of a WebSocket frame may be on the wire: nothing sent after it
            # could be understood. (A cancellation lands here too.)
            self._torn = True
            raise

    # -- receiving -----------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Return up to ``max_bytes`` bytes of message payload; ``b""`` at the end.

        Raises:
          trio.ClosedResourceError: the stream was closed (by us).
          trio.BrokenResourceError: the transport broke, the peer violated the
            WebSocket protocol, or it closed with an error code.
          trio.BusyResourceError: another task is receiving.
        """
        if max_bytes is not None:
            max_bytes = operator.index(max_bytes)
            if max_bytes < 1:
                raise ValueError("max_bytes must be >= 1")
        with _Conflict(self, "receiving"):
            if self._closed:
                raise trio.ClosedResourceError("the WebSocket stream is closed")
            if self._inbox or self._eof:
                await trio.lowlevel.checkpoint()
            while not self._inbox:
                if self._error is not None and not self._eof:
                    raise trio.BrokenResourceError(self._error)
                if self._eof:
                    return b""
                data = await self.transport.receive_some(READ_SIZE)
                self._feed(bytes(data))
                if self._control and not self._torn:
                    try:
                        async with self._send_lock:
                            await self._transmit(b"")
                    except trio.BrokenResourceError:
                        pass  # a pong or Close answer lost; reading shows what happened
            inbox = self._inbox
            if max_bytes is None or max_bytes >= len(inbox):
                out = bytes(inbox)
                inbox.clear()
            else:
                out = bytes(inbox[:max_bytes])
                del inbox[:max_bytes]
            return out

    def _feed(self, data: bytes) -> None:
        """Give transport bytes to wsproto; act on what comes out."""
        ws = self._ws
        if ws.state is ConnectionState.CLOSED:
            if not data:
                self._eof = True
            return  # after the closing handshake, anything more is ignored
        ws.receive_data(data or None)
        self._handle(ws.events(), transport_ended=not data)

    def _handle(self, events: Iterable[ws_events.Event], *, transport_ended: bool) -> None:
        ws = self._ws
        for event in events:
            if isinstance(event, ws_events.BytesMessage):
                self._inbox += event.data
            elif isinstance(event, ws_events.TextMessage):
                self._inbox += event.data.encode("utf-8")
            elif isinstance(event, ws_events.Ping):
                if ws.state is _OPEN:  # once closing, pings go unanswered
                    self._control += ws.send(event.response())
            elif isinstance(event, ws_events.CloseConnection):
                self._closed_by_peer(event, transport_ended=transport_ended)
        if transport_ended:
            self._eof = True

    def _closed_by_peer(self, event: ws_events.CloseConnection, *, transport_ended: bool) -> None:
        ws = self._ws
        if transport_ended:
            # wsproto reports a transport EOF as Close 1006; like TCP, an end.
            self._eof = True
            return
        if ws.state is ConnectionState.REMOTE_CLOSING:
            self.close_code, self.close_reason = event.code, event.reason
            self._control += ws.send(event.response())
        elif ws.state is ConnectionState.CLOSED:  # the answer to our Close
            self.close_code, self.close_reason = event.code, event.reason
        else:
            # Not a Close frame: wsproto could not parse the peer's frames.
            self._error = f"WebSocket protocol error from the peer: {event.reason}"
            if event.code == 1007:
                self._error += (
                    " (a text message that is not UTF-8: RabbitMQ Web-STOMP sends bodies"
                    " in text messages unless configured with web_stomp.ws_frame = binary)"
                )
            if ws.state is _OPEN:
                self._control += ws.send(ws_events.CloseConnection(event.code, event.reason))
            return
        if event.code in _NORMAL_CLOSURES:
            self._eof = True
        else:
            reason = f" ({event.reason})" if event.reason else ""
            self._error = f"the peer closed the WebSocket with code {event.code}{reason}"

    # -- closing -------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the WebSocket (bounded by ``close_timeout``), then the transport."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            with trio.move_on_after(self._close_timeout):
                await self._close_handshake()
        finally:
            await self.transport.aclose()

    async def _close_handshake(self) -> None:
        ws = self._ws
        if self._torn or self._send_lock.locked():
            # A send is in flight (it will fail with ClosedResourceError): our
            # Close cannot be slipped into the middle of its frame.
            return
        try:
            if ws.state is _OPEN or self._control:
                async with self._send_lock:
                    if ws.state is _OPEN:
                        self._control += ws.send(ws_events.CloseConnection(1000))
                    await self._transmit(b"")
            # Wait for the peer's Close, unless a receive_some (in another task)
            # is reading: it will get ClosedResourceError when the transport closes.
            while ws.state is ConnectionState.LOCAL_CLOSING and not self._receiving:
                data = await self.transport.receive_some(READ_SIZE)
                if not data:
                    return
                ws.receive_data(bytes(data))
                for _ in ws.events():
                    pass  # data after our Close is dropped; pings go unanswered
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except wsproto.utilities.RemoteProtocolError:
            pass


class _Conflict:
    """Raises BusyResourceError when two tasks use one direction at once."""

    __slots__ = ("_flag", "_stream")

    def __init__(self, stream: WebSocketStream, flag: str) -> None:
        self._stream = stream
        self._flag = "_" + flag

    def __enter__(self) -> None:
        if getattr(self._stream, self._flag):
            raise trio.BusyResourceError(f"another task is already {self._flag[1:]} on this stream")
        setattr(self._stream, self._flag, True)

    def __exit__(self, *exc_info: object) -> None:
        setattr(self._stream, self._flag, False)


# -- opening handshakes ------------------------------------------------------------


def _host_header(host: str, port: int, tls: bool) -> str:
    name = f"[{host}]" if ":" in host else host
    return name if port == (443 if tls else 80) else f"{name}:{port}"


async def connect_websocket(
    transport: trio.abc.Stream,
    *,
    host: str,
    port: int,
    resource: str = "/",
    tls: bool = False,
    subprotocols: Sequence[str] = STOMP_SUBPROTOCOLS,
    close_timeout: float = CLOSE_TIMEOUT,
) -> WebSocketStream:
    """Upgrade ``transport`` (connected to ``host:port``) to a WebSocket, as the client.

    The caller bounds the time this takes (``connect()`` does, with its
    ``connect_timeout``); on failure the caller closes ``transport``.

    Args:
      transport: a connected TCP or TLS stream.
      host, port, tls: for the ``Host`` header (the port is left out when it
        is the scheme's default).
      resource: the request target, e.g. ``/ws``.
      subprotocols: offered in the ``Sec-WebSocket-Protocol`` header.
      close_timeout: see :class:`WebSocketStream`.

    Returns:
      The open :class:`WebSocketStream`, owning ``transport``.

    Raises:
      ConnectFailed: the server refused the upgrade (its HTTP status is in
        the message), answered something that is not a WebSocket upgrade,
        or closed the connection.
      trio.BrokenResourceError: the transport broke.
    """
    ws = wsproto.WSConnection(ConnectionType.CLIENT)
    request = ws_events.Request(
        host=_host_header(host, port, tls), target=resource, subprotocols=list(subprotocols)
    )
    await transport.send_all(ws.send(request))
    while True:
        data = await transport.receive_some(READ_SIZE)
        if not data:
            raise ConnectFailed(
                f"the server closed the connection during the WebSocket upgrade of {resource!r}"
            )
        try:
            ws.receive_data(bytes(data))
            events = list(ws.events())
        except wsproto.utilities.RemoteProtocolError as exc:
            raise ConnectFailed(
                f"the server's answer to the WebSocket upgrade of {resource!r} is not valid: {exc}"
            ) from exc
        for event in events:
            if isinstance(event, ws_events.AcceptConnection):
                # Anything the server sent right after its 101 answer came with it.
                return WebSocketStream(
                    transport,
                    ws,
                    subprotocol=event.subprotocol,
                    close_timeout=close_timeout,
                    early_events=events[events.index(event) + 1 :],
                )
            if isinstance(event, ws_events.RejectConnection):
                raise ConnectFailed(
                    f"the server refused the WebSocket upgrade of {resource!r}: "
                    f"HTTP {event.status_code}"
                )


async def accept_websocket(
    transport: trio.abc.Stream,
    *,
    subprotocols: Sequence[str] = STOMP_SUBPROTOCOLS,
    close_timeout: float = CLOSE_TIMEOUT,
) -> WebSocketStream:
    """Answer a client's WebSocket upgrade on ``transport``, as the server.

    Any request path is accepted. The subprotocol is the first of
    ``subprotocols`` that the client offered; a client that offers none of
    them (or none at all) is accepted without one, as RabbitMQ does. The
    caller bounds the time this takes and closes ``transport`` on failure.

    Returns:
      The open :class:`WebSocketStream`, owning ``transport``.

    Raises:
      trio.BrokenResourceError: the client closed, or did not send a valid
        WebSocket upgrade request (it was answered with an HTTP error).
    """
    ws = wsproto.WSConnection(ConnectionType.SERVER)
    while True:
        data = await transport.receive_some(READ_SIZE)
        if not data:
            raise trio.BrokenResourceError("the client closed before the WebSocket upgrade")
        try:
            ws.receive_data(bytes(data))
            events = list(ws.events())
        except wsproto.utilities.RemoteProtocolError as exc:
            hint = exc.event_hint
            if hint is not None:
                try:
                    await transport.send_all(ws.send(hint))
                except (wsproto.utilities.LocalProtocolError, trio.BrokenResourceError):
                    pass
            raise trio.BrokenResourceError(f"not a WebSocket upgrade request: {exc}") from exc
        for event in events:
            if isinstance(event, ws_events.Request):
                offered = set(event.subprotocols)
                chosen = next((p for p in subprotocols if p in offered), None)
                await transport.send_all(ws.send(ws_events.AcceptConnection(subprotocol=chosen)))
                return WebSocketStream(
                    transport, ws, subprotocol=chosen, close_timeout=close_timeout
                )
