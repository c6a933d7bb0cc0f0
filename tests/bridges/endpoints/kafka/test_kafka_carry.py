"""Consume-transform-produce: kafka -> kafka commits the source offsets in the transaction."""

from __future__ import annotations

import uuid
from typing import Any

import confluent_kafka
import pytest
import trio
from family_kit import crash_run
from hypothesis import given
from hypothesis import strategies as st
from kafka_servers import create_topic, produce, read_topic, require_kafka

from bridges import Context, Envelope, Route
from bridges.endpoints.kafka import KafkaSink, KafkaSinkConfig, KafkaSource, KafkaSourceConfig
from bridges.endpoints.kafka._connection import KafkaEndpointError
from bridges.endpoints.kafka._offsets import Partition


def pair(
    servers: str, source_topic: str, sink_topic: str, group: str, **sink: Any
) -> tuple[KafkaSource, KafkaSink]:
    source = KafkaSource(
        KafkaSourceConfig(
            bootstrap_servers=servers, topic=source_topic, group=group, revoke_timeout=1.0
        ),
        Context(route=group, in_flight=100),
    )
    config = KafkaSinkConfig(
        bootstrap_servers=servers, topic=sink_topic, transactional=True, **sink
    )
    return source, KafkaSink(config, Context(route=group, role="sink"))


