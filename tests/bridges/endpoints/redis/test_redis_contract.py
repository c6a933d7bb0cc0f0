"""The redis source and sink held to the bridges Source/Sink contract, against a real Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import coredis
import pytest
from family_kit import POISON_MIXES, POISON_SETTINGS, poison_run
from hypothesis import given
from redis_servers import require_redis

from bridges import Context, Message
from bridges.endpoints.redis import RedisSink, RedisSinkConfig, RedisSource, RedisSourceConfig
from bridges.testing import SinkCase, SourceCase, check_sink, check_source


@asynccontextmanager
async def stream_source() -> AsyncIterator[SourceCase]:
    url = require_redis()
    stream = f"trio-stomp-contract-{uuid.uuid4().hex[:10]}"
    config = RedisSourceConfig(url=url, stream=stream, start="0", block=0.05)
    source = RedisSource(config, Context(route="c", in_flight=100))

    async def publish(messages: Sequence[Message]) -> None:
        async with coredis.Redis.from_url(url) as client:
            for message in messages:
                fields: dict[str, str | bytes] = {"body": message.body, "bridge-id": message.id}
                fields.update(message.headers)
                await client.xadd(stream, fields)

    yield SourceCase(source, publish)


@asynccontextmanager
async def stream_sink() -> AsyncIterator[SinkCase]:
    url = require_redis()
    stream = f"trio-stomp-contract-{uuid.uuid4().hex[:10]}"
    sink = RedisSink(RedisSinkConfig(url=url, stream=stream), Context(route="c", role="sink"))

    async def read_back() -> list[Message]:
        async with coredis.Redis.from_url(url) as client:
            found = await client.xrange(stream)
        held = []
        for entry in found:
            fields: dict[str | bytes, str | bytes] = dict(entry.field_values or {})
            body = fields.get(b"body", b"")
            assert isinstance(body, bytes)
            held.append(Message(body))
        return held

    never = Message(b"a header named like the body field", {"body": "x"}, "never")
    yield SinkCase(sink, read_back, reject=never)


@pytest.mark.deadline(60)
async def test_the_redis_source_keeps_the_source_contract() -> None:
    await check_source(stream_source)


@pytest.mark.deadline(60)
async def test_the_redis_sink_keeps_the_sink_contract() -> None:
    await check_sink(stream_sink)


@POISON_SETTINGS
@given(mix=POISON_MIXES)
def test_the_redis_sink_sets_each_poison_message_aside_alone(mix: list[int | None]) -> None:
    poison_run(stream_sink, mix)
