"""The Source and Sink contracts, as checks a family's tests run against a real server.

The engine's at-least-once promise rests on what every endpoint does; these
checks hold an endpoint to it, the same way for every family:

- :func:`check_source`: the Source contract;
- :func:`check_sink`: the Sink contract, the poison rule
  (:func:`~bridges.testing.check_poison`) included.

Each function's documentation lists the rules it checks, one by one.

A family's test passes a *factory*: an async context manager that makes a
fresh endpoint against the real server (a new queue, directory or stream, so
that checks do not see each other's messages) together with the means to
feed it (:class:`SourceCase`) or to read what it wrote (:class:`SinkCase`).
Messages are told apart by their bodies, which are unique per check. The
cases and the error are in :mod:`bridges.testing._cases`.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager

import trio
import trio.lowlevel

from .._endpoint import BulkReceiver, MessageRejected, Receiver, Writer
from .._message import Envelope, Message
from ._cases import ContractViolation, SinkCase, SinkFactory, SourceCase, SourceFactory
from ._poison import check_poison

#: Delays (s) after which a receive() or write() is cancelled, in turn: at the
#: first checkpoint, then a little later each time, so that the cancellation
#: lands at different points of the call.
_CANCEL_AFTER = (0.0, 0.0, 1e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.03)


def contract_messages(count: int, label: str) -> list[Message]:
    """``count`` messages whose bodies no other check (or earlier run) uses."""
    run = uuid.uuid4().hex[:10]
    return [
        Message(f"contract-{label}-{run}-{i}".encode(), {"contract-index": str(i)}, f"{label}{i}")
        for i in range(count)
    ]


def _fail(rule: str, detail: str) -> ContractViolation:
    return ContractViolation(f"{rule}: {detail}")


@asynccontextmanager
async def _one_error() -> AsyncIterator[None]:
    """A nursery's group of one error as that error: a violation reads as itself."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


@contextmanager
def _bounded(rule: Callable[..., object], seconds: float) -> Iterator[None]:
    try:
        with trio.fail_after(seconds):
            yield
    except trio.TooSlowError:
        what = (rule.__doc__ or rule.__name__).rstrip(".")
        raise _fail(what, f"not done in {seconds:g} s (a message lost, or a hang)") from None


def _tasks(skip: trio.Nursery | None = None) -> set[trio.lowlevel.Task]:
    """Every task below the current one, except those under ``skip`` (the publisher)."""
    found: set[trio.lowlevel.Task] = set()
    pending = [trio.lowlevel.current_task()]
    while pending:
        task = pending.pop()
        found.add(task)
        for nursery in task.child_nurseries:
            if nursery is not skip:
                pending.extend(nursery.child_tasks)
    return found


def _check_no_tasks_left(before: set[trio.lowlevel.Task], skip: trio.Nursery, what: str) -> None:
    left = _tasks(skip) - before
    if left:
        names = ", ".join(sorted(task.name for task in left))
        raise _fail("no task outlives the endpoint's async with", f"{what}: {names} still running")


# -- sources ----------------------------------------------------------------------------


async def check_source(
    factory: SourceFactory, *, count: int = 10, rule_seconds: float = 20.0, quiet: float = 0.3
) -> None:
    """Hold a source to the Source contract; raise ContractViolation if it breaks.

    The rules, each run on a fresh :class:`SourceCase` (a new queue, stream or
    directory) with ``count`` messages of unique bodies:

    - every published message is handed out, once while nothing is nacked;
    - an ack is final: an acked message is not handed out again, even after a
      reopen;
    - a nack makes the message available again (at the latest after a reopen);
    - closing, or cancelling the ``async with`` from outside, loses nothing:
      unsettled messages come again after a reopen, and no task of the source
      outlives its ``async with``;
    - a cancelled ``receive()`` hands out nothing: what it was about to return
      is still there for the next call;
    - a message handed out again (after a nack, a close or a cancelled
      ``async with``) has the same non-empty :attr:`~bridges.Message.id` as the
      first time: the stable id a sink de-duplicates on (unless
      :attr:`SourceCase.stable_ids` says the source has none for these messages).

    A source whose receiver is a :class:`~bridges.BulkReceiver` is taken from
    with ``receive_some()`` (which must hand out at least one envelope and no
    more than asked), and held to the same rules.

    Args:
      factory: opens a fresh :class:`SourceCase` against the real server;
        called once per rule.
      count: messages per rule.
      rule_seconds: bound on each rule (a lost message shows as this wait).
      quiet: how long "nothing more comes" is watched for, s.
    """
    rules = (
        _source_delivers_and_ack_is_final,
        _source_nack_makes_available_again,
        _source_close_and_cancel_lose_nothing,
        _source_cancelled_receive_hands_out_nothing,
    )
    for rule in rules:
        async with factory() as case:
            with _bounded(rule, rule_seconds):
                async with _one_error(), trio.open_nursery() as publishing:
                    await rule(case, publishing, max(count, 4), quiet)
                    publishing.cancel_scope.cancel()


