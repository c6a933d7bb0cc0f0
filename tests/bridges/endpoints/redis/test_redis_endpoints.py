"""The redis source and sink against a real Redis: streams, groups, acks, bad input, restarts."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import coredis
import pytest
import trio
from coredis.response.types import StreamPending
from family_kit import check_says
from hypothesis import given, settings
from hypothesis import strategies as st
from redis_servers import HOSTPORT, private_redis, require_redis

from bridges import Context, Message, MessageRejected, RetryPolicy, Route
from bridges.endpoints.redis import (
    RedisEndpointError,
    RedisSink,
    RedisSinkConfig,
    RedisSource,
    RedisSourceConfig,
)
from bridges.testing import FakeSink, FakeSource, messages, wait_until

CTX = Context(route="r", in_flight=50)


def unique() -> str:
    return f"trio-stomp-test-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def redis(url: str) -> AsyncIterator[coredis.Redis[bytes]]:
    async with coredis.Redis.from_url(url) as client:
        yield client


async def entries(url: str, stream: str) -> list[tuple[str, dict[bytes, bytes]]]:
    async with redis(url) as client:
        found = await client.xrange(stream)
    out = []
    for entry in found:
        fields = {k: v for k, v in (entry.field_values or {}).items()}
        assert all(isinstance(x, bytes) for x in (entry.identifier, *fields, *fields.values()))
        out.append((str(entry.identifier), fields))
    return out  # type: ignore[return-value]  # checked bytes above


async def pending_count(url: str, stream: str) -> int:
    async with redis(url) as client:
        summary = await client.xpending(stream, "bridge")
    assert isinstance(summary, StreamPending)
    return summary.pending


async def add(client: coredis.Redis[bytes], stream: str, body: bytes) -> str:
    entry_id = await client.xadd(stream, {"body": body, "k": b"v"})
    assert entry_id is not None
    return entry_id.decode()


async def test_the_sink_appends_each_batch_binary_safe_with_headers_and_id() -> None:
    url = require_redis()
    stream = unique()
    sink = RedisSink(RedisSinkConfig(url=url, stream=stream + "-{header:kind|none}"), CTX)
    batch = [
        Message(b"\x00\xff\r\n\x00", {"kind": "a", "note": "caf\u00e9"}, "id-0"),
        Message(b"", {"kind": "a"}, "id-1"),
        Message(b"x" * 1000, {}, "id-2"),
    ]
    async with sink.open() as writer:
        await writer.write(batch)
    written = await entries(url, stream + "-a")
    assert [fields[b"bridge-id"] for _, fields in written] == [b"id-0", b"id-1"]
    assert written[0][1][b"body"] == b"\x00\xff\r\n\x00"
    assert written[0][1][b"note"] == "caf\u00e9".encode()
    assert written[1][1][b"body"] == b""
    assert [f[b"body"] for _, f in await entries(url, stream + "-none")] == [b"x" * 1000]


async def test_maxlen_trims_the_stream_approximately() -> None:
    url = require_redis()
    stream = unique()
    sink = RedisSink(RedisSinkConfig(url=url, stream=stream, maxlen=10), CTX)
    async with sink.open() as writer:
        for start in range(0, 1000, 100):
            await writer.write(messages(100, prefix=f"b{start}-"))
    async with redis(url) as client:
        length = await client.xlen(stream)
    assert 10 <= length < 1000  # approximate trimming: whole macro nodes


async def test_the_source_hands_out_entries_and_acks_only_what_was_acked() -> None:
    url = require_redis()
    stream = unique()
    async with redis(url) as client:
        ids = [await add(client, stream, f"m{i}".encode()) for i in range(5)]
    config = RedisSourceConfig(url=url, stream=stream, start="0", consumer="c1")
    source = RedisSource(config, CTX)
    async with source.open() as receiver:
        got = [await receiver.receive() for _ in range(5)]
        assert [e.message.body for e in got] == [f"m{i}".encode() for i in range(5)]
        assert [e.message.id for e in got] == [f"r/{stream}:{i}" for i in ids]  # ROUTE/STREAM:ID
        assert got[0].message.headers == {"k": "v", "redis-id": ids[0], "redis-stream": stream}
        for envelope in got[:3]:
            await envelope.ack()
        await got[3].nack(None)  # a release: stays pending for this consumer
    # Reopened: the entries still pending for this consumer come first, with their ids.
    async with source.open() as receiver:
        again = [await receiver.receive() for _ in range(2)]
        assert [e.message.id for e in again] == [f"r/{stream}:{i}" for i in ids[3:]]
        with trio.move_on_after(0.3):
            extra = await receiver.receive()
            pytest.fail(f"acked entry delivered again: {extra}")
        for envelope in again:
            await envelope.ack()
    assert await pending_count(url, stream) == 0


async def test_a_nack_with_an_error_offers_the_entry_again_at_once() -> None:
    url = require_redis()
    stream = unique()
    async with redis(url) as client:
        await client.xadd(stream, {"body": b"only", "bridge-id": b"stable"})
    source = RedisSource(RedisSourceConfig(url=url, stream=stream, start="0"), CTX)
    async with source.open() as receiver:
        first = await receiver.receive()
        assert first.message.id == "stable"
        await first.nack(RuntimeError("sink said no"))
        second = await receiver.receive()
        assert (second.message.id, second.message.body) == ("stable", b"only")
        await second.ack()


async def test_entries_of_a_dead_consumer_are_claimed_after_claim_idle() -> None:
    url = require_redis()
    stream = unique()
    async with redis(url) as client:
        await client.xgroup_create(stream, "bridge", "0", mkstream=True)
        for i in range(3):
            await client.xadd(stream, {"body": f"d{i}".encode()})
        # consumer "dead" reads them and never acks
        await client.xreadgroup("bridge", "dead", {stream: ">"}, count=10)
        await client.xadd(stream, {"body": b"new"})
    config = RedisSourceConfig(url=url, stream=stream, consumer="alive", claim_idle=0.05)
    await trio.sleep(0.1)
    async with RedisSource(config, CTX).open() as receiver:
        bodies = []
        for _ in range(4):
            envelope = await receiver.receive()
            bodies.append(envelope.message.body)
            await envelope.ack()
    assert bodies == [b"d0", b"d1", b"d2", b"new"]


async def test_the_window_bounds_what_is_pending_for_the_consumer() -> None:
    url = require_redis()
    stream = unique()
    async with redis(url) as client:
        async with client.pipeline(transaction=False) as pipe:
            for i in range(100):
                pipe.xadd(stream, {"body": str(i).encode()})
    source = RedisSource(RedisSourceConfig(url=url, stream=stream, start="0"), Context(in_flight=7))
    async with source.open() as receiver:
        held = [await receiver.receive() for _ in range(7)]
        await trio.sleep(0.2)
        assert await pending_count(url, stream) == 7
        await held[0].ack()
        await receiver.receive()
        await trio.sleep(0.1)
        assert await pending_count(url, stream) == 7  # one acked, one read


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"redis://bridge:not-the-password@{HOSTPORT}/0", "authentication failed"),
        ("redis://no-such-host.invalid:6379/0", "no-such-host.invalid:6379"),
        ("redis://127.0.0.1:1/0", "127.0.0.1:1"),
    ],
)
async def test_connection_errors_are_one_line_naming_the_server_not_the_password(
    url: str, expected: str
) -> None:
    require_redis()
    sink = RedisSink(RedisSinkConfig(url=url, stream="s", connect_timeout=3), CTX)
    with pytest.raises(Exception, match="redis ") as caught:
        async with sink.open():
            pass
    text = str(caught.value)
    assert expected in text
    assert "\n" not in text
    assert "not-the-password" not in text


async def test_a_route_names_itself_in_the_error(caplog: pytest.LogCaptureFixture) -> None:
    require_redis()
    config = RedisSinkConfig(url=f"redis://bridge:wrong@{HOSTPORT}/0", stream="s")
    route = Route("orders", FakeSource(messages(1), end=False), RedisSink(config, CTX))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route.run)
        await wait_until(lambda: "authentication failed" in caplog.text)
        route.abort()
    line = next(r.getMessage() for r in caplog.records if "authentication" in r.getMessage())
    assert "route 'orders'" in line
    assert "wrong" not in line


async def test_refused_and_too_big_messages_are_rejected_and_the_rest_written() -> None:
    url = require_redis()
    stream = unique()
    async with redis(url) as client:
        await client.set(stream + "-str", "not a stream")
    sink = RedisSink(
        RedisSinkConfig(url=url, stream=stream + "-{header:to|ok}", max_bytes=100), CTX
    )
    batch = [
        Message(b"fine", {}, "a"),
        Message(b"x" * 101, {}, "big"),
        Message(b"clash", {"body": "header named like the body field"}, "clash"),
    ]
    async with sink.open() as writer:
        with pytest.raises(MessageRejected) as rejected:
            await writer.write(batch)
        assert rejected.value.indices == (1, 2)
        assert "max_bytes (100)" in rejected.value.reason
        assert await entries(url, stream + "-ok") == []  # nothing sent for a rejected batch
        with pytest.raises(MessageRejected) as refused:
            await writer.write([Message(b"1", {}, "a"), Message(b"2", {"to": "str"}, "b")])
        assert refused.value.indices == (1,)
        assert "WRONGTYPE" in refused.value.reason or "wrong kind" in refused.value.reason
    assert [f[b"bridge-id"] for _, f in await entries(url, stream + "-ok")] == [b"a"]


@pytest.mark.deadline(40)
async def test_a_server_restart_mid_stream_loses_nothing(tmp_path: Path) -> None:
    async with private_redis(tmp_path) as server:
        stream = unique()
        total = 3000
        source = FakeSource(messages(total), end=True)
        to_redis = Route(
            "in",
            source,
            RedisSink(RedisSinkConfig(url=server.url, stream=stream, connect_timeout=2), CTX),
            in_flight=200,
            batch_count=50,
        )
        out = FakeSink()
        from_redis = Route(
            "out",
            RedisSource(
                RedisSourceConfig(url=server.url, stream=stream, start="0", block=0.1), CTX
            ),
            out,
            in_flight=200,
            batch_count=50,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(to_redis.run)
            nursery.start_soon(from_redis.run)
            await wait_until(lambda: len(out.written) >= total // 3)
            await server.restart()
            await wait_until(lambda: len(set(out.written)) >= total)
            from_redis.stop()
        assert set(out.written) == {m.id for m in messages(total)}
        assert to_redis.stats.restarts + from_redis.stats.restarts >= 1
        assert len(source.acked) == total


async def test_streams_the_acl_refuses(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with private_redis(tmp_path) as server:
        async with redis(server.url) as client:
            await client.acl_setuser("limited", "on", ">limited-pass", "~allowed-*", "+@all")
        url = server.url.replace("redis://", "redis://limited:limited-pass@")
        sink = RedisSink(RedisSinkConfig(url=url, stream="{header:to}"), CTX)
        async with sink.open() as writer:
            with pytest.raises(MessageRejected) as refused:
                await writer.write(
                    [Message(b"1", {"to": "allowed-a"}, "a"), Message(b"2", {"to": "secret"}, "b")]
                )
        assert refused.value.indices == (1,)
        assert "NOPERM" in refused.value.reason or "permission" in refused.value.reason
        assert "limited-pass" not in refused.value.reason
        assert [f[b"bridge-id"] for _, f in await entries(server.url, "allowed-a")] == [b"a"]
        # A source on a stream the user may not read: one line naming the route and the server.
        source = RedisSource(RedisSourceConfig(url=url, stream="secret"), Context(route="orders"))
        route = Route("orders", source, FakeSink())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(route.run)
            await wait_until(lambda: "route 'orders' failed" in caplog.text)
            route.abort()
        line = next(r.getMessage() for r in caplog.records if "failed" in r.getMessage())
        assert f"redis://127.0.0.1:{server.port}/0" in line
        assert "limited-pass" not in line


async def test_a_body_too_big_for_the_server_is_never_acked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The private server's proto-max-bulk-len is 1 MiB; the sink's max_bytes is left at
    # Redis's default, so the server is the one that refuses (and drops the connection).
    async with private_redis(tmp_path) as server:
        big, small = Message(b"x" * (2 * 1024 * 1024), {}, "big"), Message(b"ok", {}, "ok")
        source = FakeSource([big, small], requeue=False)
        sink = RedisSink(RedisSinkConfig(url=server.url, stream="s"), CTX)
        route = Route(
            "bigroute", source, sink, retry=RetryPolicy(attempts=2, initial=0.01), batch_count=1
        )
        await route.run()
        assert source.acked == ["ok"]
        assert [message_id for message_id, _ in source.nacked] == ["big"]
        assert [f[b"bridge-id"] for _, f in await entries(server.url, "s")] == [b"ok"]
    line = next(r.getMessage() for r in caplog.records if "nacked after" in r.getMessage())
    assert "route 'bigroute'" in line
    assert "invalid bulk length" in line


async def test_tls_is_verified_by_default(tmp_path: Path) -> None:
    async with private_redis(tmp_path) as server:
        config = RedisSinkConfig(url=server.tls_url, stream="tls", ca_file=str(server.ca_file))
        async with RedisSink(config, CTX).open() as writer:
            await writer.write([Message(b"\x00over tls", {}, "t")])
        assert [f[b"body"] for _, f in await entries(server.url, "tls")] == [b"\x00over tls"]
        untrusted = RedisSink(RedisSinkConfig(url=server.tls_url, stream="tls"), CTX)
        with pytest.raises(RedisEndpointError, match="certificate verify failed") as caught:
            async with untrusted.open():
                pass
        assert "\n" not in str(caught.value)


async def test_wait_replicas_fails_the_write_when_too_few_replicas_have_it() -> None:
    url = require_redis()
    stream = unique()
    config = RedisSinkConfig(url=url, stream=stream, wait_replicas=1, wait_timeout=0.05)
    async with RedisSink(config, CTX).open() as writer:
        with pytest.raises(RedisEndpointError, match="WAIT: 0 of 1 replica"):
            await writer.write(messages(3))
    # Written on the primary, not confirmed: the engine retries (a duplicate, not a loss).
    assert len(await entries(url, stream)) == 3


def test_check_takes_the_documented_config_and_names_bad_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "redis.toml"
    config.write_text(
        "[routes.r]\n"
        'source = { type = "redis", url = "redis://127.0.0.1:6379/0", stream = "orders", '
        'group = "bridge", consumer = "bridge-1" }\n'
        'sink = { type = "redis", url = "redis://u:s3cret-pass@127.0.0.1:6379/0", '
        'stream = "events-{header:kind}", maxlen = 1000000 }\n'
    )
    check_says(
        capsys,
        config,
        "r: redis orders (group bridge) on redis://127.0.0.1:6379/0 -> redis events-",
        "s3cret-pass",
        ("maxlen = 1000000", "maxlen = 0"),
        "route 'r': sink.maxlen:",
    )


_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)


@settings(max_examples=30, deadline=None)
@given(
    body=st.binary(max_size=3000),
    headers=st.dictionaries(_TEXT, _TEXT, max_size=4),
    message_id=_TEXT,
)
def test_any_body_headers_and_id_survive_a_redis_round_trip(
    body: bytes, headers: dict[str, str], message_id: str
) -> None:
    url = require_redis()
    kept = {k: v for k, v in headers.items() if k not in ("bridge-id", "redis-id", "redis-stream")}
    sendable = all(k and k != "body" for k in kept)
    stream = unique()

    async def main() -> None:
        sink = RedisSink(RedisSinkConfig(url=url, stream=stream), CTX)
        async with sink.open() as writer:
            if not sendable:
                with pytest.raises(MessageRejected):
                    await writer.write([Message(body, headers, message_id)])
                return
            await writer.write([Message(body, headers, message_id)])
        source = RedisSource(RedisSourceConfig(url=url, stream=stream, start="0"), CTX)
        async with source.open() as receiver:
            with trio.fail_after(10):
                got = (await receiver.receive()).message
        assert got.body == body
        # (empty: ROUTE/STREAM:ENTRY-ID)
        assert got.id == (
            message_id or f"r/{got.headers['redis-stream']}:{got.headers['redis-id']}"
        )
        assert {k: v for k, v in got.headers.items() if not k.startswith("redis-")} == {
            k: v for k, v in kept.items() if not k.startswith("redis-")
        }

    trio.run(main)


async def test_two_streams_entries_with_one_entry_id_get_two_ids() -> None:
    # Entry ids are unique in their stream only ("5-1" in both): ROUTE/STREAM:ENTRY-ID
    # keeps two distinct messages apart, and stays the same on redelivery.
    url = require_redis()
    streams = [unique(), unique()]
    async with redis(url) as client:
        for stream in streams:
            await client.xadd(stream, {"body": b"same"}, identifier="5-1")
    got = []
    for route, stream in zip(("a", "b"), streams, strict=True):
        config = RedisSourceConfig(url=url, stream=stream, start="0")
        async with RedisSource(config, Context(route=route)).open() as receiver:
            first = await receiver.receive()
            await first.nack(RuntimeError("again"))
            again = await receiver.receive()
            assert again.message.id == first.message.id
            await again.ack()
            got.append(first.message.id)
    assert got == [f"a/{streams[0]}:5-1", f"b/{streams[1]}:5-1"]
