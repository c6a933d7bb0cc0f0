"""One AMQP channel of :mod:`._client`: calls, publisher confirms, deliveries, settling.

Everything here is called either by the user's task (``rpc``, ``publish``,
``settle``, ``next_delivery``) or by the connection's reader
(``on_method``, ``on_content``, ``fail``); the reader never waits on a user:

- a synchronous method (``Queue.Declare``...) is one :meth:`Channel.rpc` at a
  time; the reader hands its reply over and sets an event;
- a batch of publishes on a channel in confirm mode takes consecutive
  delivery tags (one batch writes at a time, so publishers sharing a channel
  never count the same tags; a write waits while the broker says
  ``Channel.Flow`` off or ``Connection.Blocked``); the reader marks them as
  ``Basic.Ack``/``Nack`` arrive
  (``multiple`` settles every earlier tag too) and wakes the batch when all
  are settled. A ``Basic.Return`` (a ``mandatory`` message no queue took)
  carries no tag, but the broker sends it before the ack of its publish
  (RabbitMQ: "the basic.return is sent to the client before basic.ack"):
  it waits for the next ``Basic.Ack``/``Nack`` and belongs to the earliest
  publish that ack settles with the same ``message_id``. A batch never holds
  one id twice (the sink publishes such a batch in rounds), and a batch that
  stopped waiting (its timeout) keeps its tags until they are settled, so a
  late return of it never marks a retry of the same message, sent again with
  the same id, as unroutable;
- deliveries go to a buffer of ``prefetch`` places (``Basic.Qos``): the broker
  never has more unacked deliveries out than that, so a full buffer means a
  broker that broke its word, which fails the connection rather than stall
  the reader;
- the broker closing the channel (``Channel.Close``: a missing exchange, a
  message too big) fails every waiter of the channel at once with
  :class:`ServerClosed` (the broker's reply text), and its ``CloseOk``, like
  ``Channel.Flow``'s ``FlowOk``, is queued for the connection to write
  (:meth:`Connection.answer`): the reader never waits on a write.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

import attrs
import trio
from pamqp import commands
from pamqp.base import Frame

from ._frames import Content, ProtocolError, content_frames, method_frame

__all__ = ["Channel", "Delivery", "Nacked", "Publish", "ServerClosed"]

#: Bytes of encoded publishes gathered before one write.
_CHUNK: Final = 256 * 1024
#: Returns held for the ack that follows them (a broker sends one per publish at most).
_MAX_RETURNS: Final = 65536


class Connection(Protocol):
    """What a channel needs of its connection (:class:`._client.Client`)."""

    @property
    def frame_max(self) -> int: ...

    @property
    def blocked(self) -> str | None: ...

    async def send(self, data: bytes | Sequence[bytes]) -> None: ...

    async def send_method(self, channel: int, method: Frame) -> None: ...

    def answer(self, frame: bytes) -> None: ...

    def forget(self, number: int) -> None: ...

    async def wait_unblocked(self) -> None: ...


class ServerClosed(ConnectionError):
    """The broker closed the channel or the connection, and said why."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{text} (AMQP {code})")
        self.code = code
        self.text = text


class Nacked(ConnectionError):
    """The broker refused a publish (``Basic.Nack``: a full queue that rejects, say)."""


@attrs.frozen
class Publish:
    """One ``basic.publish`` (always ``mandatory``: an unroutable message comes back)."""

    exchange: str
    routing_key: str
    body: bytes
    properties: commands.Basic.Properties


@attrs.frozen
class Delivery:
    """One message delivered to our consumer.

    ``oversize``: its announced body size when over the connection's
    ``max_body`` (``body`` is then empty: it was dropped unread), else 0.
    """

    body: bytes
    properties: commands.Basic.Properties
    exchange: str
    routing_key: str
    redelivered: bool
    delivery_tag: int
    oversize: int = 0


