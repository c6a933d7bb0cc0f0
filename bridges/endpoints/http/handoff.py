"""Webhooks handed from their request handlers to the route: queued, taken a group at a time.

The http source is a push source: each request is handled by a task of the
server, and the route pulls. :class:`Handoff` is the queue between the two,
made so that a request costs as little as possible of the event loop:

- a handler appends its envelope to the queue and parks once, until its
  outcome (:meth:`Handoff.hand_over`): no task, memory channel, rendezvous
  or cancel scope of its own;
- the route's taker takes every queued envelope in one
  :meth:`Handoff.receive_some` call (it is a :class:`~bridges.BulkReceiver`),
  and acks a written batch in one :meth:`HookEnvelope.ack_all`, with no
  await per request;
- one timer task (:meth:`Handoff.expire`) answers what waited too long:
  ``accept_timeout`` while queued, ``answer_timeout`` once taken. Both
  queues are in deadline order (the timeouts are fixed), so it only ever
  looks at their fronts.

What this saves per request, measured on a webhook route into a JSON-lines
file: ``docs/performance/benthos.md``.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence

import trio

from ..._message import ACKED, NACKED, OPEN, Envelope, Message

log = logging.getLogger("bridges.http")


class HookEnvelope(Envelope):
    """One request's envelope: settling it records the outcome and tells the handler.

    The handler either waits for :attr:`done` (:meth:`Handoff.hand_over`) or
    has its :attr:`notify` called with the envelope once it is finished
    (:meth:`Handoff.hand_over_later`, whose handler has returned), with no
    timer of its own: :meth:`Handoff.expire` finishes it at :attr:`deadline`
    (``accept_timeout`` while queued, ``answer_timeout`` from when the route
    took it) and says so in :attr:`expired`. Every envelope of a receiver
    shares its :attr:`settle_key`, so the engine acks a written batch in one
    :meth:`ack_all` call, with no await per request.
    """

    __slots__ = (
        "acked",
        "deadline",
        "done",
        "expired",
        "finished",
        "notify",
        "settle_key",
        "taken",
    )

    def __init__(
        self,
        message: Message,
        origin: str,
        key: object,
        deadline: float,
        notify: Callable[[HookEnvelope], None] | None = None,
    ) -> None:
        self.message = message
        self.origin = origin
        self.state = OPEN
        self.settle_key = key
        self.done: trio.Event | None = None
        self.notify = notify
        self.acked = False
        self.taken = False
        self.finished = False
        self.deadline = deadline
        #: The timeout that answered it 503 before it was settled, or "".
        self.expired = ""

    def finish(self) -> None:
        """Its outcome is known (settled, expired or closed): tell the handler, once."""
        if self.finished:
            return
        self.finished = True
        if self.done is not None:
            self.done.set()
        if self.notify is not None:
            try:
                self.notify(self)
            except Exception:  # (never into the engine's settling)
                log.exception("%s: answering a webhook failed", self.origin)

    async def ack(self) -> None:
        if self.state is OPEN:
            self.state = ACKED
            self.acked = True
            self.finish()

    async def ack_all(self, envelopes: Sequence[Envelope]) -> None:
        for envelope in envelopes:
            if envelope.state is OPEN:
                if isinstance(envelope, HookEnvelope):
                    envelope.state = ACKED
                    envelope.acked = True
                    envelope.finish()
                else:  # pragma: no cover - one receiver hands out only its own
                    await envelope.ack()

    async def nack(self, error: BaseException | None = None) -> None:
        if self.state is OPEN:
            self.state = NACKED
            self.finish()


class Handoff:
    """Requests queued for the route, taken a group at a time (a :class:`BulkReceiver`).

    The queue holds at most as many envelopes as the handlers that wait on
    them (the source's ``max_pending`` places bound it).
    """

    def __init__(self, origin: str, accept_timeout: float, answer_timeout: float) -> None:
        self._origin = origin
        self._accept_timeout = accept_timeout
        self._answer_timeout = answer_timeout
        #: Waiting for the route, oldest (soonest due) first.
        self._queued: collections.deque[HookEnvelope] = collections.deque()
        #: Taken by the route, oldest first; settled ones leave from the front.
        self._taken: collections.deque[HookEnvelope] = collections.deque()
        self._taker = trio.lowlevel.ParkingLot()
        self._closed = False

    async def receive_some(self, most: int) -> list[Envelope]:
        """The queued envelopes, oldest first: at least one (waits for it), at most ``most``."""
        queued = self._queued
        while not queued:
            if self._closed:
                raise trio.EndOfChannel
            await self._taker.park()
        if self._closed:
            raise trio.EndOfChannel
        taken = self._taken
        while taken and taken[0].finished:
            taken.popleft()
        deadline = trio.current_time() + self._answer_timeout
        out: list[Envelope] = []
        for _ in range(min(most, len(queued))):
            envelope = queued.popleft()
            envelope.taken = True
            envelope.deadline = deadline
            taken.append(envelope)
            out.append(envelope)
        return out

    async def receive(self) -> Envelope:
        return (await self.receive_some(1))[0]

    @property
    def waiting(self) -> int:
        """Webhooks waiting for the route to take them."""
        return len(self._queued)

    async def expire(self) -> None:
        """Answer 503 what waited too long: queued past ``accept_timeout`` (taken
        out), or taken and not settled within ``answer_timeout`` (left in the
        route). Both queues are in deadline order, so it looks at their fronts."""
        queued, taken = self._queued, self._taken
        idle = min(self._accept_timeout, self._answer_timeout)
        while True:
            now = trio.current_time()
            while queued and queued[0].deadline <= now:
                envelope = queued.popleft()
                envelope.expired = "accept_timeout"
                envelope.finish()
            while taken and (taken[0].finished or taken[0].deadline <= now):
                envelope = taken.popleft()
                if not envelope.finished:
                    envelope.expired = "answer_timeout"
                    envelope.finish()
            wake = now + idle  # (anything queued or taken later is due after that)
            if queued:
                wake = min(wake, queued[0].deadline)
            if taken:
                wake = min(wake, taken[0].deadline)
            await trio.sleep_until(wake)

    def close(self) -> None:
        """No more requests: waiting senders get 503, and so does anything unsettled."""
        self._closed = True
        self._taker.unpark_all()
        for envelope in (*self._queued, *self._taken):
            envelope.finish()

    async def hand_over(self, message: Message) -> bool:
        """Hand the message to the route and wait until it is settled; True once durable."""
        if self._closed:
            return False  # the route stopped: nothing is queued
        envelope = HookEnvelope(
            message, self._origin, self, trio.current_time() + self._accept_timeout
        )
        done = envelope.done = trio.Event()
        self._queued.append(envelope)
        self._taker.unpark()
        try:
            await done.wait()
        except BaseException:  # (cancelled: the server stopping) never handed out: not queued
            if not envelope.taken and envelope in self._queued:
                self._queued.remove(envelope)
            raise
        return self.stored(envelope)

    def hand_over_later(self, message: Message, notify: Callable[[HookEnvelope], None]) -> bool:
        """Hand the message to the route; ``notify(envelope)`` is called once it is
        finished (:meth:`stored` says how). False when the route is closed (nothing
        queued, nothing will be called)."""
        if self._closed:
            return False
        envelope = HookEnvelope(
            message, self._origin, self, trio.current_time() + self._accept_timeout, notify
        )
        self._queued.append(envelope)
        self._taker.unpark()
        return True

    def stored(self, envelope: HookEnvelope) -> bool:
        """True when a finished envelope's message is durable; else why not is logged."""
        if envelope.expired == "accept_timeout":
            log.warning(
                "%s: 503: the route took nothing for %g s (accept_timeout)",
                self._origin,
                self._accept_timeout,
            )
            return False
        if envelope.expired:
            # Still in the route and perhaps stored later: the sender's retry is then a
            # duplicate with the same id, never a loss.
            log.warning(
                "%s: 503: not stored within %g s (answer_timeout)",
                self._origin,
                self._answer_timeout,
            )
            return False
        return envelope.acked
