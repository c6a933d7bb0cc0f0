"""Redis Streams endpoints against coredis used bare, on a private Redis, in one run.

    .venv/bin/python bench/redis_throughput.py [--count 50000] [--size 100] [--batch 100]
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
  batches of ``--batch`` (one pipeline each).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import coredis
import trio

from bridges import Context, Envelope, Message, Route
from bridges.endpoints.redis import RedisSink, RedisSinkConfig, RedisSource, RedisSourceConfig

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def private_redis(fsync: str) -> Iterator[str]:
    """A redis-server of our own for the block; yields its URL."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    with tempfile.TemporaryDirectory() as work:
        command = [
            binary, "--port", str(port), "--bind", HOST, "--dir", work, "--save", "",
            "--appendonly", "yes", "--appendfsync", fsync,
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection((HOST, port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or process.poll() is not None:
                        raise SystemExit(f"redis-server ({binary}) did not start") from None
                    time.sleep(0.05)
            yield f"redis://{HOST}:{port}/0"
        finally:
            process.terminate()
            process.wait(10)


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


class ListSource:
    """Hands out messages made on demand (a list made in advance would be that many live
    objects for the garbage collector to walk): the route's cost, not a source's."""

    def __init__(self, items: Iterator[Message]) -> None:
        self._items = items
        self.acked = 0

    def describe(self) -> str:
        return "list"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[ListSource]:
        yield self

    async def receive(self) -> Envelope:
        message = next(self._items, None)
        if message is None:
            raise trio.EndOfChannel
        return Envelope(message, ack=self._ack, nack=self._nack)

    async def _ack(self) -> None:
        self.acked += 1

    async def _nack(self, error: BaseException | None) -> None:
        raise SystemExit(f"a message was nacked: {error}")


class CountingSink:
    """A sink that only counts (the route's cost without a destination's)."""

    def __init__(self, goal: int, done: trio.Event) -> None:
        self.count = 0
        self._goal = goal
        self._done = done

    def describe(self) -> str:
        return "count"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[CountingSink]:
        yield self

    async def write(self, batch: Sequence[Message]) -> None:
        self.count += len(batch)
        if self.count >= self._goal:
            self._done.set()
        await trio.lowlevel.checkpoint()


async def consume_bridge(url: str, stream: str, count: int, args: Any) -> None:
    context = Context(route="bench", in_flight=args.window)
    config = RedisSourceConfig(url=url, stream=stream, group="bridge", start="0", block=0.1)
    done = trio.Event()
    route = Route(
        "bench",
        RedisSource(config, context),
        CountingSink(count, done),
        in_flight=args.window,
        batch_count=args.batch,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route.run)
        with trio.fail_after(120):
            await done.wait()
        route.stop()


async def publish_bare(url: str, stream: str, count: int, size: int, batch: int) -> None:
    body = b"x" * size
    async with coredis.Redis.from_url(url) as client:
        for start in range(0, count, batch):
            async with client.pipeline(transaction=False) as pipe:
                for i in range(start, min(count, start + batch)):
                    pipe.xadd(stream, {"body": body, "bridge-id": f"m{i}"})


async def publish_bridge(url: str, stream: str, count: int, args: Any) -> None:
    body = b"x" * args.size
    source = ListSource(Message(body, {}, f"m{i}") for i in range(count))
    sink = RedisSink(RedisSinkConfig(url=url, stream=stream), Context(route="bench", role="sink"))
    route = Route("bench", source, sink, in_flight=args.window, batch_count=args.batch)
    with trio.fail_after(120):
        await route.run()
    if source.acked != count:
        raise SystemExit(f"bridge sink wrote {source.acked} of {count}")


def timed(run: Callable[[], None], count: int) -> tuple[float, float]:
    """(messages/s, CPU µs per message) of ``run``."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return count / wall, cpu / count * 1e6


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
        lambda s: trio.run(publish_bridge, url, s, count, args),
        False,
    )
    for row in rows:
        bare = next(r for r in rows if r["direction"] == row["direction"])
        row["ratio"] = row["rate"] / bare["rate"]
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
    with private_redis(args.fsync) as url:
        rows = measure(url, args)
    if args.json:
        print(json.dumps(rows))
        return 0
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