@asynccontextmanager
async def _opened(case: SourceCase, publishing: trio.Nursery) -> AsyncIterator[Receiver]:
    """The source open, and proof on the way out that none of its tasks is left."""
    before = _tasks(publishing)
    async with case.source.open() as receiver:
        yield receiver
    _check_no_tasks_left(before, publishing, f"{case.source.describe()} closed")


async def _receive(receiver: Receiver, most: int, rule: str) -> Sequence[Envelope]:
    """One envelope from ``receive()``, or up to ``most`` from a
    :class:`~bridges.BulkReceiver`'s ``receive_some()`` (checked: at least one)."""
    if not isinstance(receiver, BulkReceiver):
        return (await receiver.receive(),)
    envelopes = await receiver.receive_some(most)
    if not 0 < len(envelopes) <= most:
        raise _fail(rule, f"receive_some({most}) handed out {len(envelopes)} envelopes")
    return envelopes


async def _take(
    receiver: Receiver, expected: set[bytes], taken: dict[bytes, Envelope], rule: str
) -> None:
    """Receive until every body of ``expected`` is in ``taken``; anything else is a violation."""
    while not expected <= taken.keys():
        # (at most what is still expected: more would take the next rule's messages)
        for envelope in await _receive(receiver, len(expected - taken.keys()), rule):
            body = envelope.message.body
            if body not in expected:
                raise _fail(rule, f"handed out {body!r}, which is not expected here")
            if body in taken:
                raise _fail(rule, f"handed out {body!r} twice without a nack in between")
            taken[body] = envelope


def _check_same_ids(
    case: SourceCase, first: dict[bytes, Envelope], again: dict[bytes, Envelope], rule: str
) -> None:
    """Each message handed out again has the id it had the first time (and one at all)."""
    if not case.stable_ids:
        return
    for body, envelope in again.items():
        before, after = first[body].message.id, envelope.message.id
        if not before or before != after:
            raise _fail(rule, f"{body!r} came again with id {after!r}, first {before!r}")


async def _nothing_more(receiver: Receiver, quiet: float, rule: str) -> None:
    with trio.move_on_after(quiet):
        envelope = await receiver.receive()
        await envelope.nack(None)
        raise _fail(rule, f"handed out {envelope.message.body!r} again")


async def _source_delivers_and_ack_is_final(
    case: SourceCase, publishing: trio.Nursery, count: int, quiet: float
) -> None:
    """every message is handed out, and an ack is final."""
    rule = "every message is handed out, and an ack is final"
    sent = contract_messages(count, "delivers")
    async with _opened(case, publishing) as receiver:
        publishing.start_soon(case.publish, sent)
        taken: dict[bytes, Envelope] = {}
        await _take(receiver, {m.body for m in sent}, taken, rule)
        for envelope in taken.values():
            await envelope.ack()
        await _nothing_more(receiver, quiet, rule)
    async with _opened(case, publishing) as receiver:
        await _nothing_more(receiver, quiet, f"{rule} (after a reopen)")


