"""One STOMP session over one stream: handshake, reader, writer, heart-beats.

A :class:`Connection` lives as long as its stream. The client's
:class:`~trio_stomp._core.Core` keeps one at a time and replaces it when it
reconnects; what must outlive a single connection (subscriptions, receipts,
transactions, SENDs to replay) lives there and in the reconnect supervisor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, cast

import trio

from ._errors import (
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    RemoteProtocolError,
    StompError,
    explain,
)
from ._outbox import Outbox
from .frame import VERSIONS, Event, Frame, FrameParser, encode
from .frame._heartbeat import format_heartbeat, negotiate, parse_heartbeat

RECEIVE_SIZE: Final = 64 * 1024
#: What the reader hands the events of one read to (see Connection.run).
Dispatch = Callable[[Sequence[Event]], None]
#: How long a failed write waits for the reader to find out why (see _write_loop).
WRITE_FAILURE_GRACE: Final = 1.0


class Connection:
    """A connected stream speaking STOMP, and the tasks that serve it.

    Attributes:
      url: where it is connected (for messages and events).
      version, server, session: from CONNECTED.
      heartbeat: the negotiated ``(send_every, expect_every)`` in seconds.
      outbox: frames waiting for the writer task.
      error: why the connection failed, once it has.
      closing: DISCONNECT was sent, so the peer closing is expected.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        url: str,
        *,
        heartbeat_tolerance: float,
        lenient: bool,
        max_frame_size: int | None,
    ) -> None:
        self.stream = stream
        self.url = url
        self.parser = FrameParser("1.2", lenient=lenient)
        if max_frame_size is not None:
            self.parser.max_frame_size = max_frame_size
        self.outbox: Outbox[Any] = Outbox(stream)
        self.version = "1.2"
        self.server: str | None = None
        self.session: str | None = None
        self.heartbeat: tuple[float, float] = (0.0, 0.0)
        self.error: StompError | None = None
        self.closing = False
        #: The broker closed a WebSocket with 1000 after our DISCONNECT (see _stream_ended).
        self.closed_after_disconnect = False
        #: Called once, synchronously, when the connection fails (the client's
        #: bookkeeping must not wait for a task switch: see Core._lost).
        self.on_fail: Callable[[Connection, StompError], None] | None = None
        self._tolerance = heartbeat_tolerance
        self._last_read = trio.current_time()
        self._early: list[Frame] = []
        self._scope = trio.CancelScope()
        self._reader_done = trio.Event()

    async def handshake(
        self,
        *,
        login: str | None,
        passcode: str | None,
        host: str,
        heartbeat: tuple[int, int],
        versions: Sequence[str],
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Send CONNECT (with ``headers`` after its own) and read CONNECTED.

        Raises:
          ConnectFailed: ERROR instead of CONNECTED (``frame`` is set), no
            common version (``frame`` is set), or the peer closed.
          RemoteProtocolError, trio.BrokenResourceError, OSError: as they come.
        """
        unknown = [v for v in versions if v not in VERSIONS]
        if unknown or not versions:
            raise ValueError(f"versions must be a non-empty subset of {VERSIONS}, got {versions}")
        pairs = [("accept-version", ",".join(versions)), ("host", host)]
        if login is not None:
            pairs.append(("login", login))
        if passcode is not None:
            pairs.append(("passcode", passcode))
        pairs.append(("heart-beat", format_heartbeat(heartbeat)))
        pairs.extend(headers)
        await self.stream.send_all(encode(Frame("CONNECT", pairs), "1.2"))
        frames: list[Frame] = []
        while not frames:
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise ConnectFailed("the broker closed the connection before answering CONNECT")
            # Paused after the reply: what follows it parses by its version.
            events = self.parser.feed(data, pause_after_frame=True)
            frames = [event for event in events if isinstance(event, Frame)]
        reply = frames[0]
        if reply.command == "ERROR":
            said = explain(reply)
            if passcode and len(passcode) >= 4:  # (a broker that echoes the CONNECT frame)
                said = said.replace(passcode, "***")
            raise ConnectFailed(f"the broker refused the connection: {said}", reply)
        if reply.command != "CONNECTED":
            raise ConnectFailed(f"expected CONNECTED, the broker sent {reply.command}", reply)
        version = reply.headers.get("version", "1.0")
        if version not in versions:
            raise ConnectFailed(
                f"the broker chose STOMP {version}, which is not in versions={tuple(versions)}",
                reply,
            )
        self.version = version
        self.parser.version = version
        self._early = [event for event in self.parser.resume() if isinstance(event, Frame)]
        self.server = reply.headers.get("server")
        self.session = reply.headers.get("session")
        # Under 1.0 too: STOMP 1.0 has no heart-beats, but RabbitMQ and ActiveMQ
        # answer a 1.0 CONNECT's heart-beat and then enforce it. A broker that
        # knows nothing of them answers without the header: (0, 0), none.
        theirs = parse_heartbeat(reply.headers.get("heart-beat"))
        send_ms, expect_ms = negotiate(heartbeat, theirs)
        self.heartbeat = (send_ms / 1000, expect_ms / 1000)
        self._last_read = trio.current_time()

    async def run(self, dispatch: Dispatch) -> StompError | None:
        """Serve the connection until it fails (return the error) or :meth:`stop`.

        ``dispatch`` gets the events of each read together (every frame and
        heart-beat of it, in order): a subscription then gets its messages
        in one step, and its consumer wakes once per read, not per message.
        A StompError it raises fails the connection.
        """
        with self._scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, self._read_loop, dispatch)
                nursery.start_soon(self._guard, self._write_loop)
                if self.heartbeat[0]:
                    nursery.start_soon(self._guard, self._send_heartbeats)
                if self.heartbeat[1]:
                    nursery.start_soon(self._guard, self._watch_heartbeats)
        return self.error

    def fail(self, error: StompError) -> None:
        """Record why the connection failed and stop serving it."""
        if self.error is None:
            self.error = error
            self.outbox.close(error)
            if self.on_fail is not None:
                self.on_fail(self, error)
        self._scope.cancel()

    def stop(self) -> None:
        """Stop serving the connection (it is being closed on purpose)."""
        self.outbox.close(ClientClosed("the connection was closed"))
        self._scope.cancel()

    async def aclose(self) -> None:
        """Close the stream at once (no STOMP goodbye); never blocks long."""
        await trio.aclose_forcefully(self.stream)

    async def _guard(self, task: Callable[..., Awaitable[None]], *args: object) -> None:
        try:
            await task(*args)
        except StompError as exc:
            self.fail(exc)

    async def _write_loop(self) -> None:
        try:
            await self.outbox.run()
        except ConnectionLost:
            # A broker that refuses a frame sends ERROR and closes at once (RabbitMQ
            # always, ActiveMQ sometimes). A write in flight then breaks (EPIPE,
            # ECONNRESET) while the ERROR still waits in our receive buffer: let the
            # reader get to it, so that the broker's reason is what the caller sees
            # (fail() keeps the first error and cancels us). Bounded, in case the
            # stream broke one way only and the reader hears nothing.
            with trio.move_on_after(WRITE_FAILURE_GRACE):
                await self._reader_done.wait()
            raise

    async def _read_loop(self, dispatch: Dispatch) -> None:
        try:
            await self._read_frames(dispatch)
        finally:
            self._reader_done.set()

    async def _read_frames(self, dispatch: Dispatch) -> None:
        stream = self.stream
        feed = self.parser.feed
        if self._early:
            dispatch(self._early)
        while True:
            data = await self._receive(stream)
            if data is None:
                return
            self._last_read = trio.current_time()
            events: Sequence[Event]
            error: RemoteProtocolError | None = None
            try:
                events = feed(data)  # b"": the end of the stream
            except RemoteProtocolError as exc:
                # The frames completed before the bad bytes are valid: act on
                # them (an auto-acked MESSAGE would be lost otherwise).
                events, error = cast("tuple[Event, ...]", exc.events), exc
            if events:
                dispatch(events)
            if error is not None:
                raise error
            if not data:
                self._stream_ended(stream)
                return

    async def _receive(self, stream: trio.abc.Stream) -> bytes | bytearray | None:
        """The next bytes (b"" at the end of the stream); None when we closed it."""
        try:
            return await stream.receive_some(RECEIVE_SIZE)
        except (trio.BrokenResourceError, OSError) as exc:
            raise ConnectionLost(f"reading from {self.url} failed: {exc!r}") from exc
        except trio.ClosedResourceError as exc:
            # Closing the stream can wake this read before our cancellation does.
            if self.closing or self.outbox.closed:
                return None
            raise ClientClosed("the connection was closed") from exc

    def _stream_ended(self, stream: trio.abc.Stream) -> None:
        """The peer closed its side: fine after our DISCONNECT, else the connection is lost."""
        if not self.closing:
            raise ConnectionLost(f"{self.url} closed the connection")
        # A WebSocket Close 1000 is sent on purpose (a crash cannot send one): the
        # broker acted on DISCONNECT, so on every frame before it. RabbitMQ
        # Web-STOMP closes so instead of sending the RECEIPT.
        if getattr(stream, "close_code", None) == 1000:
            self.closed_after_disconnect = True
            raise ClientClosed(f"{self.url} closed the WebSocket after DISCONNECT")

    async def _send_heartbeats(self) -> None:
        every = self.heartbeat[0]
        outbox = self.outbox
        while True:
            idle = trio.current_time() - outbox.last_write
            if idle >= every:
                if outbox.empty:
                    outbox.put_nowait(b"\n")
                idle = 0.0
            await trio.sleep(every - idle)

    async def _watch_heartbeats(self) -> None:
        expect_every = self.heartbeat[1]
        connected_at = self._last_read
        while True:
            limit = expect_every * self._tolerance
            if self._last_read == connected_at:
                # Grace for the first beat: brokers start their timer after
                # CONNECTED (ActiveMQ's first beat comes after two intervals).
                limit += expect_every
            silent = trio.current_time() - self._last_read
            if silent >= limit:
                raise ConnectionLost(
                    f"nothing from {self.url} for {silent:.3f} s; heart-beats were expected "
                    f"every {expect_every:.3f} s"
                )
            await trio.sleep(limit - silent)
