"""bridges.testing: the fakes pass the contract kit, and the kit catches endpoints that break it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import attrs
import pytest
import trio

import bridges.testing
from bridges import Envelope, Message, MessageRejected
from bridges.testing import (
    ContractViolation,
    FakeBulkSource,
    FakeSink,
    FakeSource,
    SinkCase,
    SourceCase,
    check_poison,
    check_sink,
    check_source,
)

BAD = Message(b"cannot be written", {"bad": "yes"}, "bad")


def sources(
    make: Callable[[], FakeSource], *, nack_redelivers: bool = True, stable_ids: bool = True
) -> Callable[[], AbstractAsyncContextManager[SourceCase]]:
    @asynccontextmanager
    async def factory() -> AsyncIterator[SourceCase]:
        source = make()

        async def publish(batch: Sequence[Message]) -> None:
            source.push(*batch)

        yield SourceCase(source, publish, nack_redelivers=nack_redelivers, stable_ids=stable_ids)

    return factory


def sinks(
    make: Callable[[], FakeSink],
    *,
    reject: Message | None = None,
    poison: Sequence[Message] = (),
) -> Callable[[], AbstractAsyncContextManager[SinkCase]]:
    @asynccontextmanager
    async def factory() -> AsyncIterator[SinkCase]:
        sink = make()

        async def read_back() -> list[Message]:
            return [message for batch in sink.batches for message in batch]

        yield SinkCase(sink, read_back, reject=reject, poison=poison)

    return factory


class RejectingSink(FakeSink):
    """Rejects messages with a ``bad`` header, naming them (or not, when ``name_them`` is off)."""

    def __init__(self, *, name_them: bool = True) -> None:
        super().__init__()
        self.name_them = name_them

    async def write(self, batch: Sequence[Message]) -> None:
        bad = [i for i, message in enumerate(batch) if "bad" in message.headers]
        if bad:
            raise MessageRejected("bad header", bad if self.name_them else None)
        await super().write(batch)


class LossySource(FakeSource):
    """Takes the message off its queue before a checkpoint: a cancelled receive loses it."""

    async def receive(self) -> Envelope:
        if not self.pending:
            return await super().receive()
        message = self.pending.popleft()
        await trio.lowlevel.checkpoint()
        self.pending.appendleft(message)
        return await super().receive()


class EmptyHandedSource(FakeBulkSource):
    """Returns from receive_some with nothing (it should wait for a message)."""

    async def receive_some(self, most: int) -> list[Envelope]:
        await trio.lowlevel.checkpoint()
        return []


class LossyBulkSource(FakeBulkSource):
    """Takes a message off its queue before a checkpoint: a cancelled receive_some loses it."""

    async def receive_some(self, most: int) -> list[Envelope]:
        if not self.pending:
            return await super().receive_some(most)
        message = self.pending.popleft()
        await trio.lowlevel.checkpoint()
        self.pending.appendleft(message)
        return await super().receive_some(most)


class ForgetfulSource(FakeSource):
    """An ack that does not stick: the message is handed out again after a reopen."""

    async def _ack(self, message: Message) -> None:
        await super()._ack(message)
        self.pending.append(message)


class LazySink(FakeSink):
    """Returns from write() at once and makes the batch visible only when closed."""

    @asynccontextmanager
    async def open(self) -> AsyncIterator[LazySink]:
        self.held: list[list[Message]] = []
        async with super().open():
            yield self
        self.batches.extend(self.held)

    async def write(self, batch: Sequence[Message]) -> None:
        self.held.append(list(batch))


async def test_the_fakes_keep_the_contracts() -> None:
    await check_source(sources(lambda: FakeSource(end=False)), quiet=0.05)
    await check_sink(sinks(lambda: RejectingSink(), reject=BAD))


async def test_a_bulk_source_keeps_the_source_contract_through_receive_some() -> None:
    source = FakeBulkSource(end=False)
    await check_source(sources(lambda: source), quiet=0.05)
    assert max(source.asked) > 1  # taken many at a time


@pytest.mark.parametrize("lossy", [LossySource, LossyBulkSource])
async def test_a_receive_that_loses_messages_when_cancelled_is_caught(
    lossy: type[FakeSource],
) -> None:
    with pytest.raises(ContractViolation, match=r"cancelled receive\(\) hands out nothing"):
        await check_source(sources(lambda: lossy(end=False)), rule_seconds=1, quiet=0.05)


async def test_a_receive_some_that_returns_nothing_is_caught() -> None:
    empty = sources(lambda: EmptyHandedSource(end=False))
    with pytest.raises(ContractViolation, match=r"receive_some\(\d+\) handed out 0 envelopes"):
        await check_source(empty, rule_seconds=1, quiet=0.05)


async def test_a_source_whose_ack_does_not_stick_is_caught() -> None:
    with pytest.raises(ContractViolation, match="an ack is final"):
        await check_source(sources(lambda: ForgetfulSource(end=False)), quiet=0.05)


async def test_a_source_that_drops_nacked_messages_is_caught() -> None:
    dropping = sources(lambda: FakeSource(end=False, requeue=False))
    with pytest.raises(ContractViolation, match="nack makes the message available again"):
        await check_source(dropping, rule_seconds=1, quiet=0.05)


async def test_a_source_whose_ids_change_on_redelivery_is_caught() -> None:
    class Renaming(FakeSource):  # a new id per delivery, as RabbitMQ's STOMP message-id
        async def _nack(self, message: Message, error: BaseException | None) -> None:
            await super()._nack(attrs.evolve(message, id=message.id + "'"), error)

    with pytest.raises(ContractViolation, match="a message handed out again keeps its id"):
        await check_source(sources(lambda: Renaming(end=False)), rule_seconds=1, quiet=0.05)
    unstable = sources(lambda: Renaming(end=False), stable_ids=False)
    await check_source(unstable, quiet=0.05)


async def test_a_source_that_may_dead_letter_on_nack_needs_only_releases_back() -> None:
    class DeadLettering(FakeSource):
        async def _nack(self, message: Message, error: BaseException | None) -> None:
            if error is None:
                await super()._nack(message, error)

    with pytest.raises(ContractViolation, match="nack makes"):
        await check_source(sources(lambda: DeadLettering(end=False)), rule_seconds=1, quiet=0.05)
    relaxed = sources(lambda: DeadLettering(end=False), nack_redelivers=False)
    await check_source(relaxed, quiet=0.05)


async def test_a_write_that_returns_before_durable_is_caught() -> None:
    with pytest.raises(ContractViolation, match="only when the batch is durable"):
        await check_sink(sinks(LazySink))


async def test_a_rejection_without_indices_is_caught() -> None:
    with pytest.raises(ContractViolation, match="MessageRejected with its index"):
        await check_sink(sinks(lambda: RejectingSink(name_them=False), reject=BAD))


def test_the_testing_surface_is_pinned() -> None:
    public = sorted(n for n in dir(bridges.testing) if n.isidentifier() and not n.startswith("_"))
    assert public == [
        "ContractViolation", "FakeBulkSource", "FakeSink", "FakeSource", "HOSTILE",
        "PoisonOutcome", "SinkCase", "SinkFactory", "SourceCase", "SourceFactory",
        "check_poison", "check_sink", "check_source", "contract_messages", "messages",
        "wait_until",
    ]  # fmt: skip


class StrictSink(FakeSink):
    """Refuses a header that is not UTF-8 text, as a STOMP client does: in one of three ways."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    async def write(self, batch: Sequence[Message]) -> None:
        bad = [i for i, m in enumerate(batch) if not _utf8(m)]
        if bad and self.how == "fails the batch":  # today's stomp sink
            raise OSError("a header cannot be encoded as UTF-8")
        if bad and self.how == "rejects the batch":  # names every message
            raise MessageRejected("not UTF-8", range(len(batch)))
        if bad and self.how == "drops it":  # writes the rest, says nothing
            batch = [m for i, m in enumerate(batch) if i not in bad]
        if bad and self.how == "rejects it":
            raise MessageRejected.each({i: f"message {i} is not UTF-8" for i in bad})
        await super().write(batch)