@attrs.define(slots=True, eq=False)
class _Batch:
    first: int
    count: int
    by_id: dict[str, int]
    low: int = 0
    left: int = 0
    nacked: int = 0
    #: Publishes written so far (their tags are taken).
    written: int = 0
    returned: list[str | None] = attrs.field(factory=list)
    settled: bytearray = attrs.field(factory=bytearray)
    done: trio.Event = attrs.field(factory=trio.Event)

    def settle(self, tag: int, multiple: bool, ok: bool) -> None:
        last = self.first + self.count - 1
        if multiple:
            start, stop = self.first + self.low, min(tag, last)
            if start <= stop:
                self.low = stop - self.first + 1
            tags: Iterable[int] = range(start, stop + 1)
        else:
            tags = (tag,) if self.first <= tag <= last else ()
        settled = self.settled
        for one in tags:
            index = one - self.first
            if not settled[index]:
                settled[index] = 1
                self.left -= 1
                if not ok:
                    self.nacked += 1
        if not self.left:
            self.done.set()

    def abandon(self) -> None:
        """Nobody waits any more: keep the tags written (for returns) until they settle."""
        self.count = self.written
        self.left = self.written - sum(self.settled[: self.written])


class Channel:
    """An open channel of a connection (see the module's notes)."""

    def __init__(self, client: Connection, number: int) -> None:
        self.client = client
        self.number = number
        #: Why the channel cannot be used (None while it can).
        self.error: Exception | None = None
        self._rpc_lock = trio.Lock()
        self._expect: tuple[type[Frame], ...] = ()
        self._reply: Frame | None = None
        self._replied = trio.Event()
        self._confirming = False
        self._next_tag = 1
        self._batches: collections.deque[_Batch] = collections.deque()
        #: ``Basic.Return``s (message id, reply text) waiting for the ack that follows them.
        self._returns: list[tuple[str, str]] = []
        self._deliveries: trio.MemorySendChannel[Delivery] | None = None
        self._receiver: trio.MemoryReceiveChannel[Delivery] | None = None
        self._publish_cache: dict[tuple[str, str], bytes] = {}
        #: One batch writes at a time: its tags are consecutive and follow the last batch's.
        self._publish_lock = trio.Lock()
        #: Cleared while the broker's ``Channel.Flow`` says stop.
        self._flowing = trio.Event()
        self._flowing.set()

    # -- calls ----------------------------------------------------------------------------

    async def rpc(self, method: Frame, *expect: type[Frame]) -> Frame:
        """Send ``method`` and wait for its reply (one of ``expect``).

        Raises:
          ServerClosed: the broker closed the channel instead (its reason).
          ConnectionError: the channel or connection is broken.
        """
        async with self._rpc_lock:
            self._check()
            self._expect, self._reply, self._replied = expect, None, trio.Event()
            try:
                await self.client.send_method(self.number, method)
                await self._replied.wait()
            except trio.Cancelled:
                # Its reply may still come and would answer the next call.
                self.fail(ConnectionError(f"a {method.name} was cancelled half-way"))
                raise
            finally:
                self._expect = ()
            self._check()
            assert self._reply is not None
            return self._reply

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    async def qos(self, prefetch: int) -> None:
        """``Basic.Qos``: at most ``prefetch`` unacked deliveries per consumer."""
        await self.rpc(commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk)

    async def confirm(self) -> None:
        """``Confirm.Select``: the broker acks or nacks every publish from now on."""
        await self.rpc(commands.Confirm.Select(), commands.Confirm.SelectOk)
        self._confirming = True

    async def close(self) -> None:
        """``Channel.Close`` and its ``CloseOk`` (the caller bounds and shields it)."""
        if self.error is None:
            try:
                await self.rpc(
                    commands.Channel.Close(200, "Normal shutdown", 0, 0), commands.Channel.CloseOk
                )
            except ConnectionError:
                pass
        self.fail(ConnectionError(f"channel {self.number} is closed"))

    # -- publishing -------------------------------------------------------------------------

    def _publish_frame(self, exchange: str, routing_key: str) -> bytes:
        key = (exchange, routing_key)
        frame = self._publish_cache.get(key)
        if frame is None:
            method = commands.Basic.Publish(
                exchange=exchange, routing_key=routing_key, mandatory=True
            )
            frame = method_frame(self.number, method)
            if len(self._publish_cache) > 1024:
                self._publish_cache.clear()
            self._publish_cache[key] = frame
        return frame

    async def publish(self, publishes: Sequence[Publish]) -> list[str | None]:
        """Publish each (``mandatory``) and wait until the broker has confirmed every one.

        The channel must be in confirm mode. Returns, per publish in order,
        None (acked) or the broker's reply text (returned: no queue took it).
        Message ids must be distinct within a call (returns are matched by them).

        Raises:
          Nacked: the broker nacked some of them.
          ServerClosed, ConnectionError: the channel or connection failed first.
        """
        self._check()
        if not self._confirming:
            raise RuntimeError("publish() needs a channel in confirm mode")
        count = len(publishes)
        by_id: dict[str, int] = {}
        for index, publish in enumerate(publishes):
            if publish.properties.message_id:
                by_id[publish.properties.message_id] = index
        batch = _Batch(0, count, by_id, left=count)
        batch.returned = [None] * count
        batch.settled = bytearray(count)
        if not count:
            batch.done.set()
        try:
            async with self._publish_lock:
                await self._write(batch, publishes)
            await batch.done.wait()
        finally:
            if batch.left and batch in self._batches:
                # (cancelled: its confirms and returns still come and must find it)
                batch.abandon()
                if not batch.left:
                    self._batches.remove(batch)
        if batch.left:
            self._check()
        if batch.nacked:
            raise Nacked(f"the broker nacked {batch.nacked} of {count} message(s)")
        return batch.returned

    async def _write(self, batch: _Batch, publishes: Sequence[Publish]) -> None:
        """Write a batch: its tags follow the last batch's (the caller holds the lock)."""
        batch.first = self._next_tag
        if batch.count:
            self._batches.append(batch)
        frame_max = self.client.frame_max
        chunk: list[bytes] = []
        size = taken = 0
        for publish in publishes:
            chunk.append(self._publish_frame(publish.exchange, publish.routing_key))
            chunk += content_frames(self.number, publish.properties, publish.body, frame_max)
            size += len(publish.body)
            taken += 1
            if size >= _CHUNK:
                await self._send(chunk)
                # (the broker numbers what it got: a write cancelled before it
                # began takes no tags, one cancelled part way fails the connection)
                self._next_tag += taken
                batch.written += taken
                chunk, size, taken = [], 0, 0
        if chunk:
            await self._send(chunk)
            self._next_tag += taken
            batch.written += taken

    async def _send(self, chunk: list[bytes]) -> None:
        """Write publishes once the broker lets us (``Channel.Flow``, ``Connection.Blocked``).

        Waiting here rather than in a write stuck part way, a publish
        cancelled (its timeout) leaves the connection usable.
        """
        while not self._flowing.is_set():
            await self._flowing.wait()
            self._check()
        await self.client.wait_unblocked()
        self._check()
        await self.client.send(chunk)

    def _confirmed(self, tag: int, multiple: bool, ok: bool) -> None:
        if self._returns:
            self._match_returns(tag, multiple)
        for batch in list(self._batches):
            if batch.first > tag:
                break
            batch.settle(tag, multiple, ok)
            if not batch.left:
                self._batches.remove(batch)

    def _match_returns(self, tag: int, multiple: bool) -> None:
        """The returns that came before this ack belong to publishes it settles."""
        after = 0
        for message_id, text in self._returns:
            # (batches are in tag order, and a batch holds an id once: the first found is
            # the earliest publish; returns come in publish order, so each is after the last)
            for batch in self._batches:
                index = batch.by_id.get(message_id)
                if index is None or index >= batch.count or batch.settled[index]:
                    continue
                one = batch.first + index
                if after < one <= tag and (multiple or one == tag):
                    batch.returned[index] = text
                    after = one
                    break
        self._returns.clear()

    def _returned(self, method: commands.Basic.Return, content: Content) -> None:
        if len(self._returns) >= _MAX_RETURNS:
            raise ProtocolError(
                f"the broker sent over {_MAX_RETURNS} basic.return without an ack between"
            )
        self._returns.append((content.properties.message_id or "", method.reply_text or "returned"))

    # -- consuming --------------------------------------------------------------------------

    async def consume(self, queue: str, prefetch: int) -> str:
        """``Basic.Consume`` (manual acks); deliveries wait in a buffer of ``prefetch`` places.

        Returns the consumer tag.
        """
        self._deliveries, self._receiver = trio.open_memory_channel[Delivery](prefetch)
        reply = await self.rpc(commands.Basic.Consume(queue=queue), commands.Basic.ConsumeOk)
        assert isinstance(reply, commands.Basic.ConsumeOk)
        return reply.consumer_tag or ""

    async def next_delivery(self) -> Delivery:
        """The next delivery (waits for one).

        Raises:
          ConnectionError: the channel or connection failed (why), or the
            broker cancelled the consumer.
        """
        assert self._receiver is not None, "consume() first"
        try:
            return await self._receiver.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            self._check()
            raise ConnectionError(f"channel {self.number}: the consumer ended") from None

    async def settle(self, ops: Sequence[tuple[str, int, bool]]) -> None:
        """Settles in one write: ``("ack", tag, multiple)``, ``("nack", tag, requeue)``
        or ``("reject", tag, requeue)``."""
        frames = []
        for op, tag, flag in ops:
            if op == "ack":
                method: Frame = commands.Basic.Ack(tag, multiple=flag)
            elif op == "nack":
                method = commands.Basic.Nack(tag, requeue=flag)
            else:
                method = commands.Basic.Reject(tag, requeue=flag)
            frames.append(method_frame(self.number, method))
        self._check()
        await self.client.send(frames)

    # -- what the reader hands over --------------------------------------------------------------

    def on_content(self, content: Content) -> None:
        """A delivered or returned message (called by the reader)."""
        method = content.method
        if isinstance(method, commands.Basic.Deliver):
            if self._deliveries is None:
                raise ProtocolError(f"a delivery on channel {self.number}, which consumes nothing")
            delivery = Delivery(
                content.body,
                content.properties,
                method.exchange or "",
                method.routing_key or "",
                bool(method.redelivered),
                method.delivery_tag or 0,
                content.oversize,
            )
            try:
                self._deliveries.send_nowait(delivery)
            except trio.WouldBlock:
                raise ProtocolError(
                    f"the broker sent more unacked deliveries than the prefetch of "
                    f"{self._deliveries.statistics().max_buffer_size}"
                ) from None
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # (the consumer is going away: the broker will deliver it again)
        elif isinstance(method, commands.Basic.Return):
            self._returned(method, content)
        # (Basic.GetOk: never asked for)

    def on_method(self, method: object) -> None:
        """A method frame for this channel (called by the reader, which never waits here)."""
        if isinstance(method, commands.Basic.Ack):
            self._confirmed(method.delivery_tag or 0, bool(method.multiple), ok=True)
        elif isinstance(method, commands.Basic.Nack):
            self._confirmed(method.delivery_tag or 0, bool(method.multiple), ok=False)
        elif isinstance(method, commands.Channel.Close):
            self.fail(ServerClosed(method.reply_code or 0, method.reply_text or ""))
            self.client.forget(self.number)
            self.client.answer(method_frame(self.number, commands.Channel.CloseOk()))
        elif isinstance(method, commands.Basic.Cancel):
            self.fail(ConnectionError(f"the broker cancelled the consumer {method.consumer_tag!r}"))
        elif isinstance(method, commands.Channel.Flow):
            if method.active:
                self._flowing.set()
            elif self._flowing.is_set():
                self._flowing = trio.Event()
            self.client.answer(method_frame(self.number, commands.Channel.FlowOk(method.active)))
        elif self._expect and isinstance(method, self._expect):
            assert isinstance(method, Frame)
            self._reply = method
            self._replied.set()
            if isinstance(method, commands.Channel.CloseOk):
                self.client.forget(self.number)

    def fail(self, error: Exception) -> None:
        """The channel is unusable from now on: every waiter raises ``error`` (the first wins)."""
        if self.error is None:
            self.error = error
        self._replied.set()
        self._flowing.set()
        for batch in self._batches:
            batch.done.set()
        self._batches.clear()
        self._returns.clear()
        if self._deliveries is not None:
            self._deliveries.close()
