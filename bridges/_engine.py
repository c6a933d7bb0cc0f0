"""The engine: one :class:`Route` moves messages from a source, through transforms, to a sink.

Three tasks per route, in one nursery inside the source's ``async with``:

- the *taker* waits for a free slot of the in-flight window, receives
  envelopes (as many at once as the source has ready and the window has
  room for, when the source is a :class:`~bridges.BulkReceiver`), runs the
  transforms on each and queues the results (in order);
- the *deliverer* writes by *group commit*: once the sink is idle it writes
  whatever is queued (up to ``batch_count``), so a lone message waits for no
  timer, and what arrives during a write (and its fsync) gathers into the
  next one: under load batches grow by themselves, never two writes at once.
  ``batch_time`` > 0 bounds an opt-in wait for a fuller batch (``linger.ms``),
  from when its first message was queued. A failed write is retried on a
  freshly opened sink by the route's :class:`RetryPolicy` (a sink that will
  not open counts as a failed attempt at the pending batch); after the last
  attempt the batch goes to the dead-letter sink with headers saying why, or,
  without one, is nacked and the route pauses (backs off). Messages a sink
  rejects (:class:`~bridges.MessageRejected`) are given up alone, each with
  its reason, and the rest written at once; a batch the sink says was
  refused for one message it cannot name (:class:`~bridges.BatchRefused`)
  is written again in halves until that message is alone;
- the *settler* acks (or nacks) the envelopes of each batch once the
  deliverer is done with it: only after the write returned, so only once
  the data is durable. It is a task of its own so that the next write need
  not wait for a batch of acks.

A slot of the window is held from ``receive()`` until the envelope is
settled, so at most ``in_flight`` messages are between the source and the
sink: the backpressure a STOMP source turns into its prefetch window, and
the bound on duplicates after a crash. One task per stage keeps order within
a route (a retried batch blocks the ones behind it); a nack hands a message
back to the source, which may redeliver it after later ones.

When the source fails (a lost connection), the route closes everything,
hands the in-flight envelopes back (nack, shielded and bounded), waits by
the retry policy, and opens again; when the sink fails, only the sink is
opened again, and the batch retried.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final

import trio

from ._batch import Batch, Gathering, dead_letter_message
from ._carry import carried, write_call
from ._endpoint import (
    BatchRefused,
    BulkReceiver,
    MessageRejected,
    Receiver,
    Sink,
    Source,
    Writer,
)
from ._flow import (
    DeadLetterFailed,
    Queue,
    RouteStats,
    Settle,
    Window,
    error_of,
    one_line,
    settle_all,
    sole,
)
from ._message import Envelope, Message
from ._retry import RetryPolicy
from ._transforms import Chain, Transform

log = logging.getLogger("bridges.route")

#: Passes of the scheduler a batch waits, at most, for what its source has ready.
_READY_PASSES: Final = 4
#: The taker yields to other tasks at least this often, even when it never waits.
_YIELD_EVERY: Final = 64

#: What the transforms made of each taken envelope, in order: a message, or their error.
_Results = collections.deque[Message | BaseException]


class Route:
    """Source -> transforms -> sink, with at-least-once delivery. Run it with :meth:`run`.

    Args:
      name: for logs and the ``bridge-route`` header.
      source, sink: the endpoints.
      transforms: applied in order; see :mod:`bridges._transforms`.
      dead_letter: where messages go after the last attempt, or None.
      in_flight: most envelopes received but not yet settled.
      batch_count: the most messages one write carries.
      batch_time: 0 (the default): group commit, the sink writes whatever
        is ready as soon as it is idle. > 0: a batch not yet full waits
        until ``batch_time`` s after its first message was queued for more
        (an upper bound, for a sink whose writes cost much each).
      retry: attempts and backoff for writes (a sink that fails to open
        while a batch is pending counts as a failed attempt), restarts and
        pauses.
      release_timeout: bound on handing in-flight envelopes back when the
        route stops or fails, s.
      rand: the jitter's random source (tests pass a constant).
    """

    def __init__(
        self,
        name: str,
        source: Source,
        sink: Sink,
        *,
        transforms: Sequence[Transform] = (),
        dead_letter: Sink | None = None,
        in_flight: int = 1000,
        batch_count: int = 100,
        batch_time: float = 0.0,
        retry: RetryPolicy | None = None,
        release_timeout: float = 5.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if in_flight < 1 or batch_count < 1 or batch_time < 0:
            raise ValueError("in_flight and batch_count must be >= 1, batch_time >= 0")
        self.name = name
        self.source = source
        self.sink = sink
        self.dead_letter = dead_letter
        self.carried = carried(sink, source)  # the sink writes the source's positions too
        self._chain = Chain(transforms)
        self._window = in_flight
        self._batch_count = batch_count
        self._batch_time = batch_time
        self._retry = retry if retry is not None else RetryPolicy()
        self._release_timeout = release_timeout
        self._rand = rand
        self.stats = RouteStats()
        #: Set once the source and the sink have opened for the first time.
        self.ready = trio.Event()
        #: Set when :meth:`run` returns.
        self.finished = trio.Event()
        self._stopping = False
        self._stopped = trio.Event()
        self._scope = trio.CancelScope()
        self._take_scope: trio.CancelScope | None = None
        self._inflight: set[Envelope] = set()
        self._slots = Window(in_flight)
        self._taken: Queue[Envelope] = Queue()
        self._results: _Results | None = collections.deque() if transforms else None
        self._to_settle: Queue[Settle] = Queue()
        self._gathering: Gathering | None = None
        self._pauses = 0
        self._unreadable = 0  # envelopes with an error taken and not yet gathered

    def __repr__(self) -> str:
        return f"<Route {self.name!r}: {self.source.describe()} -> {self.sink.describe()}>"

    @property
    def in_flight(self) -> int:
        """Envelopes received and not yet settled."""
        return len(self._inflight)

    # -- lifetime -------------------------------------------------------------

    async def run(self) -> None:
        """Run until the source ends, or :meth:`stop` drained it, or cancelled.

        A failure of the source (or of the dead-letter sink) is logged; the
        route hands its in-flight envelopes back, waits by the retry policy
        and starts again. Call it once per Route.
        """
        try:
            await self._supervise()
        finally:
            self.finished.set()

    def stop(self) -> None:
        """Stop taking new messages; :meth:`run` returns once in-flight ones are settled."""
        self._stopping = True
        self._stopped.set()
        if self._take_scope is not None:
            self._take_scope.cancel()

    def abort(self) -> None:
        """Stop now: in-flight envelopes are nacked (shielded, bounded) and :meth:`run` returns."""
        self._stopping = True
        self._stopped.set()
        self._scope.cancel()

    async def _supervise(self) -> None:
        failures = 0
        with self._scope:
            while not self._stopping:
                written = self.stats.written
                try:
                    await self._run_once()
                    return
                except Exception as exc:
                    if self._stopping:
                        log.warning("route %r stopped with an error: %s", self.name, one_line(exc))
                        return
                    failures = 1 if self.stats.written > written else failures + 1
                    self.stats.restarts += 1
                    self.stats.trouble(one_line(exc))
                    delay = self._retry.delay(failures, self._rand)
                    log.error(
                        "route %r failed: %s; starting again in %.2f s",
                        self.name,
                        one_line(exc),
                        delay,
                    )
                    with trio.move_on_after(delay):
                        await self._stopped.wait()

    async def _run_once(self) -> None:
        self._slots = Window(self._window)
        self._taken = Queue(trio.lowlevel.current_clock().current_time)
        if self._results is not None:
            self._results = collections.deque()
        self._to_settle = Queue()
        self._gathering = None
        self._unreadable = 0
        async with self.source.open() as receiver, self._open_dead_letter() as dead_letter:
            take_scope = self._take_scope = trio.CancelScope()
            if self._stopping:
                take_scope.cancel()
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._take, receiver, take_scope)
                    nursery.start_soon(self._deliver, dead_letter)
                    nursery.start_soon(
                        settle_all,
                        self.name,
                        self._to_settle,
                        self._inflight,
                        self._slots,
                        self.stats,
                    )
            finally:
                self._take_scope = None
                await self._release_all()

    @contextlib.asynccontextmanager
    async def _open_dead_letter(self) -> AsyncIterator[Writer | None]:
        if self.dead_letter is None:
            yield None
        else:
            async with self.dead_letter.open() as writer:
                yield writer

    async def _release_all(self) -> None:
        """Hand back every unsettled envelope (nack without error); shielded, bounded."""
        left = list(self._inflight)
        self._inflight.clear()
        if not left:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(self._release_timeout):
            for envelope in left:
                try:
                    await envelope.nack(None)
                except Exception as exc:
                    log.debug("route %r: release of %r failed: %s", self.name, envelope, exc)
        self.stats.handed_back += len(left)
        log.info("route %r: %d in-flight message(s) handed back", self.name, len(left))

    # -- taking -----------------------------------------------------------------

    async def _take(self, receiver: Receiver, scope: trio.CancelScope) -> None:
        # As many at once as a BulkReceiver has ready and the window has room for.
        receive_some = receiver.receive_some if isinstance(receiver, BulkReceiver) else None
        receive = receiver.receive
        slots = self._slots
        inflight = self._inflight
        stats = self.stats
        taken = self._taken
        results = self._results
        since_yield = 0
        try:
            with scope:
                while True:
                    if slots.free <= 0:
                        await slots.wait()
                    try:
                        if receive_some is None:
                            envelopes: Sequence[Envelope] = (await receive(),)
                        else:
                            envelopes = await receive_some(slots.free)
                    except trio.EndOfChannel:
                        log.info("route %r: the source has ended", self.name)
                        return
                    # Their slots: free when counted above, still free (only this task takes).
                    got = len(envelopes)
                    slots.free -= got
                    inflight.update(envelopes)
                    stats.received += got
                    if results is None:
                        if any(map(error_of, envelopes)):  # set aside (dead letters) when gathered
                            self._unreadable += sum(e.error is not None for e in envelopes)
                        taken.put_all(envelopes)
                    else:
                        await self._transform_each(envelopes, results)
                    since_yield += got
                    if since_yield >= _YIELD_EVERY:
                        # (a source that never waits would otherwise never let go)
                        since_yield = 0
                        await trio.lowlevel.checkpoint()
        finally:
            taken.close()

    async def _transform_each(self, envelopes: Sequence[Envelope], results: _Results) -> None:
        """Run the transforms on each envelope in turn and queue what they made of it."""
        taken = self._taken
        for envelope in envelopes:
            if envelope.error is not None:  # unreadable: a dead letter, in its turn
                results.append(envelope.error)
                taken.put(envelope)
                continue
            try:
                message = await self._chain(envelope.message)
            except Exception as exc:
                results.append(exc)
                taken.put(envelope)
                continue
            if message is None:
                self.stats.filtered += 1
                await self._ack(envelope)
            else:
                results.append(message)
                taken.put(envelope)

    # -- delivering ---------------------------------------------------------------

    async def _deliver(self, dead_letter: Writer | None) -> None:
        try:
            await self._write_batches(dead_letter)
        finally:
            self._to_settle.close()

    async def _write_batches(self, dead_letter: Writer | None) -> None:
        batch: Batch | None = None
        later: list[Batch] = []  # halves of a refused batch still to write, the next last
        attempt = 0
        open_failures = 0
        while True:
            opened = False
            try:
                async with self.sink.open() as writer:
                    opened = True
                    write = write_call(writer, self.carried, self.sink.describe())
                    self.ready.set()
                    self.stats.running()
                    open_failures = 0
                    while True:
                        if batch is None:
                            batch = later.pop() if later else await self._gather(dead_letter)
                            if batch is None:
                                return
                            attempt = 0
                        attempt += 1
                        started = trio.current_time()
                        try:
                            await write(batch.messages.copy(), batch.envelopes)
                        except MessageRejected as exc:
                            batch = await self._rejected(batch, exc, dead_letter)
                            attempt -= 1
                            continue
                        await self._written(batch, started, bool(later))
                        batch = None
            except Exception as exc:
                if isinstance(sole(exc), DeadLetterFailed):
                    raise
                self.stats.trouble(one_line(exc))
                if batch is None:
                    if self._taken.finished and self._gathering is None and not later:
                        return
                    open_failures += 1
                    delay = self._retry.delay(open_failures, self._rand)
                    log.error(
                        "route %r: %s%s failed: %s; again in %.2f s",
                        self.name, "" if opened else "opening ", self.sink.describe(),
                        one_line(exc), delay,
                    )  # fmt: skip
                    await trio.sleep(delay)
                elif len(batch) > 1 and isinstance(sole(exc), BatchRefused):
                    # Which message? Write each half on a fresh sink until it is alone.
                    batch, second = batch.halves()
                    later.append(second)
                    attempt = 0
                    log.info(
                        "route %r: %s refused %d message(s) (%s); writing them in halves",
                        self.name, self.sink.describe(), len(batch) + len(second), one_line(exc),
                    )  # fmt: skip
                else:
                    if not opened:
                        attempt += 1  # the sink would not even open: a failed attempt at it
                    batch = await self._failed(batch, exc, attempt, opened, dead_letter)

    async def _written(self, batch: Batch, started: float, more: bool) -> None:
        """``batch`` was written (from ``started``): settle it; yield if the next is ready
        (``more``: halves of a refused batch are left), or the next :meth:`_gather` waits."""
        self._to_settle.put((batch.envelopes, None, "written"))
        self.stats.wrote(len(batch), started, batch.since)
        log.debug(
            "route %r: wrote %d message(s) in %.1f ms",
            self.name, len(batch), (trio.current_time() - started) * 1000,
        )  # fmt: skip
        self._pauses = 0
        if more or self._taken.items:
            await trio.lowlevel.checkpoint()  # (a sink that never waits would never let go)

    async def _failed(
        self, batch: Batch, exc: Exception, attempt: int, opened: bool, dead_letter: Writer | None
    ) -> Batch | None:
        """After failed attempt number ``attempt`` at ``batch``: wait by the retry policy
        and return it to be tried again, or give it up and return None."""
        if attempt >= self._retry.attempts:
            await self._give_up(batch, exc, attempt, "sink", dead_letter)
            return None
        self.stats.retries += 1
        delay = self._retry.delay(attempt, self._rand)
        log.warning(
            "route %r: %s %d message(s) to %s failed (attempt %d of %d): %s; again in %.2f s",
            self.name, "writing" if opened else "opening the sink to write", len(batch),
            self.sink.describe(), attempt, self._retry.attempts, one_line(exc), delay,
        )  # fmt: skip
        await trio.sleep(delay)
        return batch

    async def _gather(self, dead_letter: Writer | None) -> Batch | None:
        """The next batch, in order; None once the taker has finished and all is written.

        Messages whose transforms failed, or that their source could not read
        (:attr:`Envelope.error`), are given up here, in their turn.
        """
        taken = self._taken
        wait = self._batch_time
        while True:
            gathering = self._gathering
            if gathering is None:
                if not await taken.wait():
                    return None
                # (from when its first message was queued: not batch_time more after a write)
                gathering = self._gathering = Gathering(taken.since + wait)
            await self._fill(gathering)
            envelopes, messages, failed = gathering.envelopes, gathering.messages, gathering.failed
            while failed:
                envelope, error = failed[0]
                original = Batch([envelope], [envelope.message])
                stage = "transform" if envelope.error is None else "source"
                await self._give_up(original, error, 1, stage, dead_letter)
                del failed[0]  # only once given up: a cancelled give-up is done again
            self._gathering = None
            if envelopes:
                return Batch(envelopes, messages, gathering.deadline - wait)

    async def _fill(self, gathering: Gathering) -> None:
        """Take what is queued into ``gathering`` until it holds ``batch_count``, or
        nothing more is ready (group commit), or, with ``batch_time``, until its deadline."""
        taken = self._taken
        count = self._batch_count
        envelopes = gathering.envelopes
        while True:
            self._add(taken.take(count - len(envelopes)), gathering)
            if len(envelopes) >= count:
                return
            if taken.items:  # (failed transforms took some of the places)
                continue
            if taken.closed or not envelopes:
                return
            if self._batch_time > 0 and trio.current_time() < gathering.deadline:
                await taken.wait_for(count - len(envelopes), gathering.deadline)
                continue
            # What the source has ready joins, never a timer: a few passes of the scheduler
            # (the taker may checkpoint more than once per message, in either order).
            for _ in range(_READY_PASSES):
                await trio.lowlevel.checkpoint()
                if taken.items:
                    break
            else:
                return

    def _add(self, chunk: list[Envelope], gathering: Gathering) -> None:
        """Put taken envelopes into the batch being gathered; failed ones aside, in order."""
        results = self._results
        if results is None:
            if self._unreadable:  # (rare: a source handed out what it could not read)
                readable = gathering.set_aside_unreadable(chunk)
                self._unreadable -= len(chunk) - len(readable)
                chunk = readable
            gathering.envelopes += chunk
            gathering.messages += [envelope.message for envelope in chunk]
            return
        for envelope in chunk:
            result = results.popleft()
            if isinstance(result, Message):
                gathering.envelopes.append(envelope)
                gathering.messages.append(result)
            else:
                gathering.failed.append((envelope, result))

    async def _rejected(
        self, batch: Batch, exc: MessageRejected, dead_letter: Writer | None
    ) -> Batch | None:
        groups, rest = batch.split_rejected(exc)
        for reason, bad in groups:  # each with its own reason
            await self._give_up(bad, MessageRejected(reason), 1, "sink", dead_letter)
        return rest if rest.envelopes else None

    async def _give_up(
        self,
        items: Batch,
        error: BaseException,
        attempts: int,
        stage: str,
        dead_letter: Writer | None,
    ) -> None:
        """After the last attempt: dead-letter the messages, or nack them and pause."""
        reason = one_line(error)
        if dead_letter is not None:
            source = self.source.describe()
            letters = [
                dead_letter_message(
                    env,
                    reason=reason,
                    attempts=attempts,
                    stage=stage,
                    route=self.name,
                    source=source,
                )
                for env in items.envelopes
            ]
            try:
                await dead_letter.write(letters)
            except Exception as exc:
                for envelope in items.envelopes:
                    # (an unreadable one nacked with its error is skipped by its source:
                    # released instead, it is read again once the dead-letter sink is back)
                    await self._nack(envelope, None if envelope.error is not None else error)
                self.stats.nacked += len(items)
                where = self.dead_letter.describe() if self.dead_letter else "?"
                raise DeadLetterFailed(
                    f"the dead-letter sink {where} failed ({one_line(exc)}); "
                    f"{len(items)} message(s) nacked"
                ) from exc
            self._to_settle.put((items.envelopes, None, "dead_lettered"))
            log.warning(
                "route %r: %d message(s) dead-lettered after %d attempt(s) (%s): %s",
                self.name, len(items), attempts, stage, reason,
            )  # fmt: skip
            return
        self._to_settle.put((items.envelopes, error, "nacked"))
        self._pauses += 1
        delay = self._retry.delay(self._pauses, self._rand)
        log.warning(
            "route %r: %d message(s) nacked after %d attempt(s) (%s): %s; pausing %.2f s",
            self.name, len(items), attempts, stage, reason, delay,
        )  # fmt: skip
        await trio.sleep(delay)

    # -- settling -----------------------------------------------------------------

    async def _ack(self, envelope: Envelope) -> None:
        try:
            await envelope.ack()
        except Exception as exc:
            log.warning(
                "route %r: ack of %r failed (%s); it may be delivered again",
                self.name, envelope, one_line(exc),
            )  # fmt: skip
        finally:
            self._settled(envelope)

    async def _nack(self, envelope: Envelope, error: BaseException | None) -> None:
        try:
            await envelope.nack(error)
        except Exception as exc:
            log.warning("route %r: nack of %r failed: %s", self.name, envelope, one_line(exc))
        finally:
            self._settled(envelope)

    def _settled(self, envelope: Envelope) -> None:
        try:
            self._inflight.remove(envelope)
        except KeyError:  # already handed back
            return
        self._slots.release()


async def run_routes(routes: Sequence[Route]) -> None:
    """Run every route concurrently in one nursery until all have returned."""
    async with trio.open_nursery() as nursery:
        for route in routes:
            nursery.start_soon(route.run, name=f"route {route.name}")
