"""The kafka endpoints against a hostile producer's records and an unlucky operator's topics."""

from __future__ import annotations

import contextlib
import logging
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
import httpx
import pytest
import trio
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # type: ignore[attr-defined]
from family_kit import bridges_command, free_port
from kafka_servers import create_topic, produce, read_topic, require_kafka
from raw_records import produce_raw

from bridges import Context, Message, MessageRejected
from bridges.endpoints.kafka import KafkaSink, KafkaSinkConfig, KafkaSource, KafkaSourceConfig
from bridges.endpoints.kafka._connection import KafkaEndpointError


def source(servers: str, topic: str, **settings: object) -> KafkaSource:
    group = f"g-{uuid.uuid4().hex[:8]}"
    config = KafkaSourceConfig(bootstrap_servers=servers, topic=topic, group=group, **settings)  # type: ignore[arg-type]
    return KafkaSource(config, Context(route="t", in_flight=100))


@pytest.mark.deadline(60)
async def test_a_header_name_that_is_not_utf8_is_one_unreadable_record_not_a_dead_source() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    records = [
        (None, b"before", [(b"n", b"1")]),
        (None, b"hostile", [(b"\xff\xfe", b"x"), (b"n", b"2")]),
        (None, b"after", [(b"n", b"3")]),
    ]
    # (more of them after: confluent-kafka sometimes hands such a record's headers back
    # with no error and a NULL in them; reading that pair crashed the process)
    more = [(None, b"h", [(b"\xff", b"x"), (b"n", b"y")]), (None, b"g", [(b"n", b"z")])] * 50
    await trio.to_thread.run_sync(produce_raw, servers, topic, records + more)
    reader = source(servers, topic)
    async with reader.open() as receiver:
        got = [await receiver.receive() for _ in range(3)]
        # No dead-letter sink: the engine nacks it with its error; it is skipped, not offered again.
        await got[1].nack(got[1].error)
        await got[0].ack()
        await got[2].ack()
        rest = []
        for _ in range(100):  # (settled as they come: the window is 100)
            envelope = await receiver.receive()
            await (envelope.nack(envelope.error) if envelope.error else envelope.ack())
            rest.append(envelope)
        with trio.move_on_after(1):
            again = await receiver.receive()
            raise AssertionError(f"offered again: {again!r}")
    assert [e.message.body for e in got] == [b"before", b"hostile", b"after"]
    assert [e.error is not None for e in rest] == [True, False] * 50
    assert await trio.to_thread.run_sync(committed, servers, topic, reader) == 103
    assert [e.error is not None for e in got] == [False, True, False]
    assert "header name is not UTF-8" in str(got[1].error)
    assert got[1].message.headers["kafka-offset"] == "1"
    assert got[1].message.id.endswith(":0:1")
    assert got[2].message.headers["n"] == "3"


def committed(servers: str, topic: str, reader: KafkaSource) -> int:
    consumer = Consumer({"bootstrap.servers": servers, "group.id": reader.settings()["group.id"]})
    try:
        offset: int = consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
        return offset
    finally:
        consumer.close()


@pytest.mark.deadline(60)
async def test_repeated_headers_none_values_binary_keys_and_tombstones_as_documented() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    records = [
        (b"\xff\x00k", b"v", [(b"a", b"first"), (b"a", b"last"), (b"none", None)]),
        (b"gone", None, []),
    ]
    await trio.to_thread.run_sync(produce_raw, servers, topic, records)
    async with source(servers, topic).open() as receiver:
        first, tombstone = [(await receiver.receive()).message for _ in range(2)]
    # A repeated name: the last value (Kafka's lastHeader); a null value: "".
    assert first.headers["a"] == "last"
    assert first.headers["none"] == ""
    # A key that is not UTF-8 keeps its bytes (surrogateescape), as a header value would.
    assert first.headers["kafka-key"].encode("utf-8", "surrogateescape") == b"\xff\x00k"
    # A tombstone (null value) is an empty body and the header kafka-tombstone.
    assert tombstone.body == b""
    assert tombstone.headers["kafka-key"] == "gone"
    assert tombstone.headers["kafka-tombstone"] == "true"
    assert "kafka-tombstone" not in first.headers


