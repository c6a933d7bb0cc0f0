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
  only counts, ``in_flight = --window``, batches of ``--batch`` (XACK after
  each batch).

publish (``count`` entries):

- *coredis bare*: pipelines of ``--batch`` ``XADD`` (body and an id field);
- *bridge redis sink*: a route from an in-memory source to the ``redis`` sink,
  batches of ``--batch``: one script call each (the idempotent append, the
  default);
- *bridge redis sink, dedup off*: the same with ``dedup_window = 0``, one
  pipeline of XADDs per batch: the cost of the idempotent append is the ratio
  of the two.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import coredis
import trio
from _common import HOST, environment_line
from _endpoints import add_ratios, private_server, run_from_memory, run_to_count, timed

from bridges import Context
from bridges.endpoints.redis import RedisSink, RedisSinkConfig, RedisSource, RedisSourceConfig


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


async def consume_bridge(url: str, stream: str, count: int, args: Any) -> None:
    context = Context(route="bench", in_flight=args.window)
    config = RedisSourceConfig(url=url, stream=stream, group="bridge", start="0", block=0.1)
    source = RedisSource(config, context)
    await run_to_count(source, count, in_flight=args.window, batch_count=args.batch)


async def publish_bare(url: str, stream: str, count: int, size: int, batch: int) -> None:
    body = b"x" * size
    async with coredis.Redis.from_url(url) as client:
        for start in range(0, count, batch):
            async with client.pipeline(transaction=False) as pipe:
                for i in range(start, min(count, start + batch)):
                    pipe.xadd(stream, {"body": body, "bridge-id": f"m{i}"})


async def publish_bridge(url: str, stream: str, count: int, args: Any, window: int) -> None:
    config = RedisSinkConfig(url=url, stream=stream, dedup_window=window)
    sink = RedisSink(config, Context(route="bench", role="sink"))
    await run_from_memory(sink, count, args.size, in_flight=args.window, batch_count=args.batch)


def measure(url: str, args: Any) -> list[dict[str, Any]]:
    count = args.count
    rows: list[dict[str, Any]] = []

    def case(direction: str, name: str, runner: Callable[[str], None], filled: bool) -> None:
        best = (0.0, 0.0)
        for _ in range(args.rounds):
            stream = f"bench-{uuid.uuid4().hex[:8]}"
            if filled:
                trio.run(fill, url, stream, count, args.size)
            best = max(best, timed(lambda: runner(stream), count))  # noqa: B023 (run at once)
        rows.append({"direction": direction, "name": name, "rate": best[0], "cpu_us": best[1]})

    window = args.window
    case(
        "redis -> (consume)",
        "coredis bare",
        lambda s: trio.run(consume_bare, url, s, count, window),
        True,
    )
    case(
        "redis -> (consume)",
        "bridge redis source",
        lambda s: trio.run(consume_bridge, url, s, count, args),
        True,
    )
    case(
        "(publish) -> redis",
        "coredis bare",
        lambda s: trio.run(publish_bare, url, s, count, args.size, args.batch),
        False,
    )
    case(
        "(publish) -> redis",
        "bridge redis sink",
        lambda s: trio.run(publish_bridge, url, s, count, args, 100_000),
        False,
    )
    case(
        "(publish) -> redis",
        "bridge sink, dedup off",
        lambda s: trio.run(publish_bridge, url, s, count, args, 0),
        False,
    )
    add_ratios(rows)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsync", choices=("always", "everysec"), default="always")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with private_server(redis_command(args.fsync), "redis-server") as port:
        rows = measure(f"redis://{HOST}:{port}/0", args)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(environment_line())
    print(
        f"Redis Streams, {args.count} entries of {args.size} B, batch {args.batch}, "
        f"window {args.window}, appendfsync {args.fsync}; best of {args.rounds}; loopback"
    )
    print(f"| {'direction':<18} | {'client':<22} | {'msg/s':>8} | {'CPU us/msg':>10} | ratio |")
    print(f"|{'-' * 20}|{'-' * 24}|{'-' * 10}|{'-' * 12}|-------|")
    for row in rows:
        print(
            f"| {row['direction']:<18} | {row['name']:<22} | {row['rate']:>8,.0f} | "
            f"{row['cpu_us']:>10.1f} | {row['ratio']:>5.0%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
