"""In-memory endpoints that record everything: the engine's tests, and yours."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio

from .._message import Envelope, Message, UnreadableEnvelope


async def wait_until(condition: Callable[[], bool], interval: float = 0.01) -> None:
    """Poll ``condition`` (route counters and files have no event to wait on)."""
    while not condition():  # noqa: ASYNC110
        await trio.sleep(interval)


def messages(count: int, prefix: str = "m") -> list[Message]:
    """``count`` messages with ids ``m0``, ``m1``... and bodies to match."""
    return [Message(f"{prefix}{i}".encode(), {"n": str(i)}, f"{prefix}{i}") for i in range(count)]


class FakeSource:
    """Hands out queued messages; a nack puts one back in front (like a broker).

    Closing it puts back what is still unsettled, in front and in order, as a
    broker does when a consumer disconnects (not counted in ``nacked``).

    Attributes:
      acked: ids, in ack order.
      nacked: (id, error) pairs, in nack order.
      handed: ids, in the order receive() returned them.
      unreadable: ids of messages handed out as an :class:`bridges.UnreadableEnvelope`,
        with the error each carries.
      opens: how many times the source was opened.
    """

    def __init__(
        self,
        items: Sequence[Message] = (),
        *,
        end: bool = True,
        requeue: bool = True,
        fail_at: dict[int, Exception] | None = None,
        unreadable: Mapping[str, Exception] | None = None,
    ) -> None:
        self.pending: collections.deque[Message] = collections.deque(items)
        self.end = end
        self.requeue = requeue
        self.fail_at = dict(fail_at or {})  # receive number -> error raised there, once
        self.unreadable = dict(unreadable or {})
        self.acked: list[str] = []
        self.nacked: list[tuple[str, BaseException | None]] = []
        self.handed: list[str] = []
        self.opens = 0
        self.open_now = False
        self._calls = 0
        self._more = trio.lowlevel.ParkingLot()
        self._out: dict[int, Message] = {}  # handed out, not settled: delivery number -> message

    def describe(self) -> str:
        return "fake source"

    def push(self, *items: Message) -> None:
        self.pending.extend(items)
        self._more.unpark_all()

    @asynccontextmanager
    async def open(self) -> AsyncIterator[FakeSource]:
        self.opens += 1
        self.open_now = True
        try:
            yield self
        finally:
            self.open_now = False
            self.pending.extendleft(reversed(self._out.values()))
            self._out.clear()

    async def receive(self) -> Envelope:
        await self._wait_for_pending()
        return self._hand_out()

    async def _wait_for_pending(self) -> None:
        await trio.lowlevel.checkpoint()
        self._calls += 1
        error = self.fail_at.pop(self._calls, None)
        if error is not None:
            raise error
        while not self.pending:
            if self.end:
                raise trio.EndOfChannel
            await self._more.park()

    def _hand_out(self) -> Envelope:
        message = self.pending.popleft()
        self.handed.append(message.id)
        delivery = len(self.handed)
        self._out[delivery] = message
        ack = partial(self._settled, delivery, self._ack, message)
        nack = partial(self._settled_with, delivery, self._nack, message)
        origin = f"fake {message.id}"
        error = self.unreadable.get(message.id)
        if error is not None:
            return UnreadableEnvelope(message, ack=ack, nack=nack, origin=origin, error=error)
        return Envelope(message, ack=ack, nack=nack, origin=origin)

    @property
    def unsettled(self) -> int:
        return len(self.handed) - len(self.acked) - len(self.nacked)

    async def _settled(
        self, delivery: int, settle: Callable[[Message], Awaitable[None]], message: Message
    ) -> None:
        self._out.pop(delivery, None)
        await settle(message)

    async def _settled_with(
        self,
        delivery: int,
        settle: Callable[[Message, BaseException | None], Awaitable[None]],
        message: Message,
        error: BaseException | None,
    ) -> None:
        self._out.pop(delivery, None)
        await settle(message, error)

    async def _ack(self, message: Message) -> None:
        assert self.open_now, "acked after the source closed"
        self.acked.append(message.id)

    async def _nack(self, message: Message, error: BaseException | None) -> None:
        self.nacked.append((message.id, error))
        if self.requeue:
            self.pending.appendleft(message)
            self._more.unpark_all()


class FakeBulkSource(FakeSource):
    """A :class:`FakeSource` that is also a :class:`bridges.BulkReceiver`:
    ``receive_some(most)`` hands out every queued message, up to ``most``.

    Attributes:
      asked: the ``most`` of each ``receive_some`` call, in order.
    """

    def __init__(self, items: Sequence[Message] = (), **kwargs: Any) -> None:
        super().__init__(items, **kwargs)
        self.asked: list[int] = []

    async def receive_some(self, most: int) -> list[Envelope]:
        self.asked.append(most)
        await self._wait_for_pending()
        return [self._hand_out() for _ in range(min(most, len(self.pending)))]


class FakeSink:
    """Records written batches; ``script`` lists what each write does (None: succeed).

    Attributes:
      batches: the messages of every successful write.
      calls, opens: how many writes and opens were attempted.
      gate: when set to an Event, every write waits for it first.
      seen_unacked: for each write, whether none of its messages was acked yet.
    """

    def __init__(
        self,
        script: Sequence[BaseException | None] = (),
        *,
        always: BaseException | None = None,
        delay: float = 0.0,
        source: FakeSource | None = None,
    ) -> None:
        self.script = list(script)
        self.always = always
        self.delay = delay
        self.source = source
        self.batches: list[list[Message]] = []
        self.calls = 0
        self.opens = 0
        self.gate: trio.Event | None = None
        self.acked_before_write: list[str] = []

    def describe(self) -> str:
        return "fake sink"

    @property
    def written(self) -> list[str]:
        return [message.id for batch in self.batches for message in batch]

    @asynccontextmanager
    async def open(self) -> AsyncIterator[FakeSink]:
        self.opens += 1
        yield self

    async def write(self, batch: Sequence[Message]) -> None:
        self.calls += 1
        if self.source is not None:
            acked = set(self.source.acked)
            self.acked_before_write.extend(m.id for m in batch if m.id in acked)
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            await trio.sleep(self.delay)
        else:
            await trio.lowlevel.checkpoint()
        if self.script:
            error = self.script.pop(0)
            if error is not None:
                raise error
        if self.always is not None:
            raise self.always
        self.batches.append(list(batch))