@pytest.mark.deadline(60)
async def test_a_tombstone_read_by_a_kafka_source_is_written_as_a_tombstone() -> None:
    servers = require_kafka()
    topic, copy = [await trio.to_thread.run_sync(create_topic, servers) for _ in range(2)]
    records: list[Any] = [(b"k1", None, []), (b"k2", b"", [])]
    await trio.to_thread.run_sync(produce_raw, servers, topic, records)
    async with source(servers, topic).open() as receiver:
        read = [(await receiver.receive()).message for _ in range(2)]
    sink = KafkaSink(KafkaSinkConfig(bootstrap_servers=servers, topic=copy), Context(route="t"))
    async with sink.open() as writer:
        await writer.write(read)

    def values() -> list[tuple[bytes | None, bytes | None, list[str]]]:
        group = f"r-{uuid.uuid4().hex[:8]}"
        consumer = Consumer(
            {"bootstrap.servers": servers, "group.id": group, "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([copy])
        found: list[Any] = []
        try:
            while len(found) < 2:
                found += consumer.consume(2, 5)
            return [(r.key(), r.value(), [n for n, _ in r.headers() or ()]) for r in found]
        finally:
            consumer.close()

    got = await trio.to_thread.run_sync(values)
    assert got == [(b"k1", None, ["bridge-id"]), (b"k2", b"", ["bridge-id"])]


def commit_then_delete(servers: str, topic: str, group: str) -> None:
    """Ten records; ``group`` committed at 2; offsets 0 to 5 deleted (as retention would)."""
    produce_raw(servers, topic, [(None, f"r-{i}".encode(), []) for i in range(10)])
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": servers})
    done = admin.delete_records([TopicPartition(topic, 0, 6)], request_timeout=30)
    for future in done.values():
        future.result(30)


@pytest.mark.deadline(90)
async def test_offsets_deleted_before_the_group_read_them_are_reported_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    reader = source(servers, topic)
    await trio.to_thread.run_sync(commit_then_delete, servers, topic, reader.settings()["group.id"])
    caplog.set_level(logging.INFO, logger="bridges.kafka")
    async with reader.open() as receiver:
        first = await receiver.receive()
    assert first.message.body == b"r-6"
    lost = [r for r in caplog.records if "deleted" in r.getMessage()]
    assert lost, [r.getMessage() for r in caplog.records]
    assert lost[0].levelno == logging.WARNING
    assert "4 record(s) lost" in lost[0].getMessage()
    assert "offsets 2 to 5" in lost[0].getMessage()
    assert reader.lost == 4


@pytest.mark.deadline(60)
async def test_a_partition_the_topic_does_not_have_rejects_that_message_alone() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    config = KafkaSinkConfig(
        bootstrap_servers=servers, topic=topic, partition="{header:p}", timeout=5.0
    )
    sink = KafkaSink(config, Context(route="t", role="sink"))
    batch = [Message(b"a", {"p": "0"}, "i-0"), Message(b"b", {"p": "7"}, "i-1")]
    async with sink.open() as writer:
        with pytest.raises(MessageRejected) as rejected:
            await writer.write(batch)
    assert list(rejected.value.indices or ()) == [1]
    assert "partition" in rejected.value.reason_for(1).lower()
    assert [body for body, _ in await read_topic(servers, topic)] == [b"a"]


@pytest.mark.deadline(60)
async def test_records_lost_to_retention_are_counted_in_the_metrics(tmp_path: Path) -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await trio.to_thread.run_sync(commit_then_delete, servers, topic, group)
    port = free_port()
    config = tmp_path / "bridge.toml"
    config.write_text(
        f"""
[bridge]
http = "127.0.0.1:{port}"

[routes.k]
source = {{ type = "kafka", bootstrap_servers = "{servers}", topic = "{topic}", group = "{group}" }}
sink = {{ type = "file", path = "outbox", format = "files" }}
"""
    )
    command = [*bridges_command(), "run", str(config)]
    process = await trio.lowlevel.open_process(command, cwd=tmp_path, stderr=subprocess.DEVNULL)
    try:
        pattern = re.compile(r'^bridges_source_lost_total\{route="k"\} (\S+)$', re.MULTILINE)
        async with httpx.AsyncClient() as http:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
                    found = pattern.search(text)
                    if found and float(found.group(1)) > 0:
                        break
                await trio.sleep(0.1)
        assert float(found.group(1)) == 4
        outbox = tmp_path / "outbox"
        while len(list(outbox.glob("*"))) < 4:  # noqa: ASYNC110 (the four records kept)
            await trio.sleep(0.05)
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()


@pytest.mark.deadline(90)
async def test_a_fenced_transactional_sink_names_its_id_and_every_later_write_fails_alike() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, transactional=True)
    first, second = (KafkaSink(config, Context(route=topic)) for _ in range(2))
    async with first.open() as old:
        await old.write([Message(b"before", {}, "a")])
        async with second.open() as new:
            for label in (b"zombie", b"zombie again"):
                with pytest.raises(KafkaEndpointError) as failed:
                    await old.write([Message(label, {}, label.decode())])
                assert f"transactional_id 'bridge-{topic}'" in str(failed.value)
                assert "another producer" in str(failed.value)
            await new.write([Message(b"after", {}, "c")])
    assert [body for body, _ in await read_topic(servers, topic)] == [b"before", b"after"]


@pytest.mark.deadline(60)
async def test_header_values_with_nul_or_bytes_that_are_not_utf8_round_trip() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    raw = b"a\x00b\xff\xfe"
    headers = {"nul": "x\x00y", "bytes": raw.decode("utf-8", "surrogateescape"), "empty": ""}
    sink = KafkaSink(KafkaSinkConfig(bootstrap_servers=servers, topic=topic), Context(route="t"))
    async with sink.open() as writer:
        await writer.write([Message(b"body", headers, "id-1")])
    async with source(servers, topic).open() as receiver:
        got = (await receiver.receive()).message
    assert {name: got.headers[name] for name in headers} == headers
    assert got.id == "id-1"


@pytest.mark.deadline(90)
async def test_a_topic_deleted_and_created_again_under_a_running_source_gets_new_ids() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    admin = AdminClient({"bootstrap.servers": servers})

    def delete_and_create() -> None:
        admin.delete_topics([topic])[topic].result(30)
        time.sleep(2)
        with contextlib.suppress(confluent_kafka.KafkaException):  # (auto-created already)
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    async with source(servers, topic).open() as receiver:
        await produce(servers, topic, [(b"old-0", {}), (b"old-1", {})])
        old = [await receiver.receive() for _ in range(2)]
        for envelope in old:
            await envelope.ack()
        await trio.sleep(1)  # (the commit of offset 2 is answered)
        await trio.to_thread.run_sync(delete_and_create)
        await produce(servers, topic, [(b"new-0", {}), (b"new-1", {})])
        new = []
        with trio.move_on_after(10):
            new = [await receiver.receive() for _ in range(2)]
    assert [e.message.body for e in new] == [b"new-0", b"new-1"]
    assert not {e.message.id for e in old} & {e.message.id for e in new}


@pytest.mark.deadline(60)
async def test_a_partition_added_under_a_running_source_is_read_within_seconds() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    admin = AdminClient({"bootstrap.servers": servers})
    async with source(servers, topic).open() as receiver:
        await produce(servers, topic, [(b"first", {})])
        await (await receiver.receive()).ack()
        grow = admin.create_partitions([NewPartitions(topic, 2)])[topic]
        await trio.to_thread.run_sync(grow.result, 30)
        await trio.to_thread.run_sync(produce_raw, servers, topic, [(None, b"p1", [])], 1)
        with trio.fail_after(30):  # (librdkafka's default: the new partition seen in 5 min)
            got = await receiver.receive()
    assert got.message.body == b"p1"
    assert got.message.headers["kafka-partition"] == "1"


@pytest.mark.deadline(60)
async def test_a_destination_topic_the_broker_will_not_create_rejects_that_message_alone() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    # Kafka refuses to create a topic whose name collides with one that exists ("." vs
    # "_"): as with auto.create.topics.enable = false, the topic never appears.
    taken = await trio.to_thread.run_sync(create_topic, servers)
    await trio.to_thread.run_sync(create_topic_named, servers, f"{taken}_x")
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, timeout=5.0)
    sink = KafkaSink(config, Context(route="t", role="sink"))
    batch = [Message(b"a", {}, "i-0"), Message(b"b", {}, "i-1", destination=f"{taken}.x")]
    async with sink.open() as writer:
        with pytest.raises(MessageRejected) as rejected:
            await writer.write(batch)
    assert list(rejected.value.indices or ()) == [1]
    assert "unknown topic" in rejected.value.reason_for(1).lower()
    assert [body for body, _ in await read_topic(servers, topic)] == [b"a"]


