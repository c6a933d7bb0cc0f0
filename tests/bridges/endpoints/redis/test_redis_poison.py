"""The issue's own route: a ``redis`` source whose entries a ``stomp`` sink cannot send.

A field that is not UTF-8 (the source hands it out as text with surrogate
escapes), 1,001 fields, or one of 70,000 bytes: each used to fail its whole
STOMP batch (LocalProtocolError, or the broker's ERROR "malformed frame"),
so 27 good messages were dead-lettered beside it, or, with no dead-letter
sink, the batch was nacked forever. Now each goes to the dead letters alone,
with its reason, and every good entry arrives.
"""

from __future__ import annotations

import uuid

import coredis
import trio
from redis_servers import require_redis

import trio_stomp
from bridges import Context, Message, RetryPolicy, Route
from bridges.endpoints.redis import RedisSource, RedisSourceConfig
from bridges.endpoints.stomp import StompSink, StompSinkConfig
from bridges.testing import FakeSink
from trio_stomp.broker import open_broker


async def drain(url: str, destination: str, held: list[Message]) -> list[Message]:
    """Take everything off the queue (what was taken before stays counted)."""
    async with trio_stomp.connect(url, heartbeat=(0, 0)) as reader:
        async with reader.subscribe(destination, ack="client-individual") as sub:
            while True:
                with trio.move_on_after(0.25):
                    message = await sub.__anext__()
                    await message.ack()
                    held.append(Message(message.body))
                    continue
                return list(held)


async def test_a_redis_field_that_is_not_utf8_goes_to_the_dead_letters_alone() -> None:
    url = require_redis()
    stream = f"trio-stomp-poison-{uuid.uuid4().hex[:10]}"
    bad = {
        b"not-utf8": {b"body": b"not-utf8", b"field": b"caf\xe9"},
        b"many": {b"body": b"many", **{f"f{i}".encode(): b"v" for i in range(1001)}},
        b"long": {b"body": b"long", b"field": b"v" * 70_000},
    }
    async with coredis.Redis.from_url(url) as client:
        for n in range(30):
            if n % 10 == 3:
                await client.xadd(stream, bad[[b"not-utf8", b"many", b"long"][n // 10]])
            await client.xadd(stream, {b"body": f"good-{n}".encode()})
    source_config = RedisSourceConfig(url=url, stream=stream, start="0", block=0.05)
    source = RedisSource(source_config, Context(route="poison", in_flight=100))
    dead = FakeSink()
    async with open_broker() as broker:
        destination = "/queue/from-redis"
        config = StompSinkConfig(url=broker.url, destination=destination, heartbeat=(0, 0))
        sink = StompSink(config, Context(route="poison", role="sink"))
        route = Route(
            "poison",
            source,
            sink,
            dead_letter=dead,
            batch_count=100,
            batch_time=0.2,
            retry=RetryPolicy(attempts=2, initial=0.01, jitter=0.0),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(route.run)
            held: list[Message] = []
            while len(held) < 30:
                held = await drain(broker.url, destination, held)
            route.stop()
    assert sorted(m.body for m in held) == sorted(f"good-{n}".encode() for n in range(30))
    letters = {m.body: m.headers["bridge-error"] for batch in dead.batches for m in batch}
    assert sorted(letters) == sorted(bad)
    assert "not UTF-8 text" in letters[b"not-utf8"]
    assert "max_header_count" in letters[b"many"]
    assert "max_header_length" in letters[b"long"]
    assert route.stats.written == 30
    assert route.stats.dead_lettered == 3
