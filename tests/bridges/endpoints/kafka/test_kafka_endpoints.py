"""The kafka endpoints against the real broker: where a group starts, rebalances, transactions."""

from __future__ import annotations

import itertools
import json
import re
import sys
import threading
import uuid
from typing import Any

import confluent_kafka
import pytest
import trio
from kafka_servers import create_topic, produce, read_topic, require_kafka

from bridges import (
    Context,
    Envelope,
    InvalidSetting,
    Message,
    MessageRejected,
    RetryPolicy,
    Route,
)
from bridges.endpoints.kafka import KafkaSink, KafkaSinkConfig, KafkaSource, KafkaSourceConfig
from bridges.endpoints.kafka._connection import KafkaEndpointError
from bridges.testing import FakeBulkSource, FakeSink


def source(servers: str, topic: str, group: str, **settings: object) -> KafkaSource:
    config = KafkaSourceConfig(bootstrap_servers=servers, topic=topic, group=group, **settings)  # type: ignore[arg-type]
    return KafkaSource(config, Context(route="t", in_flight=100))


def bodies(n: int, label: str) -> list[tuple[bytes, dict[str, str]]]:
    return [(f"{label}-{i}".encode(), {"n": str(i)}) for i in range(n)]


@pytest.mark.deadline(60)
async def test_a_new_group_starts_where_auto_offset_reset_says() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    await produce(servers, topic, bodies(3, "old"))
    latest = source(servers, topic, f"g-{uuid.uuid4().hex[:8]}", auto_offset_reset="latest")
    earliest = source(servers, topic, f"g-{uuid.uuid4().hex[:8]}")
    async with latest.open() as new_only, earliest.open() as everything:
        got = [(await everything.receive()).message for _ in range(3)]
        assert [m.body for m in got] == [b"old-0", b"old-1", b"old-2"]
        first = got[0]
        assert re.fullmatch(rf"{topic}#[A-Za-z0-9_-]{{22}}:0:0", first.id)
        assert first.headers["kafka-partition"] == "0"
        assert first.headers["kafka-offset"] == "0"
        assert first.headers["n"] == "0"
        assert int(first.headers["kafka-timestamp"]) > 0
        await trio.sleep(2)  # the latest group is assigned, at the end of the topic
        await produce(servers, topic, bodies(2, "new"))
        assert (await new_only.receive()).message.body == b"new-0"
        assert (await new_only.receive()).message.body == b"new-1"


@pytest.mark.deadline(90)
async def test_a_rebalance_commits_what_was_acked_before_letting_go() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(lambda: create_topic(servers, partitions=2))
    group = f"g-{uuid.uuid4().hex[:8]}"
    sent = [(f"r-{i}".encode(), {"bridge-id": f"id-{i}"}) for i in range(20)]
    await produce(servers, topic, sent)
    first = source(servers, topic, group, revoke_timeout=10.0)
    second = source(servers, topic, group)
    acked: set[bytes] = set()
    async with first.open() as one:
        held: list[Envelope] = [await one.receive() for _ in range(20)]
        for envelope in held[:10]:
            await envelope.ack()
            acked.add(envelope.message.body)
        late = held[10:]

        async def settle_late() -> None:
            await trio.sleep(3.0)  # while the rebalance waits for them
            for envelope in late:
                await envelope.ack()
                acked.add(envelope.message.body)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(settle_late)
            async with second.open() as two:
                # Every record was acked by the first before it let go: none comes again.
                with trio.move_on_after(8):
                    envelope = await two.receive()
                    pytest.fail(f"{envelope.message.body!r} was handed out again")
                await produce(servers, topic, [(b"after", {})])
                for receiver in (one, two):
                    with trio.move_on_after(5):
                        envelope = await receiver.receive()
                        assert envelope.message.body == b"after"
                        await envelope.ack()
                        break
                else:
                    pytest.fail("the record written after the rebalance did not arrive")
    assert acked == {body for body, _ in sent}


