"""Group commit: a sink writes as soon as it is idle, and what arrives during a write
gathers into the next one; and a sink that will not open while a batch is pending
counts as failed attempts at that batch (issue 32 §8, issue 33 §1)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges import Message, RetryPolicy, Route, default_registry, parse_config
from bridges.testing import FakeBulkSource, FakeSink, FakeSource, messages

RETRY = RetryPolicy(attempts=3, initial=1.0, max=8.0, multiplier=2.0, jitter=0.0)


class TimedSink(FakeSink):
    """A FakeSink that records when each write started and how many ran at once."""

    def __init__(self, *, delay: float, source: FakeSource | None = None) -> None:
        super().__init__(delay=delay, source=source)
        self.starts: list[float] = []
        self.writing = 0
        self.most_at_once = 0

    async def write(self, batch: Sequence[Message]) -> None:
        self.starts.append(trio.current_time())
        self.writing += 1
        self.most_at_once = max(self.most_at_once, self.writing)
        try:
            await super().write(batch)
        finally:
            self.writing -= 1


def ids(sink: FakeSink) -> list[list[str]]:
    return [[m.id for m in batch] for batch in sink.batches]


async def test_a_lone_message_is_written_at_once_with_the_default_batching(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource(end=False)
    sink = TimedSink(delay=0.004, source=source)  # a write and its fsync: 4 ms
    r = Route("r", source, sink)  # the defaults: no timer
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await r.ready.wait()
        await trio.sleep(1)
        pushed = trio.current_time()
        source.push(*messages(1))
        await trio.sleep(1)
        r.stop()
    assert sink.starts == [pushed]
    assert source.acked == ["m0"]


def test_the_config_default_is_group_commit(tmp_path: Path) -> None:
    text = {
        "routes": {
            "r": {
                "source": {"type": "file", "path": "in"},
                "sink": {"type": "file", "path": "out"},
            }
        }
    }
    config = parse_config(text, default_registry(plugins=False), base_dir=tmp_path)
    assert config.routes[0].batch.time == 0.0
    assert config.routes[0].batch.count == 100


@pytest.mark.parametrize("source_class", [FakeSource, FakeBulkSource])
async def test_messages_arriving_during_a_slow_write_gather_into_exactly_the_next_write(
    autojump_clock: trio.testing.MockClock, source_class: type[FakeSource]
) -> None:
    source = source_class(end=False)
    sink = TimedSink(delay=1.0, source=source)
    r = Route("r", source, sink, batch_count=4)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await r.ready.wait()
        t0 = trio.current_time()
        source.push(*messages(1, "a"))  # written at once, from t0 to t0 + 1
        for i in range(6):  # six during that write: the next two writes, four then two
            await trio.sleep(0.1)
            source.push(*messages(1, f"b{i}-"))
        await trio.sleep(1.5)  # (t0 + 2.1: the third write, from t0 + 2, is in flight)
        source.push(*messages(1, "c"))
        await trio.sleep(5)
        r.stop()
    assert ids(sink) == [
        ["a0"],
        ["b0-0", "b1-0", "b2-0", "b3-0"],  # batch_count
        ["b4-0", "b5-0"],
        ["c0"],
    ]
    assert [s - t0 for s in sink.starts] == pytest.approx([0.0, 1.0, 2.0, 3.0])
    assert sink.acked_before_write == []
    assert sink.most_at_once == 1


@pytest.mark.parametrize("source_class", [FakeSource, FakeBulkSource])
async def test_what_a_source_has_ready_fills_the_batch_even_when_the_sink_never_waits(
    autojump_clock: trio.testing.MockClock, source_class: type[FakeSource]
) -> None:
    """A source taken one message at a time, and a sink whose writes take no time: the
    batches are still full (group commit, not a write per message), with no timer."""
    source = source_class(messages(250))
    sink = TimedSink(delay=0.0, source=source)
    started = trio.current_time()
    await Route("r", source, sink, batch_count=100).run()
    assert [len(batch) for batch in sink.batches] == [100, 100, 50]
    assert trio.current_time() == started


def expected_writes(
    arrivals: Sequence[float], duration: float, count: int
) -> tuple[list[list[int]], list[float]]:
    """Group commit on paper: each write starts when the sink is free and a message
    waits, and carries every message that arrived by then, up to ``count``."""
    batches: list[list[int]] = []
    starts: list[float] = []
    free = float("-inf")
    next_one = 0
    while next_one < len(arrivals):
        start = max(free, arrivals[next_one])
        batch = [i for i in range(next_one, len(arrivals)) if arrivals[i] <= start][:count]
        batches.append(batch)
        starts.append(start)
        free = start + duration
        next_one += len(batch)
    return batches, starts


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    duration=st.sampled_from([0.0371, 0.2513, 1.0007]),
    count=st.integers(1, 8),
    bulk=st.booleans(),
)
def test_any_arrival_schedule_is_written_by_group_commit_in_order_after_its_write(
    gaps: list[int], duration: float, count: int, bulk: bool
) -> None:
    """One message per arrival, at multiples of 0.1 s, so that no arrival falls on
    the instant a write ends (the write durations are not multiples of 0.1 s)."""
    arrivals = [sum(gaps[: i + 1]) / 10 for i in range(len(gaps))]
    source = (FakeBulkSource if bulk else FakeSource)(end=False)
    sink = TimedSink(delay=duration, source=source)
    t0: list[float] = []

    async def main() -> None:
        r = Route("r", source, sink, batch_count=count)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(r.run)
            await r.ready.wait()
            t0.append(trio.current_time())
            for i, at in enumerate(arrivals):
                await trio.sleep_until(t0[0] + at)
                source.push(Message(b"x", {}, f"m{i}"))
            await trio.sleep(len(arrivals) * duration + 1)
            r.stop()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    batches, starts = expected_writes(arrivals, duration, count)
    assert ids(sink) == [[f"m{i}" for i in batch] for batch in batches]
    assert [s - t0[0] for s in sink.starts] == pytest.approx(starts, abs=1e-6)
    assert source.acked == [f"m{i}" for i in range(len(arrivals))]
    assert sink.acked_before_write == []
    assert sink.most_at_once == 1


class UnopenableSink(FakeSink):
    """Opens ``opens_ok`` times, then fails to open (a target that went away)."""

    def __init__(self, script: Sequence[BaseException | None], opens_ok: int) -> None:
        super().__init__(script)
        self.opens_ok = opens_ok
        self.open_times: list[float] = []

    @asynccontextmanager
    async def open(self) -> AsyncIterator[FakeSink]:
        self.opens += 1
        self.open_times.append(trio.current_time())
        if self.opens > self.opens_ok:
            raise OSError("connection refused")
        yield self


@pytest.mark.parametrize("dead_letter", [True, False])
async def test_a_sink_that_will_not_open_while_a_batch_is_pending_uses_up_its_attempts(
    autojump_clock: trio.testing.MockClock, dead_letter: bool
) -> None:
    """The first write fails; every open after it fails too. Each failed open is an
    attempt at the pending batch, spaced by the policy's backoff (1 s, then 2 s), and
    after the third the batch goes to the dead-letter sink, or is nacked."""
    source = FakeSource(messages(1), end=False, requeue=False)
    sink = UnopenableSink([OSError("lost")], opens_ok=1)
    dead = FakeSink()
    r = Route(
        "r", source, sink, dead_letter=dead if dead_letter else None, retry=RETRY, rand=lambda: 0.0
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await r.ready.wait()
        t0 = trio.current_time()
        await trio.sleep(2.9)
        assert (source.acked, source.nacked, dead.batches) == ([], [], [])
        await trio.sleep(0.2)  # t0 + 3.1: the third attempt failed at t0 + 3
        r.stop()
    assert [t - t0 for t in sink.open_times[:3]] == pytest.approx([0.0, 1.0, 3.0])
    assert r.stats.retries == 2
    if dead_letter:
        assert [m.headers["bridge-attempts"] for b in dead.batches for m in b] == ["3"]
        assert source.acked == ["m0"]
    else:
        assert [i for i, _ in source.nacked] == ["m0"]
