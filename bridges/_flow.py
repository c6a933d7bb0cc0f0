"""The engine's plumbing: the in-flight window, the queues between its tasks, counters.

These are cheaper than their ``trio`` counterparts (Semaphore, memory
channels) because they never checkpoint when they need not wait: the engine
handles every message through them, and a trip through the scheduler per
message would cost more than everything else it does. The tasks using them
checkpoint on their own, at least once per batch.
"""

from __future__ import annotations

import collections
from typing import Generic, TypeVar

import attrs
import trio

from ._endpoint import MessageRejected

T = TypeVar("T")


class Window:
    """The in-flight window: a counter that waits only when it is exhausted."""

    __slots__ = ("_lot", "free")

    def __init__(self, size: int) -> None:
        self.free = size
        self._lot = trio.lowlevel.ParkingLot()

    async def acquire(self) -> None:
        while self.free <= 0:
            await self._lot.park()
        self.free -= 1

    def release(self) -> None:
        self.free += 1
        if self._lot:
            self._lot.unpark()


class Queue(Generic[T]):
    """One producer, one consumer, in order; unbounded (the window bounds it)."""

    __slots__ = ("_lot", "closed", "items")

    def __init__(self) -> None:
        self.items: collections.deque[T] = collections.deque()
        self.closed = False
        self._lot = trio.lowlevel.ParkingLot()

    def put(self, item: T) -> None:
        self.items.append(item)
        if self._lot:
            self._lot.unpark()

    def close(self) -> None:
        """No more items: :meth:`get` returns None once the queue is empty."""
        self.closed = True
        self._lot.unpark_all()

    @property
    def finished(self) -> bool:
        """Closed and empty."""
        return self.closed and not self.items

    async def get(self) -> T | None:
        """The next item, waiting for one; None when closed and empty."""
        items = self.items
        while not items:
            if self.closed:
                return None
            await self._lot.park()
        return items.popleft()

    async def get_until(self, deadline: float) -> T | None:
        """As :meth:`get`, but None also when ``deadline`` passes first."""
        with trio.move_on_at(deadline):
            return await self.get()
        return None


@attrs.define
class RouteStats:
    """Counters of one route, since it was created."""

    received: int = 0
    batches: int = 0
    delivered: int = 0
    filtered: int = 0
    dead_lettered: int = 0
    nacked: int = 0
    released: int = 0
    retries: int = 0
    restarts: int = 0


class TransformFailed(Exception):
    """A transform raised: the message goes to the dead-letter sink (never retried)."""


class DeadLetterFailed(Exception):
    """The dead-letter sink could not take a message; the route restarts after a pause."""


def sole(exc: BaseException) -> BaseException:
    """The one leaf of a (nested) exception group, else ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def one_line(exc: BaseException, limit: int = 500) -> str:
    """An error as one line for logs and the ``bridge-error`` header."""
    exc = sole(exc)
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, MessageRejected | TransformFailed | DeadLetterFailed):
        text = f"{type(exc).__name__}: {text}"
    return text[:limit]
