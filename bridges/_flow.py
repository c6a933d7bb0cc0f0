"""The engine's plumbing: the in-flight window, the queues between its tasks, counters.

These are cheaper than their ``trio`` counterparts (Semaphore, memory
channels) because they never checkpoint when they need not wait: the engine
handles every message through them, and a trip through the scheduler per
message would cost more than everything else it does. The tasks using them
checkpoint on their own, at least once per batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from itertools import repeat
from operator import attrgetter, is_
from typing import Final, Generic, TypeVar

import attrs
import trio

from ._endpoint import BatchRefused, MessageRejected
from ._message import OPEN, Envelope
from ._redact import redact, redact_cut

T = TypeVar("T")

log = logging.getLogger("bridges.route")

_settle_key = attrgetter("settle_key")
#: Why an envelope's source could not read it, or None.
error_of = attrgetter("error")


class Window:
    """The in-flight window: a counter of free slots, and a wait for one.

    One task takes slots (it lowers :attr:`free` itself, by as many as it
    took, once it has them); any task gives them back with :meth:`release`.
    Since only the taker lowers it, slots it saw free stay free until it
    takes them.
    """

    __slots__ = ("_lot", "_waiting", "free")

    def __init__(self, size: int) -> None:
        self.free = size
        self._lot = trio.lowlevel.ParkingLot()
        self._waiting = False  # the taker is parked and nobody woke it yet

    async def wait(self) -> None:
        """Wait until a slot is free (at once when one is; no checkpoint then)."""
        while self.free <= 0:
            self._waiting = True
            try:
                await self._lot.park()
            finally:
                self._waiting = False

    def release(self, count: int = 1) -> None:
        """Give back ``count`` slots."""
        self.free += count
        if self._waiting:
            self._waiting = False
            self._lot.unpark()


class Queue(Generic[T]):
    """One producer, one consumer, in order; unbounded (the window bounds it).

    The consumer takes whatever is there at once (:meth:`take`), so a batch
    costs one slice, not a call per item.
    """

    __slots__ = ("_clock", "_lot", "_waiting", "_wanted", "closed", "items", "since")

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.items: list[T] = []
        #: When the oldest item still queued was put (``clock``'s time, s), or earlier:
        #: set when an item is put into the empty queue, kept when a take leaves some;
        #: 0 without a clock. (Given the clock's bound method, not looked up per put:
        #: ``trio.current_time()`` costs more than the rest of a put.)
        self.since = 0.0
        self._clock = clock
        self.closed = False
        self._lot = trio.lowlevel.ParkingLot()
        self._waiting = False  # the consumer is parked and nobody woke it yet
        self._wanted = 1  # how many items it waits for

    def put(self, item: T) -> None:
        items = self.items
        if not items and self._clock is not None:
            self.since = self._clock()
        items.append(item)
        if self._waiting and len(items) >= self._wanted:
            self._waiting = False
            self._lot.unpark()

    def put_all(self, more: Iterable[T]) -> None:
        """:meth:`put` each of ``more``, in order (one wake-up at most)."""
        items = self.items
        if not items and self._clock is not None:
            self.since = self._clock()
        items += more
        if self._waiting and len(items) >= self._wanted:
            self._waiting = False
            self._lot.unpark()

    def close(self) -> None:
        """No more items: :meth:`wait` returns False once the queue is empty."""
        self.closed = True
        self._lot.unpark_all()

    @property
    def finished(self) -> bool:
        """Closed and empty."""
        return self.closed and not self.items

    async def wait(self) -> bool:
        """Wait for an item: True once there is one, False when closed and empty."""
        while not self.items:
            if self.closed:
                return False
            self._waiting = True
            try:
                await self._lot.park()
            finally:
                self._waiting = False
        return True

    async def wait_for(self, count: int, deadline: float) -> None:
        """Wait until ``count`` items are there, or the queue is closed, or ``deadline``.

        The producer wakes the consumer once, not for every item.
        """
        with trio.move_on_at(deadline):
            while len(self.items) < count and not self.closed:
                self._wanted = count
                self._waiting = True
                try:
                    await self._lot.park()
                finally:
                    self._waiting = False
                    self._wanted = 1

    def take(self, most: int) -> list[T]:
        """Up to ``most`` items from the front (no waiting; empty if there are none)."""
        items = self.items
        if len(items) <= most:
            self.items = []
            return items
        taken = items[:most]
        del items[:most]
        return taken

    async def get(self) -> T | None:
        """The next item, waiting for one; None when closed and empty."""
        if not await self.wait():
            return None
        return self.items.pop(0)


def settle_runs(envelopes: list[Envelope]) -> list[list[Envelope]]:
    """``envelopes`` cut, in order, into runs that one :meth:`Envelope.ack_all` can
    take: consecutive envelopes with the same :attr:`~Envelope.settle_key`; an
    envelope whose key is None is a run of its own."""
    if not envelopes:
        return []
    key = envelopes[0].settle_key
    if key is not None and all(map(is_, map(_settle_key, envelopes), repeat(key))):
        return [envelopes]  # the usual case, checked in C loops: one run
    runs = []
    start = 0
    for index in range(1, len(envelopes)):
        next_key = envelopes[index].settle_key
        if next_key is None or next_key is not key:
            runs.append(envelopes[start:index])
            start = index
            key = next_key
    runs.append(envelopes[start:] if start else envelopes)
    return runs


async def settle(
    envelopes: list[Envelope],
    error: BaseException | None,
    inflight: set[Envelope],
    slots: Window,
) -> tuple[int, BaseException | None]:
    """Ack (``error`` None: a run of them in one call, see :func:`settle_runs`) or
    nack ``envelopes``, in order. Each leaves ``inflight`` and frees its slot once
    tried, even when cancelled (unless already handed back): all of them together
    once the last was tried, so that a batch costs one update of ``inflight``
    and one wake-up of the taker, not one per message.

    Returns how many failed and the first failure (or None).
    """
    failed = 0
    first: BaseException | None = None
    start = 0  # where the run being tried starts
    try:
        if error is not None or all(map(is_, map(_settle_key, envelopes), repeat(None))):
            # One at a time (a nack, or envelopes acked each alone, a webhook's say).
            for start, envelope in enumerate(envelopes):  # noqa: B007 (read when cancelled)
                try:
                    await (envelope.ack() if error is None else envelope.nack(error))
                except Exception as exc:
                    failed += 1
                    first = first or exc
        else:
            for run in settle_runs(envelopes):
                try:
                    if len(run) == 1:
                        await run[0].ack()
                    else:
                        await run[0].ack_all(run)
                except Exception as exc:
                    failed += len(run)
                    first = first or exc
                start += len(run)
    except BaseException:  # cancelled: the ones never tried stay in flight, to be released
        tried = envelopes[: start + 1]
        tried += [e for e in envelopes[start + 1 :] if e.state != OPEN]
        _leave(tried, inflight, slots)
        raise
    _leave(envelopes, inflight, slots)
    return failed, first


#: (envelopes, None to ack or the nack's error, the RouteStats counter to add to)
Settle = tuple[list[Envelope], BaseException | None, str]


async def settle_all(
    route: str, queue: Queue[Settle], inflight: set[Envelope], slots: Window, stats: RouteStats
) -> None:
    """The settler task of ``route``: ack (or nack) the envelopes of each entry of
    ``queue``, in the order the deliverer finished with them (:func:`settle`), and count them."""
    while (entry := await queue.get()) is not None:
        envelopes, error, counter = entry
        failed, failure = await settle(envelopes, error, inflight, slots)
        setattr(stats, counter, getattr(stats, counter) + len(envelopes))
        if counter == "written":
            stats.batches += 1
        if failure is not None:
            log.warning(
                "route %r: %s failed for %d of %d message(s) (%s); "
                "the source may deliver them again",
                route,
                "ack" if error is None else "nack",
                failed,
                len(envelopes),
                one_line(failure),
            )
        if queue.items:  # (else the next get waits: a yield)
            await trio.lowlevel.checkpoint()


def _leave(envelopes: list[Envelope], inflight: set[Envelope], slots: Window) -> None:
    """Take ``envelopes`` out of ``inflight`` and free their slots (not those of
    envelopes already handed back, which left it before)."""
    before = len(inflight)
    inflight.difference_update(envelopes)
    if left := before - len(inflight):
        slots.release(left)


#: Called once per batch written (see :attr:`RouteStats.observe`): the batch's
#: size, when its write started and when its first message was ready (trio clock, s).
BatchObserver = Callable[[int, float, float], None]


#: The counters of :class:`RouteStats`, in the order the logs and metrics list them.
COUNTERS: Final = (
    "received", "written", "filtered", "dead_lettered", "nacked", "handed_back",
    "retries", "restarts", "batches",
)  # fmt: skip


@attrs.define
class RouteStats:
    """Counters of one route, since it was created, and its state.

    The words are those of the stop summary, the metrics
    (``bridges_route_<counter>_total``), the counters logged at a stop and
    the status line: one vocabulary, so that a number on one can be looked
    for on the others.

    Attributes:
      received: messages taken from the source.
      written: written to the sink (durable there), then acked to the source.
      filtered: dropped by a transform (acked).
      dead_lettered: written to the dead-letter sink (acked).
      nacked: handed back to the source with an error after the last attempt.
      handed_back: in flight when the route stopped or restarted: handed back
        to the source (nacked without an error), which delivers them again.
      retries: batch writes tried again; restarts: times the route opened
        again after a failure; batches: batches written.
      state: ``"starting"`` (not open yet), ``"running"`` (source and sink
        open) or ``"retrying"`` (something failed; :attr:`error` says what,
        and the route tries again by its retry policy).
      error: the last failure as one line while retrying, else None.
      observe: called after each batch is written (metrics hook it); None
        costs nothing.
    """

    received: int = 0
    batches: int = 0
    written: int = 0
    filtered: int = 0
    dead_lettered: int = 0
    nacked: int = 0
    handed_back: int = 0
    retries: int = 0
    restarts: int = 0
    state: str = "starting"
    error: str | None = None
    observe: BatchObserver | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def settled(self) -> int:
        """Messages settled one way or another: what moving forward means for a route."""
        return self.written + self.filtered + self.dead_lettered + self.nacked + self.handed_back

    def running(self) -> None:
        """The source and the sink are open."""
        self.state = "running"
        self.error = None

    def trouble(self, error: str) -> None:
        """Something failed (``error``, one line); the route tries again."""
        self.state = "retrying"
        self.error = error

    def wrote(self, count: int, started: float, since: float) -> None:
        """A batch of ``count`` was written (durable) after starting at ``started``."""
        if self.observe is not None:
            self.observe(count, started, since)


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
    """An error as one line for logs and the ``bridge-error`` header, at most
    ``limit`` characters, every secret of the process masked (:mod:`bridges._redact`)."""
    exc = sole(exc)
    # Redacted before the line breaks are folded: a secret may hold one.
    text = " ".join(redact(str(exc)).split()) or type(exc).__name__
    if not isinstance(exc, MessageRejected | BatchRefused | TransformFailed | DeadLetterFailed):
        text = f"{type(exc).__name__}: {text}"
    return redact_cut(text, limit)
