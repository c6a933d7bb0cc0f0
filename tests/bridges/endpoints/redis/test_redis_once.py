"""The redis sink's idempotent append: a repeated id is a no-op in the stream, within its window."""

from __future__ import annotations

import uuid
from pathlib import Path

import coredis
from redis_servers import private_redis, require_redis

from bridges import Context, Message
from bridges.endpoints.redis import RedisSink, RedisSinkConfig
from bridges.endpoints.redis.sink import IDS_SUFFIX
from bridges.testing import messages

CTX = Context(route="r", role="sink")


def unique() -> str:
    return f"trio-stomp-test-{uuid.uuid4().hex[:10]}"


async def ids_in(url: str, stream: str) -> list[bytes]:
    async with coredis.Redis.from_url(url) as client:
        found = await client.xrange(stream)
    out = []
    for entry in found:
        fields: dict[str | bytes, str | bytes] = dict(entry.field_values or {})
        value = fields[b"bridge-id"]
        assert isinstance(value, bytes)
        out.append(value)
    return out


async def test_a_batch_written_again_adds_nothing() -> None:
    url = require_redis()
    stream = unique()
    sink = RedisSink(RedisSinkConfig(url=url, stream=stream), CTX)
    batch = messages(20)
    async with sink.open() as writer:
        await writer.write(batch)
        await writer.write(batch[5:15])  # the engine's retry, or a source's redelivery
        assert writer.skipped == 10
    async with sink.open() as writer:  # a new connection (a restarted bridge) knows them too
        await writer.write([*batch[:3], *messages(2, prefix="new")])
        assert writer.skipped == 3
    assert await ids_in(url, stream) == [m.id.encode() for m in batch + messages(2, "new")]


async def test_the_window_keeps_only_the_most_recent_ids() -> None:
    url = require_redis()
    stream = unique()
    sink = RedisSink(RedisSinkConfig(url=url, stream=stream, dedup_window=3), CTX)
    batch = messages(5)
    async with sink.open() as writer:
        await writer.write(batch)
        await writer.write([batch[0], batch[4]])  # m0 left the window: added again; m4 not
    assert await ids_in(url, stream) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m0"]
    async with coredis.Redis.from_url(url) as client:
        assert await client.zcard(stream + IDS_SUFFIX) == 3


async def test_off_and_empty_ids_append_every_time() -> None:
    url = require_redis()
    stream = unique()
    off = RedisSink(RedisSinkConfig(url=url, stream=stream, dedup_window=0), CTX)
    async with off.open() as writer:
        await writer.write(messages(2))
        await writer.write(messages(2))
    on = RedisSink(RedisSinkConfig(url=url, stream=stream), CTX)
    async with on.open() as writer:
        await writer.write([Message(b"x"), Message(b"x")])  # no id: nothing to know it by
    assert await ids_in(url, stream) == [b"m0", b"m1", b"m0", b"m1", b"", b""]
    async with coredis.Redis.from_url(url) as client:
        assert await client.exists([stream + IDS_SUFFIX]) == 0


async def test_the_ids_survive_a_server_restart_with_the_entries(tmp_path: Path) -> None:
    async with private_redis(tmp_path) as server:
        stream = unique()
        sink = RedisSink(RedisSinkConfig(url=server.url, stream=stream), CTX)
        async with sink.open() as writer:
            await writer.write(messages(10))
        await server.restart()  # the AOF gives back entries and ids together; no script cache
        async with sink.open() as writer:
            await writer.write(messages(12))
            assert writer.skipped == 10
        assert await ids_in(server.url, stream) == [m.id.encode() for m in messages(12)]
