"""The engine sets poison aside alone: each rejected message with its own reason, and a
batch refused for a message nobody names written again in halves until it is alone."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges import BatchRefused, Message, MessageRejected, RetryPolicy, Route, prepare_each
from bridges.testing import FakeBulkSource, FakeSink, messages

RETRY = RetryPolicy(attempts=3, initial=0.1, jitter=0.0)


class RefusingSink(FakeSink):
    """A STOMP broker in miniature: a batch holding a ``poison`` header is refused as a
    whole, and the writer is broken until the sink is opened again."""

    def __init__(self) -> None:
        super().__init__()
        self.refusals = 0
        self._broken = False

    @asynccontextmanager
    async def open(self) -> AsyncIterator[RefusingSink]:
        self._broken = False
        async with super().open():
            yield self

    async def write(self, batch: Sequence[Message]) -> None:
        assert not self._broken, "written after a refusal without opening again"
        if any("poison" in message.headers for message in batch):
            self.refusals += 1
            self._broken = True
            raise BatchRefused("the broker refused it: malformed frame")
        await super().write(batch)


def dead_ids(dead: FakeSink) -> list[str]:
    return [message.id for batch in dead.batches for message in batch]


@settings(max_examples=60, deadline=None)
@given(poison=st.sets(st.integers(0, 39), max_size=6), batch=st.integers(1, 40))
def test_a_refused_batch_is_halved_until_each_poison_message_is_alone(
    poison: set[int], batch: int
) -> None:
    items = [
        Message(m.body, {"poison": "yes"} if i in poison else {}, m.id)
        for i, m in enumerate(messages(40))
    ]
    source = FakeBulkSource(items)
    sink = RefusingSink()
    dead = FakeSink()

    async def main() -> None:
        r = Route("r", source, sink, dead_letter=dead, batch_count=batch, retry=RETRY)
        await r.run()
        assert r.stats.dead_lettered == len(poison)
        assert r.stats.written == 40 - len(poison)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    bad = {f"m{i}" for i in poison}
    assert sorted(sink.written, key=lambda i: int(i[1:])) == sink.written  # order kept
    assert set(sink.written) == {m.id for m in items} - bad
    assert sorted(dead_ids(dead)) == sorted(bad)
    assert all(len(letters) == 1 for letters in dead.batches)  # each alone
    assert all(
        letters[0].headers["bridge-error"] == "the broker refused it: malformed frame"
        for letters in dead.batches
    )
    assert source.nacked == []
    assert sorted(source.acked) == sorted(m.id for m in items)
    # Each poison message costs its retries and about two refusals per halving.
    assert sink.refusals <= len(poison) * (RETRY.attempts + 2 * batch.bit_length())


async def test_each_rejected_message_is_dead_lettered_with_its_own_reason() -> None:
    def prepare(message: Message) -> bytes:
        if message.id in ("m1", "m3"):
            raise ValueError(f"{message.id} is too big")
        if message.id == "m4":
            raise ValueError("m4 is not UTF-8")
        return message.body

    class CheckingSink(FakeSink):
        async def write(self, batch: Sequence[Message]) -> None:
            prepare_each(batch, prepare)
            await super().write(batch)

    source = FakeBulkSource(messages(6))
    sink = CheckingSink()
    dead = FakeSink()
    r = Route("r", source, sink, dead_letter=dead, batch_count=10, retry=RETRY)
    await r.run()
    assert sink.written == ["m0", "m2", "m5"]
    reasons = {m.id: m.headers["bridge-error"] for b in dead.batches for m in b}
    assert reasons == {"m1": "m1 is too big", "m3": "m3 is too big", "m4": "m4 is not UTF-8"}
    assert len(sink.batches) == 1  # the rest of the batch, in one write
    assert r.stats.dead_lettered == 3


def test_prepare_each_names_every_message_that_cannot_go() -> None:
    batch = messages(4)

    def prepare(message: Message) -> str:
        if message.id != "m2":
            return message.id
        raise ValueError("no")

    with pytest.raises(MessageRejected) as caught:
        prepare_each(batch, prepare)
    assert caught.value.indices == (2,)
    assert caught.value.reason_for(2) == "no"
    assert prepare_each(messages(2), lambda m: m.id) == ["m0", "m1"]


async def test_spark_write_all_keeps_each_rejected_messages_own_reason() -> None:
    from bridges.spark._bridged import write_all

    def prepare(message: Message) -> bytes:
        if message.id in ("m1", "m2"):
            raise ValueError(f"{message.id} refused")
        return message.body

    class CheckingSink(FakeSink):
        async def write(self, batch: Sequence[Message]) -> None:
            prepare_each(batch, prepare)
            await super().write(batch)

    sink = CheckingSink()
    rejected = await write_all(sink, messages(4), 10, RETRY)
    reasons = [(m.id, reason) for m, reason in rejected]
    assert reasons == [("m1", "m1 refused"), ("m2", "m2 refused")]
    assert sink.written == ["m0", "m3"]