async def _source_nack_makes_available_again(
    case: SourceCase, publishing: trio.Nursery, count: int, quiet: float
) -> None:
    """a nack makes the message available again."""
    rule = "a nack makes the message available again"
    sent = contract_messages(count, "nack")
    released, failed = sent[0].body, sent[1].body
    again = {released, failed} if case.nack_redelivers else {released}
    async with _opened(case, publishing) as receiver:
        publishing.start_soon(case.publish, sent)
        taken: dict[bytes, Envelope] = {}
        await _take(receiver, {m.body for m in sent}, taken, rule)
        first = dict(taken)
        await taken.pop(released).nack(None)
        await taken.pop(failed).nack(RuntimeError("contract check: a failed delivery"))
        for envelope in taken.values():
            await envelope.ack()
    async with _opened(case, publishing) as receiver:
        retaken: dict[bytes, Envelope] = {}
        await _take(receiver, again, retaken, rule)
        _check_same_ids(case, first, retaken, "a message handed out again keeps its id")
        for envelope in retaken.values():
            await envelope.ack()
        await _nothing_more(receiver, quiet, "an ack is final (after a nack and a reopen)")


async def _source_close_and_cancel_lose_nothing(
    case: SourceCase, publishing: trio.Nursery, count: int, quiet: float
) -> None:
    """closing or cancelling the source loses nothing."""
    rule = "closing or cancelling the source loses nothing"
    sent = contract_messages(count, "close")
    half = len(sent) // 2
    acked = {m.body for m in sent[:half]}
    unsettled = {m.body for m in sent[half:]}
    before = _tasks(publishing)
    with trio.CancelScope() as outside:
        async with case.source.open() as receiver:
            publishing.start_soon(case.publish, sent)
            taken: dict[bytes, Envelope] = {}
            await _take(receiver, acked | unsettled, taken, rule)
            for body in acked:
                await taken[body].ack()
            # A route that crashes: its scope is cancelled while a receive() waits.
            outside.cancel()
            await receiver.receive()
            raise _fail(rule, "receive() returned in a cancelled scope with nothing to hand out")
    _check_no_tasks_left(before, publishing, f"{case.source.describe()} cancelled")
    async with _opened(case, publishing) as receiver:
        retaken: dict[bytes, Envelope] = {}
        await _take(receiver, unsettled, retaken, f"{rule} (unsettled come again, acked do not)")
        _check_same_ids(case, taken, retaken, "a message handed out again keeps its id")
        for envelope in retaken.values():
            await envelope.ack()
        await _nothing_more(receiver, quiet, "an ack is final (after a cancelled close)")


async def _source_cancelled_receive_hands_out_nothing(
    case: SourceCase, publishing: trio.Nursery, count: int, quiet: float
) -> None:
    """a cancelled receive() hands out nothing."""
    rule = "a cancelled receive() hands out nothing"
    sent = contract_messages(count * 2, "cancel")
    expected = {m.body for m in sent}
    async with _opened(case, publishing) as receiver:
        publishing.start_soon(case.publish, sent)
        taken: dict[bytes, Envelope] = {}
        attempt = 0
        while not expected <= taken.keys():
            delay = _CANCEL_AFTER[attempt % len(_CANCEL_AFTER)]
            attempt += 1
            # Every tenth call may wait as long as it needs: progress even on a slow server.
            with trio.move_on_after(math.inf if attempt % 10 == 0 else delay):
                for envelope in await _receive(receiver, len(expected - taken.keys()), rule):
                    body = envelope.message.body
                    if body not in expected or body in taken:
                        raise _fail(rule, f"handed out {body!r}, unexpected or twice")
                    taken[body] = envelope
        for envelope in taken.values():
            await envelope.ack()
        await _nothing_more(receiver, quiet, rule)


# -- sinks ------------------------------------------------------------------------------


async def check_sink(factory: SinkFactory, *, count: int = 10, rule_seconds: float = 20.0) -> None:
    """Hold a sink to the Sink contract; raise ContractViolation if it breaks.

    The rules, each run on a fresh :class:`SinkCase` with batches of
    ``count`` messages of unique bodies:

    - ``write()`` returns only once the batch is durable: the server shows it
      (``read_back``) before the writer closes, in order;
    - a message the sink can never write raises :class:`bridges.MessageRejected`
      naming its index in the batch, and the rest can still be written;
    - a message the target cannot take (not UTF-8, too many or too long headers,
      the sink's own :attr:`SinkCase.poison`) never takes its batch down: through a
      real route, every good message is written and every poison one is
      dead-lettered alone, with a reason (:mod:`bridges.testing._poison`);
    - a write or a whole ``async with`` cancelled half-way loses nothing once the
      batch is written again (duplicates are allowed, losses are not), and no task
      outlives the ``async with``.

    Args:
      factory: opens a fresh :class:`SinkCase` against the real server;
        called once per rule.
      count: messages per batch.
      rule_seconds: bound on each rule.
    """
    rules = (
        _sink_write_is_durable_on_return,
        _sink_rejects_with_indices,
        _sink_cancellation_loses_nothing,
    )
    for rule in rules:
        async with factory() as case:
            with _bounded(rule, rule_seconds):
                async with _one_error(), trio.open_nursery() as unused:
                    await rule(case, unused, max(count, 3))
    await check_poison(factory, rule_seconds=rule_seconds)