def committed(servers: str, topic: str, group: str) -> int:
    """The group's committed offset of partition 0 (-1001: none), stable offsets only."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": servers, "group.id": group, "isolation.level": "read_committed"}
    )
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
        return int(found[0].offset)
    finally:
        consumer.close()


async def topics(servers: str, n: int = 2) -> list[str]:
    return [await trio.to_thread.run_sync(create_topic, servers) for _ in range(n)]


@given(
    offsets=st.lists(st.integers(0, 500), min_size=1, max_size=60, unique=True).map(sorted),
    data=st.data(),
)
def test_the_offsets_a_transaction_carries_are_the_commit_once_its_batch_is_acked(
    offsets: list[int], data: st.DataObject
) -> None:
    partition = Partition(offsets[0])
    for offset in offsets:
        partition.take(offset)
    for offset in data.draw(st.sets(st.sampled_from(offsets))):
        partition.ack(offset)
    batch = data.draw(st.sets(st.sampled_from(offsets)))
    before = partition.commit()
    carried = partition.commit_with(batch)
    assert partition.commit() == before  # (the transaction may still abort)
    for offset in batch:
        partition.ack(offset)
    assert carried == partition.commit()


def test_only_a_transactional_sink_on_the_same_servers_carries_a_kafka_source() -> None:
    def route(sink_servers: str, **sink: Any) -> Route:
        source, _ = pair("127.0.0.1:9092", "in", "out", "g")
        kafka_sink = KafkaSink(
            KafkaSinkConfig(bootstrap_servers=sink_servers, topic="out", **sink), Context()
        )
        return Route("r", source, kafka_sink)

    assert route("127.0.0.1:9092", transactional=True).carried
    assert route(" 127.0.0.1:9092 ", transactional=True).carried
    assert not route("127.0.0.1:9092").carried  # at least once: the source commits
    assert not route("localhost:9092", transactional=True).carried  # (another cluster?)


@pytest.mark.deadline(120)
async def test_a_kafka_to_kafka_route_commits_the_offsets_with_the_records() -> None:
    servers = require_kafka()
    source_topic, sink_topic = await topics(servers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await produce(servers, source_topic, [(f"m-{i}".encode(), {}) for i in range(250)])
    source, sink = pair(servers, source_topic, sink_topic, group, dedup_window=0)
    route = Route("ctp", source, sink, in_flight=100, batch_count=40)
    assert route.carried
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route.run)
        while route.stats.written < 250:  # noqa: ASYNC110 (the engine has no event for it)
            await trio.sleep(0.1)
        route.stop()
    assert await trio.to_thread.run_sync(committed, servers, source_topic, group) == 250
    held = [body for body, _ in await read_topic(servers, sink_topic)]
    assert held == [f"m-{i}".encode() for i in range(250)]


class _CommitFails(confluent_kafka.Producer):
    """A producer whose transactions abort after their offsets were sent (as in a crash)."""

    def commit_transaction(self, *args: Any) -> None:
        error = confluent_kafka.KafkaError(confluent_kafka.KafkaError._FAIL, "injected")
        raise confluent_kafka.KafkaException(error)


@pytest.mark.deadline(120)
async def test_an_aborted_transaction_leaves_the_offsets_where_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    servers = require_kafka()
    source_topic, sink_topic = await topics(servers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await produce(servers, source_topic, [(f"m-{i}".encode(), {}) for i in range(10)])
    source, sink = pair(servers, source_topic, sink_topic, group, dedup_window=0)
    assert sink.carries(source)
    async with source.open() as receiver:
        envelopes: list[Envelope] = [await receiver.receive() for _ in range(10)]
        batch = [envelope.message for envelope in envelopes]
        with monkeypatch.context() as patch:
            patch.setattr(confluent_kafka, "Producer", _CommitFails)
            async with sink.open() as writer:
                with pytest.raises(KafkaEndpointError, match="injected"):
                    await writer.write_carrying(batch, envelopes)
        assert await trio.to_thread.run_sync(committed, servers, source_topic, group) < 0
        assert await read_topic(servers, sink_topic) == []
        assert {envelope.state for envelope in envelopes} == {"open"}
        # The engine writes the batch again on a fresh sink: records and offsets together.
        async with sink.open() as writer:
            await writer.write_carrying(batch, envelopes)
        assert {envelope.state for envelope in envelopes} == {"acked"}
        assert await trio.to_thread.run_sync(committed, servers, source_topic, group) == 10
    assert [body for body, _ in await read_topic(servers, sink_topic)] == batch_bodies(10)


def batch_bodies(n: int) -> list[bytes]:
    return [f"m-{i}".encode() for i in range(n)]


@pytest.mark.deadline(120)
async def test_records_of_a_revoked_partition_are_left_to_its_next_reader() -> None:
    servers = require_kafka()
    source_topic, sink_topic = await topics(servers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await produce(servers, source_topic, [(f"m-{i}".encode(), {}) for i in range(5)])
    first, sink = pair(servers, source_topic, sink_topic, group, dedup_window=0)
    second, _ = pair(servers, source_topic, sink_topic, group)
    assert sink.carries(first)
    assert sink.carries(second)
    async with first.open() as one:
        held = [await one.receive() for _ in range(5)]
        async with second.open() as two:
            # The rebalance waits revoke_timeout (1 s) for them, then lets the partition go;
            # either member may be given it, and reads it again from the committed offset.
            again: list[bytes] = []
            async with trio.open_nursery() as nursery:

                async def read_again(receiver: Any) -> None:
                    again.append((await receiver.receive()).message.body)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(read_again, one)
                nursery.start_soon(read_again, two)
            assert again == [b"m-0"]
            async with sink.open() as writer:
                await writer.write_carrying([e.message for e in held], held)
                assert await read_topic(servers, sink_topic) == []  # (not ours any more)
    # (0 when the first member was given the partition again: nothing of it is done)
    assert await trio.to_thread.run_sync(committed, servers, source_topic, group) <= 0


def test_sigkill_between_produce_and_commit_repeats_nothing_kafka_to_kafka() -> None:
    require_kafka()
    # dedup_window = 0: no read-back; the offsets in the transaction alone keep repeats out.
    (result,) = crash_run("kafka_eos_crash.py", ["kafka-kafka"], count=400, seed=34)
    assert result["duplicates"] == 0


@pytest.mark.deadline(120)
async def test_a_fenced_zombie_commits_neither_records_nor_offsets() -> None:
    servers = require_kafka()
    source_topic, sink_topic = await topics(servers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await produce(servers, source_topic, [(f"m-{i}".encode(), {}) for i in range(4)])
    source, sink = pair(servers, source_topic, sink_topic, group, dedup_window=0)
    assert sink.carries(source)
    async with source.open() as receiver:
        envelopes: list[Envelope] = [await receiver.receive() for _ in range(4)]
        batch = [envelope.message for envelope in envelopes]
        async with sink.open() as zombie:
            await zombie.write_carrying(batch[:2], envelopes[:2])
            assert await trio.to_thread.run_sync(committed, servers, source_topic, group) == 2
            async with sink.open() as successor:  # (the same transactional.id: a restart)
                with pytest.raises(KafkaEndpointError, match=r"(?i)fenc"):
                    await zombie.write_carrying(batch[2:], envelopes[2:])
                assert await trio.to_thread.run_sync(committed, servers, source_topic, group) == 2
                await successor.write_carrying(batch[2:], envelopes[2:])
        assert await trio.to_thread.run_sync(committed, servers, source_topic, group) == 4
    assert [body for body, _ in await read_topic(servers, sink_topic)] == batch_bodies(4)


@pytest.mark.deadline(120)
async def test_a_message_settled_after_the_last_transaction_is_committed_when_the_route_stops() -> (
    None
):
    servers = require_kafka()
    source_topic, sink_topic = await topics(servers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await produce(servers, source_topic, [(f"m-{i}".encode(), {}) for i in range(3)])
    source, sink = pair(servers, source_topic, sink_topic, group, dedup_window=0)
    assert sink.carries(source)
    async with source.open() as receiver:
        envelopes: list[Envelope] = [await receiver.receive() for _ in range(3)]
        async with sink.open() as writer:
            await writer.write_carrying([e.message for e in envelopes[:2]], envelopes[:2])
        assert await trio.to_thread.run_sync(committed, servers, source_topic, group) == 2
        await envelopes[2].ack()  # (dead-lettered: the engine acks it; no transaction follows)
    # The route stopped: the source committed it, so a restart does not dead-letter it again.
    assert await trio.to_thread.run_sync(committed, servers, source_topic, group) == 3
    await produce(servers, source_topic, [(b"m-3", {})])
    again, _ = pair(servers, source_topic, sink_topic, group)
    async with again.open() as receiver:
        assert (await receiver.receive()).message.body == b"m-3"
