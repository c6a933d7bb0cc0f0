"""Redis Streams endpoints against coredis used bare, on a private Redis, in one run.

    .venv/bin/python bench/speed/redis_throughput.py [--count 50000] [--size 100] [--batch 100]
        [--window 1000] [--rounds 3] [--fsync always|everysec] [--json]

Starts its own ``redis-server`` (Debian's binary; loopback, a free port, AOF
on with ``appendfsync`` as given: ``always`` is the project's test config,
where durable means fsynced) and prints one table: messages/s (best of
``--rounds``), CPU time per message (this process), and the ratio to the
bare library in the same direction.

consume (``count`` entries waiting in a stream):

- *coredis bare*: ``XREADGROUP COUNT window`` then one ``XACK`` for what it
  read, in a loop: the plain loop, the limit;
- *bridge redis source*: a route from the ``redis`` source to a sink that
  only counts (XACK after each batch).

publish (``count`` entries):

- *coredis bare*: pipelines of ``--batch`` ``XADD`` (body and an id field);
- *bridge redis sink*: a route from an in-memory source to the ``redis`` sink:
  one script call per batch (the idempotent append, the default);
- *bridge redis sink, dedup off*: the same with ``dedup_window = 0``, one
  pipeline of XADDs per batch: the cost of the idempotent append is the ratio
  of the two.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import coredis
import trio
from _common import HOST, environment_line
from _endpoints import (
    Case,
    in_rounds,
    private_server,
    run_from_memory,
    run_to_count,
    timed,
    write_rows,
)

from bridges import Context
from bridges.endpoints.redis import RedisSink, RedisSinkConfig, RedisSource, RedisSourceConfig

CONSUME = "redis -> (consume)"
PUBLISH = "(publish) -> redis"
BARE = "coredis bare"
SOURCE = "bridge redis source"
SINK = "bridge redis sink"


def redis_command(fsync: str) -> Callable[[int, Path], list[str]]:
    """A redis-server of our own, with an AOF fsynced as FSYNC says."""

    def command(port: int, work: Path) -> list[str]:
        return [
            shutil.which("redis-server") or "/usr/bin/redis-server",
            "--port", str(port), "--bind", HOST, "--dir", str(work), "--save", "",
            "--appendonly", "yes", "--appendfsync", fsync,
        ]  # fmt: skip

    return command


async def fill(url: str, stream: str, count: int, size: int) -> None:
    body = b"x" * size
    async with coredis.Redis.from_url(url) as client:
        for start in range(0, count, 1000):
            async with client.pipeline(transaction=False) as pipe:
                for i in range(start, min(count, start + 1000)):
                    pipe.xadd(stream, {"body": body, "bridge-id": f"m{i}"})


async def consume_bare(url: str, stream: str, count: int, window: int) -> None:
    async with coredis.Redis.from_url(url) as client:
        await client.xgroup_create(stream, "bare", "0")
        got = 0
        while got < count:
            reply = await client.xreadgroup("bare", "c", {stream: ">"}, count=window, block=1000)
            entries = reply.get(stream.encode(), ()) if reply else ()
            if entries:
                await client.xack(stream, "bare", [e.identifier for e in entries])
                got += len(entries)


async def consume_bridge(url: str, stream: str, count: int) -> None:
    """A route (shipped defaults) from the redis source (reading from the start) to a counter."""
    config = RedisSourceConfig(url=url, stream=stream, start="0")
    await run_to_count(RedisSource(config, Context(route="bench")), count)


async def publish_bare(url: str, stream: str, count: int, size: int, batch: int) -> None:
    body = b"x" * size
    async with coredis.Redis.from_url(url) as client:
        for start in range(0, count, batch):
            async with client.pipeline(transaction=False) as pipe:
                for i in range(start, min(count, start + batch)):
                    pipe.xadd(stream, {"body": body, "bridge-id": f"m{i}"})


async def publish_bridge(url: str, stream: str, count: int, size: int, dedup: bool) -> None:
    """A route (shipped defaults) from memory to the redis sink (``dedup``: the default
    idempotent append; else dedup_window = 0)."""
    config = RedisSinkConfig(url=url, stream=stream)
    if not dedup:
        config = attrs.evolve(config, dedup_window=0)
    sink = RedisSink(config, Context(route="bench", role="sink"))
    await run_from_memory(sink, count, size)


def cases(url: str, args: Any) -> list[Case]:
    """What this bench measures (the bare client first in each direction)."""
    count, size = args.count, args.size

    def on_stream(filled: bool, runner: Callable[[str], None]) -> Callable[[], tuple[float, float]]:
        def once() -> tuple[float, float]:
            stream = f"bench-{uuid.uuid4().hex[:8]}"
            if filled:
                trio.run(fill, url, stream, count, size)
            return timed(lambda: runner(stream), count)

        return once

    return [
        Case(
            CONSUME,
            BARE,
            on_stream(True, lambda s: trio.run(consume_bare, url, s, count, args.window)),
        ),
        Case(CONSUME, SOURCE, on_stream(True, lambda s: trio.run(consume_bridge, url, s, count))),
        Case(
            PUBLISH,
            BARE,
            on_stream(False, lambda s: trio.run(publish_bare, url, s, count, size, args.batch)),
        ),
        Case(
            PUBLISH,
            SINK,
            on_stream(False, lambda s: trio.run(publish_bridge, url, s, count, size, True)),
        ),
        Case(
            PUBLISH,
            "bridge sink, dedup off",
            on_stream(False, lambda s: trio.run(publish_bridge, url, s, count, size, False)),
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fsync", choices=("always", "everysec"), default="always")
    parser.add_argument("--json", metavar="PATH", help="write the figures here (write_report)")
    args = parser.parse_args()
    print(environment_line(), flush=True)
    with private_server(redis_command(args.fsync), "redis-server") as port:
        rows = in_rounds(cases(f"redis://{HOST}:{port}/0", args), args.rounds)
    if args.json:
        write_rows(args.json, "redis_throughput", rows)
    print(
        f"Redis Streams, {args.count} entries of {args.size} B, appendfsync {args.fsync}; "
        f"bare: batch {args.batch}, window {args.window}; bridge: shipped defaults; "
        f"{args.rounds} rounds, medians; loopback"
    )
    print(
        f"| {'direction':<18} | {'client':<22} | {'msg/s':>8} | {'CPU us/msg':>10} | ratio "
        "| ratio per round"
    )
    print(f"|{'-' * 20}|{'-' * 24}|{'-' * 10}|{'-' * 12}|-------|{'-' * 20}")
    for row in rows:
        rounds = " ".join(f"{ratio:.2f}" for ratio in row["ratios"])
        print(
            f"| {row['direction']:<18} | {row['name']:<22} | {row['rate']:>8,.0f} | "
            f"{row['cpu_us']:>10.1f} | {row['ratio']:>5.0%} | {rounds}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