async def _bodies(case: SinkCase) -> list[bytes]:
    return [message.body for message in await case.read_back()]


def _check_holds(
    case: SinkCase, held: list[bytes], written: Sequence[Message], rule: str, *, exact: bool
) -> None:
    want = [m.body for m in written]
    if exact:
        ok = held == want if case.ordered else sorted(held) == sorted(want)
        if not ok:
            raise _fail(rule, f"the server holds {held!r}, expected {want!r}")
        return
    missing = [body for body in want if body not in held]
    if missing:
        raise _fail(rule, f"lost {missing!r}")
    extra = sorted(set(held) - set(want))
    if extra:
        raise _fail(rule, f"the server holds {extra!r}, which were never written")


@asynccontextmanager
async def _writing(case: SinkCase, nursery: trio.Nursery) -> AsyncIterator[Writer]:
    before = _tasks(nursery)
    async with case.sink.open() as writer:
        yield writer
    _check_no_tasks_left(before, nursery, f"{case.sink.describe()} closed")


async def _sink_write_is_durable_on_return(
    case: SinkCase, nursery: trio.Nursery, count: int
) -> None:
    """write() returns only when the batch is durable, in order."""
    rule = "write() returns only when the batch is durable, in order"
    first, second, third = (contract_messages(count, f"durable{n}") for n in range(3))
    async with _writing(case, nursery) as writer:
        await writer.write(first)
        _check_holds(case, await _bodies(case), first, rule, exact=True)
        await writer.write(second)
        _check_holds(case, await _bodies(case), first + second, rule, exact=True)
    async with _writing(case, nursery) as writer:
        await writer.write(third)
        _check_holds(case, await _bodies(case), first + second + third, rule, exact=True)
    _check_holds(case, await _bodies(case), first + second + third, rule, exact=True)


async def _sink_rejects_with_indices(case: SinkCase, nursery: trio.Nursery, count: int) -> None:
    """a message that can never be written raises MessageRejected with its index."""
    if case.reject is None:
        return
    rule = "a message that can never be written raises MessageRejected with its index"
    good = contract_messages(2, "reject")
    async with _writing(case, nursery) as writer:
        try:
            await writer.write([good[0], case.reject, good[1]])
        except MessageRejected as exc:
            if exc.indices is None or 1 not in exc.indices or {0, 2} & set(exc.indices):
                raise _fail(rule, f"indices {exc.indices!r}, expected (1,)") from None
        else:
            raise _fail(rule, "the batch was written")
        await writer.write(good)
    held = await _bodies(case)
    if case.reject.body in held:
        raise _fail(rule, "the rejected message was written")
    _check_holds(case, held, good, rule, exact=False)


async def _sink_cancellation_loses_nothing(
    case: SinkCase, nursery: trio.Nursery, count: int
) -> None:
    """a cancelled write loses nothing once written again."""
    rule = "a cancelled write loses nothing once written again"
    written: list[Message] = []
    for round, delay in enumerate(_CANCEL_AFTER):
        batch = contract_messages(count, f"cancel{round}")
        written.extend(batch)
        # The route's scope cancelled from outside, during the write or the close.
        before = _tasks(nursery)
        with trio.move_on_after(delay):
            async with case.sink.open() as writer:
                await writer.write(batch)
        _check_no_tasks_left(before, nursery, f"{case.sink.describe()} cancelled")
        async with _writing(case, nursery) as writer:  # the engine's retry
            await writer.write(batch)
    _check_holds(case, await _bodies(case), written, rule, exact=False)