@pytest.mark.deadline(60)
@pytest.mark.parametrize("pause", [0.0, 1.0], ids=["closing-at-once", "committed-before"])
async def test_closing_commits_what_was_acked_without_waiting_twice(
    monkeypatch: pytest.MonkeyPatch, pause: float
) -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await produce(servers, topic, bodies(5, "c"))
    waits: list[int] = []

    class Counting(confluent_kafka.Consumer):
        def commit(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("asynchronous") is False:
                waits.append(len(kwargs.get("offsets") or ()))
            return super().commit(*args, **kwargs)

    monkeypatch.setattr(confluent_kafka, "Consumer", Counting)
    async with source(servers, topic, group).open() as receiver:
        for _ in range(3):
            await (await receiver.receive()).ack()
        await trio.sleep(pause)  # (1 s: the reader's own commit has gone out)
    # No commit waited for when leaving (close waits for those in flight): it was two.
    assert waits == []

    def committed() -> int:
        reader = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": group})
        try:
            [found] = reader.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
            return found.offset
        finally:
            reader.close()

    assert await trio.to_thread.run_sync(committed) == 3


@pytest.mark.deadline(60)
async def test_the_source_has_one_commit_in_flight_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await produce(servers, topic, bodies(2000, "f"))
    events: list[str] = []

    class Watched(confluent_kafka.Consumer):
        def __init__(self, settings: dict[str, Any]) -> None:
            answered = settings.get("on_commit")

            def answer(*args: Any) -> None:
                events.append("answer")
                if answered is not None:
                    answered(*args)

            super().__init__(settings | {"on_commit": answer})

        def commit(self, *args: Any, **kwargs: Any) -> Any:
            events.append("sent")
            return super().commit(*args, **kwargs)

    monkeypatch.setattr(confluent_kafka, "Consumer", Watched)
    async with source(servers, topic, group).open() as receiver:
        for _ in range(2000):
            await (await receiver.receive()).ack()
            await trio.lowlevel.checkpoint()  # (the reader commits between bursts)
    # (a commit per burst queued dozens at the coordinator, and leaving waited for them all)
    sent = [i for i, event in enumerate(events) if event == "sent"]
    assert len(sent) >= 2
    for before, after in itertools.pairwise(sent):
        assert "answer" in events[before:after], events


@pytest.mark.deadline(90)
async def test_the_transactional_sink_skips_what_it_wrote_before_a_restart() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, transactional=True)
    batch = [Message(f"once-{i}".encode(), {"n": str(i)}, f"id-{i}") for i in range(5)]
    async with KafkaSink(config, Context(route=topic)).open() as writer:
        await writer.write(batch[:3])
    # A restart after a crash that lost the acks: the same batch comes again.
    async with KafkaSink(config, Context(route=topic)).open() as writer:
        await writer.write(batch)
        assert writer.skipped == 3
    held = [body for body, _ in await read_topic(servers, topic)]
    assert held == [m.body for m in batch]


@pytest.mark.deadline(90)
async def test_the_transactional_sink_reads_back_every_partitions_tail() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(lambda: create_topic(servers, partitions=3))
    config = KafkaSinkConfig(
        bootstrap_servers=servers, topic=topic, transactional=True, key="{header:k}"
    )
    batch = [Message(b"%d" % i, {"k": f"key-{i}"}, f"id-{i}") for i in range(12)]
    async with KafkaSink(config, Context(route=topic)).open() as writer:
        await writer.write(batch)
    async with KafkaSink(config, Context(route=topic)).open() as writer:
        assert len(writer.written) == 12  # (read back from each partition)
        await writer.write(batch)
        assert writer.skipped == 12
    assert len(await read_topic(servers, topic)) == 12

    def partitions_used() -> int:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": topic})
        try:
            ends = [
                consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, n), 10)[1]
                for n in range(3)
            ]
        finally:
            consumer.close()
        return sum(1 for end in ends if end > 0)

    assert await trio.to_thread.run_sync(partitions_used) > 1  # (so more than one tail)


@pytest.mark.deadline(90)
async def test_a_second_transactional_sink_with_the_same_id_fences_the_first() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, transactional=True)
    first, second = (KafkaSink(config, Context(route=topic)) for _ in range(2))
    async with first.open() as old:
        await old.write([Message(b"before", {}, "a")])
        async with second.open() as new:
            with pytest.raises(KafkaEndpointError, match=r"(?i)fenc"):
                await old.write([Message(b"zombie", {}, "b")])
            await new.write([Message(b"after", {}, "c")])
    assert [body for body, _ in await read_topic(servers, topic)] == [b"before", b"after"]


def test_a_sink_with_an_invalid_fixed_topic_is_refused_when_built() -> None:
    # (a fixed topic is checked once, at build, not for every message)
    config = KafkaSinkConfig(topic="no spaces allowed")
    with pytest.raises(InvalidSetting, match="topic"):
        KafkaSink(config, Context(route="t"))


@pytest.mark.parametrize("transactional", [False, True])
@pytest.mark.deadline(90)
async def test_a_record_kafka_refuses_is_named_alone_among_acknowledged_ones(
    transactional: bool,
) -> None:
    # The sink asks librdkafka for delivery reports on errors only: a batch is
    # done once the producer's queue is empty, and a record the broker refused
    # (over the topic's max.message.bytes) must still be named, with Kafka's
    # reason, and the others written.
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(
        lambda: create_topic(servers, 2, **{"max.message.bytes": "4000"})
    )
    small = [Message(f"ok-{i}".encode(), {"p": "0"}, f"ok-{i}") for i in range(4)]
    big = Message(b"x" * 20_000, {"p": "1"}, "big")
    if transactional:
        # One transaction per batch: the refused record aborts its own; the
        # engine then opens the sink again and writes the rest.
        config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, transactional=True)
        async with KafkaSink(config, Context(route=topic)).open() as writer:
            with pytest.raises(MessageRejected) as refused:
                await writer.write([big])
        async with KafkaSink(config, Context(route=topic)).open() as writer:
            await writer.write(small)
        where = 0
    else:
        # (the refused record alone in its partition's request: the broker judges
        # a request's records together)
        config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, partition="{header:p}")
        async with KafkaSink(config, Context(route=topic)).open() as writer:
            with pytest.raises(MessageRejected) as refused:
                await writer.write([*small[:2], big, *small[2:]])
        where = 2
    assert refused.value.indices == (where,)
    assert re.search(r"MSG_SIZE_TOO_LARGE", refused.value.reason_for(where))
    held = sorted(body for body, _ in await read_topic(servers, topic))
    assert held == sorted(m.body for m in small)