@pytest.mark.deadline(60)
async def test_a_transactional_sink_rejects_a_destination_other_than_its_topic() -> None:
    # Its read-back on open reads its own topic's tail only: a record written to another
    # topic would be written again after a crash, so it is dead-lettered instead.
    servers = require_kafka()
    topic, other = [await trio.to_thread.run_sync(create_topic, servers) for _ in range(2)]
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, transactional=True)
    batch = [
        Message(b"a", {}, "t-0"),
        Message(b"b", {}, "t-1", destination=other),
        Message(b"c", {}, "t-2", destination=topic),  # (its own topic named: written)
    ]
    async with KafkaSink(config, Context(route="t", role="sink")).open() as writer:
        with pytest.raises(MessageRejected) as rejected:
            await writer.write(batch)
        assert list(rejected.value.indices or ()) == [1]
        assert f"a transactional sink writes only its topic {topic!r}" in (
            rejected.value.reason_for(1)
        )
        await writer.write([batch[0], batch[2]])  # (the engine's retry of the rest)
    assert [body for body, _ in await read_topic(servers, topic)] == [b"a", b"c"]
    assert await read_topic(servers, other) == []


def create_topic_named(servers: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


@pytest.mark.deadline(60)
async def test_a_header_name_that_is_not_utf8_in_the_tail_does_not_stop_the_read_back() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, transactional=True)
    async with KafkaSink(config, Context(route=topic)).open() as writer:
        await writer.write([Message(b"mine", {}, "id-1")])
    # Another writer's records, one with a header name that is not UTF-8 (confluent-kafka
    # hands such headers back with an error, or with a NULL in a pair).
    hostile = [(None, b"h", [(b"\xff\xfe", b"x"), (b"bridge-id", b"theirs")])] * 20
    await trio.to_thread.run_sync(produce_raw, servers, topic, hostile)
    async with KafkaSink(config, Context(route=topic)).open() as writer:
        assert "id-1" in writer.written  # (read back past the hostile records)
        await writer.write([Message(b"mine", {}, "id-1"), Message(b"new", {}, "id-2")])
        assert writer.skipped == 1
    bodies = [body for body, _ in await read_topic(servers, topic)]
    assert bodies.count(b"mine") == 1
    assert b"new" in bodies