def _utf8(message: Message) -> bool:
    try:
        "".join([*message.headers, *message.headers.values(), message.id]).encode()
    except UnicodeEncodeError:
        return False
    return True


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("fails the batch", r"good message\(s\) dead-lettered"),
        ("rejects the batch", r"good message\(s\) dead-lettered"),
        ("drops it", "neither written nor dead-lettered"),
    ],
)
async def test_a_poison_message_that_takes_its_batch_down_is_caught(how: str, says: str) -> None:
    with pytest.raises(ContractViolation, match=says):
        await check_poison(sinks(lambda: StrictSink(how)))


async def test_a_sink_that_rejects_the_poison_alone_passes_and_each_has_its_reason() -> None:
    outcome = await check_poison(sinks(lambda: StrictSink("rejects it")))
    assert len(outcome.dead) == 3  # the three HOSTILE messages that are not UTF-8
    assert all(reason.startswith("message ") for reason in outcome.dead.values())
    assert len(set(outcome.dead.values())) == 3  # each dead letter with its own reason
    assert len(outcome.held) == len(outcome.batch) - 3


async def test_declared_poison_must_be_dead_lettered_not_written() -> None:
    poison = [Message(b"too big for this target", {}, "")]
    with pytest.raises(ContractViolation, match=r"poison message .* was written"):
        await check_poison(sinks(FakeSink, poison=poison))
    bad = [Message(b"bad", {"bad": "yes"}, "")]
    await check_poison(sinks(RejectingSink, poison=bad), mix=[None, 0, None, 0, 0])
