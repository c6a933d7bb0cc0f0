"""The engine with fake endpoints: order, acks after durability, window, retries, DLQ, shutdown."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from itertools import pairwise
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges import Envelope, Message, MessageRejected, RetryPolicy, Route
from bridges._message import trusted_message
from bridges.testing import FakeBulkSource, FakeSink, FakeSource, messages, wait_until

NO_JITTER = RetryPolicy(attempts=3, initial=1.0, max=8.0, multiplier=2.0, jitter=0.0)

#: A source the engine takes from one envelope at a time, and one it takes from many at a time.
each_source = pytest.mark.parametrize("source_class", [FakeSource, FakeBulkSource])


def route(
    source: FakeSource,
    sink: FakeSink,
    *,
    retry: RetryPolicy = NO_JITTER,
    **kwargs: object,
) -> Route:
    return Route("r", source, sink, retry=retry, rand=lambda: 0.5, **kwargs)  # type: ignore[arg-type]


@each_source
async def test_every_message_arrives_in_order_in_batches_and_is_acked_after_its_write(
    source_class: type[FakeSource],
) -> None:
    source = source_class(messages(250))
    sink = FakeSink(source=source)
    r = route(source, sink, batch_count=100, batch_time=0)
    await r.run()
    assert sink.written == [f"m{i}" for i in range(250)]
    assert all(len(batch) <= 100 for batch in sink.batches)
    assert source.acked == sink.written
    assert sink.acked_before_write == []
    assert (r.stats.received, r.stats.written, r.in_flight) == (250, 250, 0)


async def test_each_batch_written_is_one_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    """What ``bridges run -v`` shows: a line per batch, with its size."""
    source = FakeSource(messages(250))
    sink = FakeSink(source=source)
    with caplog.at_level(logging.DEBUG, logger="bridges.route"):
        await route(source, sink, batch_count=100, batch_time=0).run()
    wrote = [r.getMessage() for r in caplog.records if "wrote" in r.getMessage()]
    assert [line.split(" in ")[0] for line in wrote] == [
        f"route 'r': wrote {len(batch)} message(s)" for batch in sink.batches
    ]
    assert all(line.endswith(" ms") for line in wrote)


async def test_batches_wait_for_more_by_time(autojump_clock: trio.testing.MockClock) -> None:
    source = FakeSource(end=False)
    sink = FakeSink()
    r = route(source, sink, batch_count=100, batch_time=1.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        for i in range(6):  # one every 0.3 s: batches by time, not by count
            source.push(*messages(1, f"t{i}-"))
            await trio.sleep(0.3)
        await trio.sleep(2)
        r.stop()
    sizes = [len(b) for b in sink.batches]
    assert sum(sizes) == 6
    assert max(sizes) > 1
    assert len(sizes) > 1


async def test_a_message_queued_during_a_write_waits_batch_time_from_then_not_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A batch is written ``batch_time`` after its first message was ready: one that
    arrived while the batch before was being written does not wait for that write
    to end before its time starts (issue 26, latency)."""
    source = FakeSource(end=False)
    sink = FakeSink(delay=0.5)
    r = route(source, sink, batch_count=100, batch_time=1.0)
    writes: list[tuple[float, float]] = []  # (started, first message ready)
    r.stats.observe = lambda count, started, since: writes.append((started, since))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await r.ready.wait()
        t0 = trio.current_time()
        source.push(*messages(1, "a"))  # written at t0 + 1.0, until t0 + 1.5
        await trio.sleep(1.1)
        source.push(*messages(1, "b"))  # ready at t0 + 1.1, during that write
        await trio.sleep(3)
        r.stop()
    assert sink.written == ["a0", "b0"]
    assert [(start - t0, since - t0) for start, since in writes] == [
        pytest.approx((1.0, 0.0)),
        pytest.approx((2.1, 1.1)),  # not 2.5: a's write did not delay b's time
    ]


