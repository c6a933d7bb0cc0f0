"""The kafka source and sink held to the bridges Source/Sink contract, against a real Kafka."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest
import trio
from family_kit import POISON_MIXES, POISON_SETTINGS, poison_run
from hypothesis import given
from kafka_servers import create_topic, produce, read_topic, require_kafka

from bridges import Context, Message
from bridges.endpoints.kafka import KafkaSink, KafkaSinkConfig, KafkaSource, KafkaSourceConfig
from bridges.testing import SinkCase, SourceCase, check_sink, check_source

#: The sink's max_bytes in these tests: a body over it is the sink's own poison.
SMALL = 64 * 1024


@asynccontextmanager
async def topic_source() -> AsyncIterator[SourceCase]:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    config = KafkaSourceConfig(bootstrap_servers=servers, topic=topic, group=f"g-{topic}")
    source = KafkaSource(config, Context(route="c", in_flight=100))

    async def publish(messages: Sequence[Message]) -> None:
        await produce(servers, topic, [(m.body, {"bridge-id": m.id}) for m in messages])

    yield SourceCase(source, publish)


@asynccontextmanager
async def topic_sink() -> AsyncIterator[SinkCase]:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, max_bytes=SMALL)
    sink = KafkaSink(config, Context(route="c", role="sink"))

    async def read_back() -> list[Message]:
        return [Message(body) for body, _headers in await read_topic(servers, topic)]

    never = Message(b"a topic name Kafka refuses", {}, "never", destination="no such/topic")
    poison = [Message(b"x" * (SMALL + 1), {}, "too-big")]
    yield SinkCase(sink, read_back, reject=never, poison=poison)


@pytest.mark.deadline(120)
async def test_the_kafka_source_keeps_the_source_contract() -> None:
    await check_source(topic_source)


@pytest.mark.deadline(120)
async def test_the_kafka_sink_keeps_the_sink_contract() -> None:
    await check_sink(topic_sink)


@POISON_SETTINGS
@given(mix=POISON_MIXES)
def test_the_kafka_sink_sets_each_poison_message_aside_alone(mix: list[int | None]) -> None:
    poison_run(topic_sink, mix)


@asynccontextmanager
async def transactional_sink() -> AsyncIterator[SinkCase]:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    config = KafkaSinkConfig(
        bootstrap_servers=servers, topic=topic, max_bytes=SMALL, transactional=True
    )
    sink = KafkaSink(config, Context(route=f"c-{topic}", role="sink"))

    async def read_back() -> list[Message]:
        return [Message(body) for body, _headers in await read_topic(servers, topic)]

    poison = [Message(b"x" * (SMALL + 1), {}, "too-big")]
    yield SinkCase(sink, read_back, poison=poison)


@pytest.mark.deadline(180)
async def test_the_transactional_kafka_sink_keeps_the_sink_contract() -> None:
    await check_sink(transactional_sink)