@pytest.mark.deadline(90)
async def test_records_refused_together_as_too_large_are_each_tried_alone() -> None:
    # Kafka judges a request's records of one partition together: small records
    # that fit alone were refused with a big one beside them (or with each other,
    # when the topic's max.message.bytes is under the sink's max_bytes), and
    # dead-lettered. Now only what is refused alone is.
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(
        lambda: create_topic(servers, 1, **{"max.message.bytes": "4000"})
    )
    small = [Message(b"s" * 100, {}, f"small-{i}") for i in range(30)]
    bigs = [Message(b"b" * 20_000, {}, f"big-{i}") for i in range(2)]
    # (a long linger: a write's records leave in one request, when it flushes)
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, linger=1.0)
    dead = await _route_with_dead_letter(config, [*small[:10], bigs[0], *small[10:], bigs[1]])
    assert sorted(dead) == ["big-0", "big-1"]
    ids = {headers["bridge-id"].decode() for _, headers in await read_topic(servers, topic)}
    assert ids == {m.id for m in small}


async def _route_with_dead_letter(config: KafkaSinkConfig, batch: list[Message]) -> list[str]:
    """Route ``batch`` into the sink in one batch; the ids that reached the dead-letter sink."""
    source = FakeBulkSource(batch)
    dead = FakeSink()
    retry = RetryPolicy(attempts=2, initial=0.0, jitter=0.0)
    sink = KafkaSink(config, Context(route=config.topic))
    await Route("r", source, sink, dead_letter=dead, retry=retry).run()
    assert sorted(source.acked) == sorted(m.id for m in batch)
    return dead.written


#: A route's first batch into a new topic, timed in a fresh process (as ``bridges run``
#: starts one): inside pytest the first record comes late enough to hide the wait.
FIRST_BATCH = """
import json, sys, time, trio
from confluent_kafka.admin import AdminClient, NewTopic
from bridges import Context, Message, Route
from bridges.endpoints.kafka import KafkaSink, KafkaSinkConfig
from bridges.testing import FakeBulkSource

async def first_batch(servers, topic):
    source = FakeBulkSource([Message(b"m" * 100, {}, f"m{i}") for i in range(100)])
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic)
    started = time.monotonic()
    await Route("r", source, KafkaSink(config, Context(route=topic))).run()
    assert len(source.acked) == 100
    return time.monotonic() - started

servers, took = sys.argv[1], []
admin = AdminClient({"bootstrap.servers": servers})
for attempt in range(3):
    topic = f"first-{time.time_ns()}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    took.append(trio.run(first_batch, servers, topic))
print(json.dumps(took))
"""


@pytest.mark.deadline(60)
async def test_an_idempotent_sink_sends_its_first_batch_without_librdkafkas_timer() -> None:
    # librdkafka asks for an idempotent producer's id when the producer is made,
    # before a broker is connected, and again only 500 ms later: a route whose
    # messages were waiting had its first batch wait that long on most starts
    # (505 to 512 ms; 1 s once). The sink's open makes it ask at once.
    servers = require_kafka()
    done = await trio.run_process(
        [sys.executable, "-c", FIRST_BATCH, servers], capture_stdout=True, check=True
    )
    took = json.loads(done.stdout)
    assert max(took) < 0.45, took


@pytest.mark.deadline(90)
async def test_the_transactional_sinks_waiting_calls_run_in_its_own_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, int]] = []
    waiting = {
        "list_topics",
        "init_transactions",
        "begin_transaction",
        "commit_transaction",
        "abort_transaction",
        "flush",
    }

    class Recording(confluent_kafka.Producer):
        def __getattribute__(self, name: str) -> Any:
            found = super().__getattribute__(name)
            if name not in waiting:
                return found

            def call(*args: Any) -> Any:
                calls.append((name, threading.get_ident()))
                return found(*args)

            return call

    monkeypatch.setattr(confluent_kafka, "Producer", Recording)
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, transactional=True)
    loop = threading.get_ident()
    async with KafkaSink(config, Context(route=topic)).open() as writer:
        for n in range(3):
            await writer.write([Message(b"%d" % n, {}, f"id-{n}")])
    names = [name for name, _ in calls]
    # each commit begins the next transaction; the one begun last is aborted on close
    assert names.count("commit_transaction") == 3
    assert names.count("begin_transaction") == 4
    assert names[-2:] == ["abort_transaction", "flush"]
    assert names[:3] == ["list_topics", "list_topics", "init_transactions"]
    assert all(thread != loop for _, thread in calls), calls
    # the sink's own thread, never the shared ones (16 calls hung elsewhere would stall it)
    assert len({thread for _, thread in calls}) == 1, calls
    assert [body for body, _ in await read_topic(servers, topic)] == [b"0", b"1", b"2"]