async def test_a_full_batch_is_written_at_once_without_waiting_for_its_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource(end=False)
    sink = FakeSink()
    r = route(source, sink, batch_count=3, batch_time=10.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        source.push(*messages(2))
        await trio.sleep(1)
        assert sink.batches == []  # two of three: waiting for a third, or for the time
        source.push(*messages(2, "n"))
        await trio.sleep(0.01)
        assert [[m.id for m in b] for b in sink.batches] == [["m0", "m1", "n0"]]
        await trio.sleep(10)
        assert sink.written == ["m0", "m1", "n0", "n1"]  # the last one by time
        r.stop()


@pytest.mark.parametrize("batch_time", [0.0, 0.5])
async def test_transform_errors_in_batches_by_count_and_time_keep_everything_in_order(
    autojump_clock: trio.testing.MockClock, batch_time: float
) -> None:
    def every_third_fails(message: Message) -> Message:
        if int(message.id[1:]) % 3 == 1:
            raise ValueError("no")
        return message

    source = FakeSource(end=False)
    sink, dead = FakeSink(source=source), FakeSink()
    r = route(
        source,
        sink,
        transforms=[every_third_fails],
        dead_letter=dead,
        batch_count=4,
        batch_time=batch_time,
    )
    ids = [f"m{i}" for i in range(30)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        for start in range(0, 30, 5):  # in bursts, some more than a batch, some less
            source.push(*[Message(i.encode(), {}, i) for i in ids[start : start + 5]])
            await trio.sleep(0.3)
        await wait_until(lambda: r.stats.written + r.stats.dead_lettered == 30)
        r.stop()
    failing = [i for i in ids if int(i[1:]) % 3 == 1]
    assert sink.written == [i for i in ids if i not in failing]
    assert all(len(b) <= 4 for b in sink.batches)
    assert [m.id for b in dead.batches for m in b] == failing
    assert sorted(source.acked) == sorted(ids)
    assert sink.acked_before_write == []
    assert r.in_flight == 0


def test_trusted_message_is_the_same_value_as_message() -> None:
    fields = attrs.fields(Message)
    assert [f.name for f in fields] == ["body", "headers", "id", "destination"]
    assert all(f.validator is None and f.converter is None for f in fields)
    made = trusted_message(b"b", {"k": "v"}, "i")
    assert type(made) is Message
    assert made == Message(b"b", {"k": "v"}, "i")
    assert made.destination is None
    assert attrs.evolve(made, id="j").id == "j"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.id = "x"  # type: ignore[misc]


@each_source
async def test_the_in_flight_window_bounds_what_the_source_hands_out(
    source_class: type[FakeSource],
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = source_class(messages(100))
    sink = FakeSink()
    sink.gate = trio.Event()
    r = route(source, sink, in_flight=10, batch_count=4, batch_time=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await trio.sleep(5)
        assert len(source.handed) == 10
        assert r.in_flight == 10
        sink.gate.set()
    assert sink.written == [f"m{i}" for i in range(100)]


async def test_a_failed_write_is_retried_with_exponential_backoff_on_a_fresh_sink(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource(messages(5))
    sink = FakeSink([OSError("disk full"), OSError("disk full")])
    r = route(source, sink, batch_time=0)
    start = trio.current_time()
    await r.run()
    # attempts 1 and 2 fail: waits of initial (1 s) then 2 s, jitter off
    assert trio.current_time() - start == pytest.approx(3.0)
    assert sink.written == [f"m{i}" for i in range(5)]
    assert sink.opens == 3
    assert r.stats.retries == 2
    assert source.nacked == []


class _ConnectionDiesOnceSink(FakeSink):
    """A sink with a background connection (as STOMP's) that fails 0.5 s after
    its first open, whatever the route is doing then."""

    died = False

    @asynccontextmanager
    async def open(self) -> AsyncIterator[FakeSink]:
        self.opens += 1
        async with trio.open_nursery() as nursery:

            async def connection() -> None:
                if not self.died:
                    await trio.sleep(0.5)
                    self.died = True
                    raise OSError("connection lost")

            nursery.start_soon(connection)
            yield self
            nursery.cancel_scope.cancel()


async def test_a_sink_failing_while_a_batch_is_gathered_loses_none_of_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The batch being filled (2 of 10, waiting up to 2 s for more) survives the
    sink's reopen: it is written first, and its window places come back."""
    source = FakeSource(end=False)
    sink = _ConnectionDiesOnceSink(source=source)
    r = route(source, sink, in_flight=2, batch_count=10, batch_time=2.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        source.push(*messages(2))
        await trio.sleep(5)  # the sink dies at 0.5 s and is opened again
        source.push(*messages(6, "n"))
        await wait_until(lambda: len(source.acked) == 8)
        r.abort()
    assert sink.written == ["m0", "m1", *(f"n{i}" for i in range(6))]
    assert sink.opens == 2
    assert sink.died
    assert r.in_flight == 0


async def test_after_the_last_attempt_messages_go_to_the_dead_letter_sink_with_why(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource(messages(3))
    sink = FakeSink(always=OSError("no space left on device"))
    dead = FakeSink()
    r = Route("orders", source, sink, dead_letter=dead, retry=NO_JITTER, batch_time=0)
    await r.run()
    letters = [m for batch in dead.batches for m in batch]
    assert [m.id for m in letters] == ["m0", "m1", "m2"]
    headers = letters[0].headers
    assert headers["bridge-error"] == "OSError: no space left on device"
    assert headers["bridge-attempts"] == "3"
    assert headers["bridge-route"] == "orders"
    assert headers["bridge-source"] == "fake m0"
    assert headers["bridge-stage"] == "sink"
    assert headers["n"] == "0"  # the original headers are kept
    assert letters[0].body == b"m0"
    assert source.acked == ["m0", "m1", "m2"]
    assert r.stats.dead_lettered == 3
    assert r.stats.written == 0


async def test_without_a_dead_letter_sink_the_batch_is_nacked_and_the_route_pauses(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource(messages(2), requeue=False)
    sink = FakeSink(always=ConnectionError("refused"))
    retry = attrs.evolve(NO_JITTER, attempts=2)
    r = route(source, sink, retry=retry, batch_count=2, batch_time=0.5)
    start = trio.current_time()
    await r.run()
    assert [i for i, _ in source.nacked] == ["m0", "m1"]
    assert all(isinstance(e, ConnectionError) for _, e in source.nacked)
    # waits: 1 s after attempt 1, then a pause of 1 s (first pause) after the nack
    assert trio.current_time() - start == pytest.approx(2.0)
    assert r.stats.nacked == 2


async def test_nacked_messages_come_back_and_are_delivered_once_the_sink_recovers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource(messages(3), end=False)
    sink = FakeSink([OSError("x")] * 5)
    r = route(source, sink, retry=attrs.evolve(NO_JITTER, attempts=2), batch_time=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await wait_until(lambda: len(source.acked) >= 3, 1)
        r.stop()
    assert sorted(sink.written) == ["m0", "m1", "m2"]
    assert sorted(source.acked) == ["m0", "m1", "m2"]
    assert len(source.nacked) >= 3


async def test_a_transform_error_dead_letters_that_message_without_retry() -> None:
    def explode(message: Message) -> Message:
        if message.id == "m1":
            raise ValueError("bad body")
        return message

    source = FakeSource(messages(3))
    sink, dead = FakeSink(), FakeSink()
    r = route(source, sink, transforms=[explode], dead_letter=dead, batch_time=0)
    await r.run()
    assert sink.written == ["m0", "m2"]
    [[letter]] = dead.batches
    assert letter.id == "m1"
    assert letter.headers["bridge-stage"] == "transform"
    assert "ValueError('bad body')" in letter.headers["bridge-error"]
    assert letter.headers["bridge-attempts"] == "1"
    assert sorted(source.acked) == ["m0", "m1", "m2"]


@each_source
async def test_async_transforms_run_and_a_filter_acks_what_it_drops(
    source_class: type[FakeSource],
) -> None:
    async def tag(message: Message) -> Message | None:
        await trio.lowlevel.checkpoint()
        if message.id == "m2":
            return None
        return attrs.evolve(message, headers={**message.headers, "seen": "yes"})

    source = source_class(messages(4))
    sink = FakeSink()
    r = route(source, sink, transforms=[tag], batch_time=0)
    await r.run()
    assert sink.written == ["m0", "m1", "m3"]
    assert all(m.headers["seen"] == "yes" for b in sink.batches for m in b)
    assert sorted(source.acked) == ["m0", "m1", "m2", "m3"]
    assert r.stats.filtered == 1


async def test_rejected_messages_are_dead_lettered_and_the_rest_written_at_once() -> None:
    source = FakeSource(messages(4))
    sink = FakeSink([MessageRejected("no destination", [1, 3])])
    dead = FakeSink()
    r = route(source, sink, dead_letter=dead, batch_time=1.0, batch_count=4)
    await r.run()
    assert sink.written == ["m0", "m2"]
    assert [m.id for m in dead.batches[0]] == ["m1", "m3"]
    assert dead.batches[0][0].headers["bridge-error"] == "no destination"
    assert r.stats.retries == 0


@each_source
async def test_stop_takes_nothing_new_and_finishes_what_is_in_flight(
    source_class: type[FakeSource],
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = source_class(messages(1000), end=False)
    sink = FakeSink(delay=1.0, source=source)
    r = route(source, sink, in_flight=50, batch_count=10, batch_time=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await trio.sleep(2.5)
        r.stop()
        handed_at_stop = len(source.handed)
        assert 0 < r.in_flight <= 50
    assert r.finished.is_set()
    assert len(source.handed) == handed_at_stop
    assert source.acked == source.handed  # everything taken was finished
    assert source.nacked == []
    assert not source.open_now


@each_source
async def test_abort_hands_in_flight_messages_back_without_an_error(
    source_class: type[FakeSource],
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = source_class(messages(100), requeue=False)
    sink = FakeSink()
    sink.gate = trio.Event()  # never set: the sink hangs
    r = route(source, sink, in_flight=20, batch_time=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await trio.sleep(1)
        r.abort()
    assert len(source.nacked) == 20
    assert all(error is None for _, error in source.nacked)
    assert source.acked == []
    assert r.stats.handed_back == 20


@each_source
async def test_cancelling_the_run_releases_in_flight_messages(
    source_class: type[FakeSource],
) -> None:
    source = source_class(messages(10), requeue=False)
    sink = FakeSink()
    sink.gate = trio.Event()
    r = route(source, sink, batch_time=0)
    with trio.move_on_after(0.2):
        await r.run()
    assert len(source.nacked) == 10
    assert not source.open_now


async def test_a_bulk_source_is_asked_for_as_many_as_the_window_has_room_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeBulkSource(messages(100))
    sink = FakeSink(source=source)
    sink.gate = trio.Event()
    r = route(source, sink, in_flight=10, batch_count=4, batch_time=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await trio.sleep(5)
        assert source.asked == [10]  # one call took the whole window
        assert len(source.handed) == r.in_flight == 10
        sink.gate.set()
    assert sink.written == source.acked == [f"m{i}" for i in range(100)]
    assert sink.acked_before_write == []
    assert all(0 < most <= 10 for most in source.asked)
    assert len(source.asked) < 100


@each_source
@pytest.mark.parametrize("transforms", [[], [lambda message: message]])
async def test_what_a_source_could_not_read_is_dead_lettered_in_its_turn(
    source_class: type[FakeSource], transforms: list[Any]
) -> None:
    unreadable = {"m2": ValueError("line too long"), "m5": ValueError("bad record")}
    source = source_class(messages(8), unreadable=unreadable)
    sink = FakeSink(source=source)
    dead = FakeSink()
    r = route(source, sink, dead_letter=dead, transforms=transforms, batch_count=3, batch_time=0)
    await r.run()
    assert sink.written == ["m0", "m1", "m3", "m4", "m6", "m7"]
    assert [m.id for b in dead.batches for m in b] == ["m2", "m5"]
    assert dead.batches[0][0].headers["bridge-stage"] == "source"
    assert dead.batches[0][0].headers["bridge-error"] == "ValueError: line too long"
    assert sorted(source.acked) == [f"m{i}" for i in range(8)]
    assert (r.stats.written, r.stats.dead_lettered, r.in_flight) == (6, 2, 0)


@each_source
async def test_a_source_failure_restarts_the_route_and_loses_nothing(
    source_class: type[FakeSource],
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = source_class(messages(30), fail_at={4: ConnectionError("broker went away")})
    sink = FakeSink(delay=0.1)
    r = route(source, sink, in_flight=5, batch_count=5, batch_time=0)
    await r.run()
    assert source.opens == 2
    assert r.stats.restarts == 1
    assert set(sink.written) == {f"m{i}" for i in range(30)}
    assert sorted(source.acked, key=lambda i: int(i[1:])) == [f"m{i}" for i in range(30)]


async def test_a_dead_letter_failure_nacks_and_restarts_the_route(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource(messages(2))
    sink = FakeSink(always=OSError("down"))
    dead = FakeSink([OSError("dlq down")])
    r = route(source, sink, dead_letter=dead, retry=attrs.evolve(NO_JITTER, attempts=1))
    await r.run()
    assert ("m0", source.nacked[0][1]) == source.nacked[0]
    assert source.nacked[0][0] == "m0"
    assert r.stats.restarts == 1
    assert sorted(m.id for b in dead.batches for m in b) == ["m0", "m1"]


async def test_an_unreadable_message_is_released_not_given_up_when_the_dead_letter_sink_fails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Nacked with its error, a source skips an unreadable message (logged, its position
    # counted done): with the dead-letter sink down, that would lose it.
    source = FakeSource(messages(2), unreadable={"m0": ValueError("line too long")})
    sink = FakeSink()
    dead = FakeSink([OSError("dlq down")])
    r = route(source, sink, dead_letter=dead, retry=attrs.evolve(NO_JITTER, attempts=1))
    await r.run()
    assert source.nacked[0] == ("m0", None)
    assert r.stats.restarts == 1
    assert [m.id for b in dead.batches for m in b] == ["m0"]  # (on the second try)
    assert sorted(source.acked) == ["m0", "m1"]
    assert sink.written == ["m1"]


async def test_a_sink_that_cannot_open_is_retried_until_it_can(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeSource(messages(3))
    sink = FakeSink()
    opened = sink.open
    failures = [ConnectionRefusedError("no"), ConnectionRefusedError("no")]

    def flaky_open() -> Any:
        if failures:
            raise failures.pop()
        return opened()

    sink.open = flaky_open  # type: ignore[method-assign]
    r = route(source, sink, batch_time=0)
    await r.run()
    assert sink.written == ["m0", "m1", "m2"]
    assert r.ready.is_set()


def test_retry_delays_grow_exponentially_with_jitter_and_a_cap() -> None:
    policy = RetryPolicy(attempts=10, initial=0.5, max=3.0, multiplier=2.0, jitter=0.5)
    assert [policy.delay(n, lambda: 0.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.delay(2, lambda: 0.999) == pytest.approx(0.5, rel=0.01)
    assert policy.delay(10_000, lambda: 0.0) == 3.0


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(1, 60),
    window=st.integers(1, 20),
    batch=st.integers(1, 10),
    script=st.lists(st.sampled_from([None, "fail", "reject"]), max_size=12),
    bulk=st.booleans(),
)
def test_whatever_fails_each_message_is_written_or_dead_lettered_and_settled_once(
    count: int, window: int, batch: int, script: Sequence[str | None], bulk: bool
) -> None:
    failures: list[BaseException | None] = [
        None if s is None else OSError("x") if s == "fail" else MessageRejected("bad", [0])
        for s in script
    ]
    source = (FakeBulkSource if bulk else FakeSource)(messages(count))
    sink = FakeSink(failures, source=source)
    dead = FakeSink()

    async def main() -> None:
        r = route(source, sink, dead_letter=dead, in_flight=window, batch_count=batch, batch_time=0)
        await r.run()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    ids = [f"m{i}" for i in range(count)]
    delivered = sink.written
    dead_ids = [m.id for b in dead.batches for m in b]
    assert sorted(delivered + dead_ids, key=lambda i: int(i[1:])) == ids
    assert delivered == sorted(delivered, key=lambda i: int(i[1:]))  # order kept
    assert sorted(source.acked, key=lambda i: int(i[1:])) == ids
    assert source.nacked == []
    assert sink.acked_before_write == []


class WebhookSource:
    """A push source shaped like an HTTP webhook: each request waits for its answer."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[Envelope](0)

    def describe(self) -> str:
        return "webhook"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[WebhookSource]:
        yield self

    async def receive(self) -> Envelope:
        return await self._receive.receive()

    async def request(self, body: bytes) -> int:
        """What a handler does: hand the body over, answer 200 once it is durable."""
        answered = trio.Event()
        status: list[int] = []

        async def ack() -> None:
            status.append(200)
            answered.set()

        async def nack(error: BaseException | None) -> None:
            status.append(503)
            answered.set()

        envelope = Envelope(Message(body, {}, body.decode()), ack=ack, nack=nack)
        await self._send.send(envelope)  # waits while the route's window is full
        await answered.wait()
        return status[0]


async def test_a_push_source_answers_each_request_once_the_sink_has_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = WebhookSource()
    sink = FakeSink([OSError("busy"), None, MessageRejected("bad body", [0])])
    retry = attrs.evolve(NO_JITTER, attempts=3)
    r = Route("hook", source, sink, retry=retry, batch_time=0, in_flight=2)
    answers: dict[bytes, int] = {}

    async def call(body: bytes) -> None:
        answers[body] = await source.request(body)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await call(b"first")  # written on the second attempt
        await call(b"poison")  # rejected by the sink, no dead-letter sink: an error answer
        async with trio.open_nursery() as clients:
            for i in range(5):
                clients.start_soon(call, f"c{i}".encode())
        r.stop()
    assert answers[b"first"] == 200
    assert answers[b"poison"] == 503
    assert all(answers[f"c{i}".encode()] == 200 for i in range(5))
    assert sorted(sink.written) == ["c0", "c1", "c2", "c3", "c4", "first"]


class _KeyedEnvelope(Envelope):
    """An envelope of a source that acks runs of one key in one call (``ack_all``)."""

    __slots__ = ("calls", "mode", "settle_key")

    def __init__(
        self, message: Message, key: object, calls: list[list[str]], mode: str = "ok"
    ) -> None:
        super().__init__(message, ack=self._ack_one, nack=self._nack_one)
        self.settle_key = key
        self.calls = calls
        self.mode = mode  # "ok", "stuck" (waits forever) or "broken" (raises)

    async def _ack_one(self) -> None:
        self.calls.append([self.message.id])

    async def _nack_one(self, error: BaseException | None) -> None:
        pass

    async def ack_all(self, envelopes: Sequence[Envelope]) -> None:
        if self.mode == "broken":
            raise OSError("gone")
        if self.mode == "stuck":
            self.state = "acked"
            await trio.sleep_forever()
        for envelope in envelopes:
            assert envelope.settle_key is self.settle_key
            envelope.state = "acked"
        self.calls.append([envelope.message.id for envelope in envelopes])
        await trio.lowlevel.checkpoint()


class _KeyedSource:
    def __init__(self, keys: list[object]) -> None:
        self.calls: list[list[str]] = []
        self.envelopes = [
            _KeyedEnvelope(Message(b"x", id=f"m{i}"), key, self.calls) for i, key in enumerate(keys)
        ]

    def describe(self) -> str:
        return "keyed"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Any]:
        yield self

    async def receive(self) -> Envelope:
        if not self.envelopes:
            raise trio.EndOfChannel
        return self.envelopes.pop(0)  # (no checkpoint: all nine in one batch)


async def test_a_run_of_envelopes_with_one_settle_key_is_acked_in_one_call() -> None:
    a, b = object(), object()
    source = _KeyedSource([a, a, a, None, None, b, b, a, a])
    sink = FakeSink()
    r = Route("r", source, sink, batch_count=100, batch_time=0)
    await r.run()
    assert [m.id for batch in sink.batches for m in batch] == [f"m{i}" for i in range(9)]
    runs = [["m0", "m1", "m2"], ["m3"], ["m4"], ["m5", "m6"], ["m7", "m8"]]
    assert source.calls == runs  # (written in one batch)
    assert (r.stats.written, r.in_flight) == (9, 0)


async def test_settle_leaves_what_a_cancelled_ack_all_never_tried_in_flight() -> None:
    from bridges._flow import Window, settle

    key = object()
    calls: list[list[str]] = []
    envelopes: list[Envelope] = [
        _KeyedEnvelope(Message(b"x", id=f"m{i}"), key, calls, "stuck") for i in range(3)
    ]
    inflight = set(envelopes)
    slots = Window(3)
    slots.free = 0
    with trio.move_on_after(0.01):
        await settle(envelopes, None, inflight, slots)
    assert inflight == set(envelopes[1:])  # to be released (nacked) by the route
    assert slots.free == 1


async def test_a_failed_ack_all_counts_its_whole_run_and_frees_its_slots() -> None:
    from bridges._flow import Window, settle

    key = object()
    calls: list[list[str]] = []
    envelopes: list[Envelope] = [
        _KeyedEnvelope(Message(b"x", id=f"m{i}"), key, calls, "broken") for i in range(3)
    ]
    inflight = set(envelopes)
    slots = Window(3)
    slots.free = 0
    failed, first = await settle(envelopes, None, inflight, slots)
    assert (failed, str(first), inflight, slots.free) == (3, "gone", set(), 3)


_KEYS = (object(), object())


@given(st.lists(st.sampled_from([None, 0, 1]), max_size=12))
def test_settle_runs_cut_envelopes_in_order_into_runs_of_one_key(picks: list[int | None]) -> None:
    from bridges._flow import settle_runs

    calls: list[list[str]] = []
    envelopes: list[Envelope] = [
        _KeyedEnvelope(Message(b"x", id=f"m{i}"), None if p is None else _KEYS[p], calls)
        for i, p in enumerate(picks)
    ]
    runs = settle_runs(envelopes)
    assert [e for run in runs for e in run] == envelopes
    for run in runs:
        key = run[0].settle_key
        assert all(e.settle_key is key for e in run)
        assert key is not None or len(run) == 1
    for before, after in pairwise(runs):  # runs are as long as they can be
        key = before[-1].settle_key
        assert key is None or after[0].settle_key is not key


@given(
    st.lists(st.sampled_from(["ok", "broken"]), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=12),
    st.booleans(),
)
def test_settle_one_at_a_time_frees_what_it_tried_and_counts_what_failed(
    modes: list[str], stuck_at: int, nack: bool
) -> None:
    """Envelopes settled each alone (no settle_key: a webhook's, a file's, or a nack) leave
    the in-flight set together; cancelled at one, that one and those before it leave,
    the rest stay (to be released by the route); failures are counted, not raised."""
    from bridges._flow import Window, settle

    tried: list[int] = []

    def envelope(index: int, mode: str) -> Envelope:
        async def done(*_: object) -> None:
            tried.append(index)
            if index == stuck_at:
                await trio.sleep_forever()
            if mode == "broken":
                raise OSError("gone")

        return Envelope(Message(b"x", id=f"m{index}"), ack=done, nack=done)

    envelopes = [envelope(i, mode) for i, mode in enumerate(modes)]
    inflight = set(envelopes)
    slots = Window(len(envelopes))
    slots.free = 0
    result: list[tuple[int, BaseException | None]] = []

    async def main() -> None:
        with trio.move_on_after(1):
            result.append(
                await settle(envelopes, OSError("why") if nack else None, inflight, slots)
            )

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert tried == list(range(min(stuck_at + 1, len(modes))))
    if stuck_at < len(modes):  # cancelled there
        assert not result
        assert inflight == set(envelopes[stuck_at + 1 :])
        assert slots.free == stuck_at + 1
    else:
        failed, first = result[0]
        assert failed == modes.count("broken")
        assert (first is None) == (failed == 0)
        assert (inflight, slots.free) == (set(), len(modes))
