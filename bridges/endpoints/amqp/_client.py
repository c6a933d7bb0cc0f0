"""The amqp family's own AMQP 0-9-1 connection, on Trio: handshake, reader, heartbeats, close.

Why our own: the maintained AMQP clients for Python are asyncio's (aio-pika,
aiormq) or threads' (pika); on trio-asyncio every asyncio callback is a pass
of Trio's scheduler, which held the family at 0.7x of bare aio-pika. The
Trio-native forks (trio-amqp, async-amqp) have had no release since 2023.
pamqp, the codec aiormq is built on, does the encoding (:mod:`._frames`);
this module owns the socket, the tasks and the timers, and
:mod:`._channel` one channel's state.

Shape (as trio-websocket): :func:`open_client` connects (TCP or TLS) and
:func:`wrap_stream` speaks AMQP over any Trio stream (the tests use memory
streams). Both own a nursery: ONE reader task dispatches every frame by
channel and never waits on a consumer (a channel's deliveries go to a buffer
the broker's prefetch bounds), and a heartbeat task sends a heartbeat when
we have been quiet for half the interval and fails the connection when the
broker has been silent for two. A failure (the broker closing the
connection, a broken frame, a silent peer) never raises in those tasks: it
is recorded, every waiter wakes and raises it at its own ``await``. Leaving
the block closes the connection (``Connection.Close``, then its
``CloseOk``), shielded and bounded by :data:`CLOSE_TIMEOUT`, skipped when
the connection is already broken.

The reader never waits on a write either. What it owes the broker
(``Channel.CloseOk``, ``Channel.FlowOk``; the heartbeat task's heartbeats too)
is queued (:meth:`Client.answer`, at most :data:`MAX_ANSWERS` frames) and
written by a small answering task, or ahead of the next write of anyone: a
publish stuck on a full socket (a broker that reads nothing) stalls only the
writers, never the reading of closes, flow control, confirms and
heartbeats. A failure of the connection (the broker's ``Connection.Close``
included) cancels a write in progress, so its publisher raises the cause at
once; the ``CloseOk`` that the broker's close asks for is written after the
tasks end, bounded by :data:`CLOSE_TIMEOUT`, unless a write was cut part way
(half a frame is on the wire: only closing the socket is left).

No reconnection here: when a connection breaks, the endpoint fails and the
route's retry policy opens a new one (so no delivery tag outlives its
connection).
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

import attrs
import trio
from pamqp import commands
from pamqp.base import Frame

from trio_stomp.util import unwrap_group

from ._channel import Channel, ServerClosed
from ._frames import (
    PROTOCOL_HEADER,
    Content,
    FrameReader,
    Heartbeat,
    ProtocolError,
    heartbeat_frame,
    method_frame,
)

__all__ = [
    "CLOSE_TIMEOUT",
    "MAX_ANSWERS",
    "MAX_BODY",
    "MAX_FRAME",
    "Client",
    "Settings",
    "open_client",
    "wrap_stream",
]

#: How long closing may take before we give up on being polite, s.
CLOSE_TIMEOUT: Final = 5.0
#: The largest frame we offer, bytes (RabbitMQ's default); the broker may ask for less.
#: A bigger frame from the broker fails the connection before it is read.
MAX_FRAME: Final = 131072
#: The largest message body we read, bytes (RabbitMQ 3.x's max_message_size; the source's
#: ``max_body`` can lower it); a larger one's body frames are dropped unread (see _frames).
MAX_BODY: Final = 128 * 1024 * 1024
#: Answers (CloseOk, FlowOk, heartbeats) owed to a broker that reads none of our bytes;
#: one more fails the connection (a broker that reads nothing but keeps asking).
MAX_ANSWERS: Final = 1024
#: Bytes read at once.
_READ: Final = 256 * 1024
#: The methods of class ``connection`` (10) belong on channel 0 only.
_CONNECTION_CLASS: Final = 10
_CLOSED_DURING_LOGIN: Final = (
    "the broker closed the connection during login (wrong user or password?)"
)


@attrs.frozen
class Settings:
    """What a connection needs besides its stream.

    Attributes:
      user, password: PLAIN credentials (any UTF-8 text).
      vhost: the virtual host.
      heartbeat: the heartbeat interval we ask for, s (0: none).
      frame_max: the largest frame we offer, bytes.
      max_body: the largest message body we read, bytes (a larger one
        comes as a :class:`._frames.Content` with ``oversize`` set).
    """

    user: str = "guest"
    password: str = attrs.field(default="guest", repr=False)
    vhost: str = "/"
    heartbeat: int = 30
    frame_max: int = MAX_FRAME
    max_body: int = MAX_BODY


class Client:
    """One AMQP connection: opens channels, writes frames, dispatches what the reader reads."""

    def __init__(self, stream: trio.abc.Stream, settings: Settings) -> None:
        self._stream = stream
        self._settings = settings
        self._reader = FrameReader(settings.frame_max, settings.max_body)
        self._write_lock = trio.StrictFIFOLock()
        #: Frames owed to the broker (see the module's notes), written ahead of the next write.
        self._answers: list[bytes] = []
        self._answers_queued = trio.Event()
        #: The write in progress (a failure cancels it), and whether one was cut part way.
        self._writing: trio.CancelScope | None = None
        self._torn = False
        #: The broker closed the connection: its CloseOk is written once the tasks end.
        self._owe_close_ok = False
        self._channels: dict[int, Channel] = {}
        self._next_channel = 1
        self._events: list[tuple[int, object]] = []
        self._tasks = trio.CancelScope()
        self._close_ok = trio.Event()
        self._unblocked = trio.Event()
        self._unblocked.set()
        #: Why the broker blocked publishing (``Connection.Blocked``), None when it does not.
        self.blocked: str | None = None
        #: Why the connection cannot be used any more (None while it can).
        self.error: Exception | None = None
        #: The negotiated frame_max and heartbeat.
        self.frame_max = settings.frame_max
        self.heartbeat = settings.heartbeat
        #: What the broker said of itself (``Connection.Start``'s server properties).
        self.server_properties: dict[str, object] = {}
        self._received_at = self._sent_at = trio.current_time()

    # -- writing ------------------------------------------------------------------------

    async def send(self, data: bytes | Sequence[bytes]) -> None:
        """Write ``data`` (frames already encoded) in one go; writes never interleave.

        Raises:
          ConnectionError: the connection is broken (why: the first failure).
        """
        if self.error is not None:
            raise self.error
        payload = data if isinstance(data, bytes) else b"".join(data)
        async with self._write_lock:  # (cancelled here, nothing was written)
            if self.error is not None:
                raise self.error  # (it broke while we waited for our turn)
            if self._answers:
                # (what the reader owes the broker goes first, in the order it was owed)
                payload = b"".join([*self._answers, payload])
                self._answers.clear()
            if not payload:
                return
            writing = self._writing = trio.CancelScope()
            try:
                with writing:
                    await self._stream.send_all(payload)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                # The first failure is the cause (the broker's Connection.Close, say).
                self.fail(ConnectionError(f"the connection broke while writing ({exc})"))
                assert self.error is not None
                raise self.error from None
            except trio.Cancelled:
                # Part of a frame may be on the wire: nothing can follow it.
                self._torn = True
                self.fail(ConnectionError("a write was cancelled part way"))
                raise
            finally:
                self._writing = None
            if writing.cancelled_caught:
                # fail() cut this write short (the cause, the broker's close say, is the error)
                self._torn = True
                assert self.error is not None
                raise self.error
        self._sent_at = trio.current_time()

    def answer(self, frame: bytes) -> None:
        """Queue ``frame`` for the broker without waiting (the reader's and heartbeat's way).

        It is written by the answering task, or ahead of the next write.
        More than :data:`MAX_ANSWERS` owed fails the connection: the broker
        keeps asking and reads nothing.
        """
        if self.error is not None:
            return
        if len(self._answers) >= MAX_ANSWERS:
            self.fail(
                ProtocolError(
                    f"the broker read none of our last {MAX_ANSWERS} answers "
                    f"(MAX_ANSWERS) and kept asking"
                )
            )
            return
        self._answers.append(frame)
        self._answers_queued.set()

    async def _answering(self) -> None:
        """Writes what is owed when no write takes it along (its own turn at the lock)."""
        while True:
            await self._answers_queued.wait()
            self._answers_queued = trio.Event()
            try:
                await self.send(b"")
            except ConnectionError:
                return  # (recorded by send: every waiter raises it)

    async def send_method(self, channel: int, method: Frame) -> None:
        """Write one method frame."""
        await self.send(method_frame(channel, method))

    # -- channels -----------------------------------------------------------------------

    async def channel(self) -> Channel:
        """A new open channel."""
        number = self._next_channel
        self._next_channel += 1
        channel = Channel(self, number)
        self._channels[number] = channel
        await channel.rpc(commands.Channel.Open(), commands.Channel.OpenOk)
        return channel

    def forget(self, number: int) -> None:
        """A channel closed: its number is free."""
        self._channels.pop(number, None)

    # -- failing and closing --------------------------------------------------------------

    def fail(self, error: Exception) -> None:
        """The connection is unusable from now on: every waiter raises ``error``.

        The first error wins: it is the cause, what follows is its echo.
        """
        if self.error is None:
            self.error = error
        for channel in list(self._channels.values()):
            channel.fail(self.error)
        if self._writing is not None:
            self._writing.cancel()  # (a write stuck on a broker that reads nothing)
        self._tasks.cancel()
        self._close_ok.set()
        self._unblocked.set()

    async def aclose(self) -> None:
        """``Connection.Close`` and its ``CloseOk``, shielded and bounded; the stream closes."""
        with trio.CancelScope(shield=True):
            if self.error is None:
                with trio.move_on_after(CLOSE_TIMEOUT):
                    try:
                        await self.send_method(
                            0, commands.Connection.Close(200, "Normal shutdown", 0, 0)
                        )
                    except ConnectionError:
                        pass
                    else:
                        await self._close_ok.wait()
            self.fail(ConnectionError("the connection is closed"))
            await trio.aclose_forcefully(self._stream)

    # -- reading ------------------------------------------------------------------------

    async def _receive(self) -> list[tuple[int, object]]:
        try:
            data = await self._stream.receive_some(_READ)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionError(f"the connection broke ({exc})") from None
        if not data:
            raise ConnectionError("the broker closed the connection")
        self._received_at = trio.current_time()
        return self._reader.feed(bytes(data))

    async def _next(self) -> tuple[int, object]:
        """During the handshake: the next event (before the reader task runs)."""
        while not self._events:
            self._events = await self._receive()
        return self._events.pop(0)

    async def _expect(self, kind: type[Frame]) -> Frame:
        while True:
            channel, event = await self._next()
            if isinstance(event, kind):
                return event
            if isinstance(event, commands.Connection.Close):
                raise ServerClosed(event.reply_code or 0, event.reply_text or "")
            if not isinstance(event, Heartbeat) or channel:
                name = getattr(event, "name", type(event).__name__)
                raise ProtocolError(f"the broker sent {name} during the handshake")

    async def handshake(self) -> None:
        """Protocol header, ``Start``/``StartOk`` (PLAIN), ``Tune``/``TuneOk``, ``Open``/``OpenOk``.

        Raises:
          ConnectionError: the broker refused us, closed, or spoke something else.
        """
        settings = self._settings
        await self.send(PROTOCOL_HEADER)
        try:
            start = await self._expect(commands.Connection.Start)
        except ProtocolError:
            raise ProtocolError("the server does not speak AMQP 0-9-1") from None
        assert isinstance(start, commands.Connection.Start)
        if "PLAIN" not in (start.mechanisms or "").split():
            raise ProtocolError(f"the broker offers no PLAIN login ({start.mechanisms!r})")
        self.server_properties = dict(start.server_properties or {})
        capabilities = {
            "publisher_confirms": True,
            "basic.nack": True,
            "consumer_cancel_notify": True,
            "authentication_failure_close": True,
        }
        properties: dict[str, object] = {
            "product": "trio-stomp bridges",
            "capabilities": capabilities,
        }
        response = f"\0{settings.user}\0{settings.password}"
        start_ok = commands.Connection.StartOk(properties, "PLAIN", response)  # type: ignore[arg-type]
        await self.send_method(0, start_ok)
        try:
            tune = await self._expect(commands.Connection.Tune)
        except ConnectionError as exc:
            if isinstance(exc, ServerClosed | ProtocolError):
                raise
            raise ConnectionError(_CLOSED_DURING_LOGIN) from None
        assert isinstance(tune, commands.Connection.Tune)
        if tune.frame_max:
            self.frame_max = min(settings.frame_max, tune.frame_max)
        self.frame_max = max(self.frame_max, 4096)
        self._reader.frame_max = self.frame_max
        self.heartbeat = negotiate_heartbeat(settings.heartbeat, tune.heartbeat or 0)
        channel_max = tune.channel_max or 65535
        await self.send(
            [
                method_frame(
                    0, commands.Connection.TuneOk(channel_max, self.frame_max, self.heartbeat)
                ),
                method_frame(0, commands.Connection.Open(settings.vhost)),
            ]
        )
        await self._expect(commands.Connection.OpenOk)

    async def run(self) -> None:
        """The reader, the answering and (with a heartbeat) the heartbeat task, until the end.

        Then, when the broker closed the connection, its ``CloseOk``
        (bounded by :data:`CLOSE_TIMEOUT`; skipped after a torn write).
        """
        with self._tasks:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._answering)
                if self.heartbeat:
                    nursery.start_soon(self._beat)
                try:
                    events, self._events = self._events, []
                    while True:
                        for number, event in events:
                            self._dispatch(number, event)
                        events = await self._receive()
                except ConnectionError as exc:
                    self.fail(exc)
        if self._owe_close_ok:
            with trio.move_on_after(CLOSE_TIMEOUT):
                async with self._write_lock:
                    if not self._torn:
                        try:
                            await self._stream.send_all(
                                method_frame(0, commands.Connection.CloseOk())
                            )
                        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                            pass  # (it is closing anyway)

    def _dispatch(self, number: int, event: object) -> None:
        if number:
            channel = self._channels.get(number)
            if channel is None:
                raise ProtocolError(f"the broker sent a frame on channel {number}, not open")
            if isinstance(event, Frame) and event.index >> 16 == _CONNECTION_CLASS:
                raise ProtocolError(f"the broker sent {event.name} on channel {number}, not 0")
            if isinstance(event, Content):
                channel.on_content(event)
            else:
                channel.on_method(event)
        elif isinstance(event, commands.Connection.Close):
            self._owe_close_ok = True
            raise ServerClosed(event.reply_code or 0, event.reply_text or "")
        elif isinstance(event, commands.Connection.CloseOk):
            self._close_ok.set()
        elif isinstance(event, commands.Connection.Blocked):
            # (a resource alarm: RabbitMQ reads nothing more from a connection that publishes)
            self.blocked = event.reason or "resource alarm"
            self._unblocked = trio.Event()
        elif isinstance(event, commands.Connection.Unblocked):
            self.blocked = None
            self._unblocked.set()
        elif not isinstance(event, Heartbeat):
            name = getattr(event, "name", type(event).__name__)
            raise ProtocolError(f"the broker sent {name} on channel 0")

    async def wait_unblocked(self) -> None:
        """Until the broker lifts its resource alarm (``Connection.Blocked``, then ``Unblocked``).

        A publish waits here before it writes: blocked, RabbitMQ stops
        reading, so a write would hang part way and could only end by failing
        the connection; waiting here, a cancelled publish costs nothing.

        Raises:
          ConnectionError: the connection broke meanwhile.
        """
        await self._unblocked.wait()
        if self.error is not None:
            raise self.error

    async def _beat(self) -> None:
        interval = self.heartbeat
        while True:
            await trio.sleep(interval / 2)
            now = trio.current_time()
            if now - self._received_at > 2 * interval:
                self.fail(
                    ConnectionError(
                        f"the broker sent nothing for {2 * interval:g} s "
                        f"(heartbeat {interval:g} s): connection lost"
                    )
                )
                return
            if now - self._sent_at >= interval / 2 and not self._answers:
                self.answer(heartbeat_frame())


def negotiate_heartbeat(ours: int, theirs: int) -> int:
    """The heartbeat both ends use, s: we ask ``ours``, the broker's ``Tune`` offers ``theirs``.

    Both non-zero: the smaller (AMQP 0-9-1 §2.3.3: limits settle on the
    lowest). Ours 0: none (the client's veto, which RabbitMQ honours: the
    setting says 0 means none). Theirs 0 only: ours (RabbitMQ's own clients'
    rule: the non-zero value wins; we keep our dead-peer detection).
    """
    if not ours:
        return 0
    return min(ours, theirs) if theirs else ours


@asynccontextmanager
async def wrap_stream(
    stream: trio.abc.Stream, settings: Settings, *, within: float = math.inf
) -> AsyncIterator[Client]:
    """AMQP over ``stream`` (connected): the handshake, then the client until the block ends.

    Raises:
      ConnectionError: the handshake failed (:class:`ServerClosed` when the
        broker said why) or took over ``within`` seconds.
    """
    client = Client(stream, settings)
    try:
        with trio.move_on_after(within) as deadline:
            await client.handshake()
        if deadline.cancelled_caught:
            raise ConnectionError(f"the handshake took over {within:g} s")
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.run)
                try:
                    yield client
                finally:
                    await client.aclose()
        except BaseExceptionGroup as group:
            # (the nursery wraps what the block raised: the caller sees it as it was)
            error = unwrap_group(group)
            if error is group:
                raise
            raise error from error.__cause__
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(stream)


async def connect_stream(host: str, port: int, tls: ssl.SSLContext | None) -> trio.abc.Stream:
    """A TCP (or TLS, over ``trio.SSLStream``) stream to ``host:port``.

    Raises:
      ConnectionError: it cannot be reached, or TLS failed.
    """
    try:
        if tls is None:
            return await trio.open_tcp_stream(host, port)
        stream = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=tls)
        try:
            await stream.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream
    except (OSError, trio.BrokenResourceError) as exc:
        raise ConnectionError(f"cannot reach {host}:{port} ({exc})") from None


@asynccontextmanager
async def open_client(
    host: str,
    port: int,
    settings: Settings,
    *,
    tls: ssl.SSLContext | None = None,
    within: float = math.inf,
) -> AsyncIterator[Client]:
    """A connection to ``host:port`` (TLS with ``tls``), logged in ``within`` s.

    Raises:
      ConnectionError: connecting or logging in failed or took too long.
    """
    with trio.move_on_after(within) as deadline:
        stream = await connect_stream(host, port, tls)
    if deadline.cancelled_caught:
        raise ConnectionError(f"connecting took over {within:g} s")
    left = deadline.deadline - trio.current_time()
    async with wrap_stream(stream, settings, within=left) as client:
        yield client
