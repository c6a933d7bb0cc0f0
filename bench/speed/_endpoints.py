"""What the endpoint throughput benchmarks (mqtt, redis, nats, amqp) share.

- :func:`private_server`: a server of our own (mosquitto, redis-server,
  nats-server) on a free port for the block.
- :func:`timed` and :func:`add_ratios`: messages/s and CPU per message, and
  each row against the bare library in the same direction.
- Routes whose other end costs nothing: :func:`run_to_count` (into a
  :class:`CountingSink`) and :func:`run_from_memory` (from a :class:`ListSource`).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import trio
from _common import BenchError, free_port, wait_port

from bridges import Envelope, Message, Route, Sink, Source


@contextmanager
def private_server(command: Callable[[int, Path], list[str]], what: str) -> Iterator[int]:
    """A server of our own (mosquitto, redis-server, nats-server) for the block; yields its port.

    COMMAND gives its command line for a free port and a temporary directory.
    """
    port = free_port()
    with tempfile.TemporaryDirectory() as work:
        process = subprocess.Popen(
            command(port, Path(work)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            try:
                wait_port(port, process, f"{what} ({command(port, Path(work))[0]})")
            except BenchError as exc:
                raise SystemExit(str(exc)) from None
            yield port
        finally:
            process.terminate()
            process.wait(10)


def timed(run: Callable[[], None], count: int) -> tuple[float, float]:
    """(messages/s, CPU µs per message) of ``run()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return count / wall, cpu / count * 1e6


def add_ratios(rows: list[dict[str, Any]], rate: str = "rate", ratio: str = "ratio") -> None:
    """Each row's rate against the first row of its direction (the bare library)."""
    for row in rows:
        bare = next(r for r in rows if r["direction"] == row["direction"])
        row[ratio] = row[rate] / bare[rate]


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
    """A sink that only counts (the route's cost without a destination's); ``done`` is set
    once ``goal`` messages were written."""

    def __init__(self, goal: int) -> None:
        self.count = 0
        self.goal = goal
        self.done = trio.Event()

    def describe(self) -> str:
        return "count"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[CountingSink]:
        yield self

    async def write(self, batch: Sequence[Message]) -> None:
        self.count += len(batch)
        if self.count >= self.goal:
            self.done.set()
        await trio.lowlevel.checkpoint()


async def run_to_count(source: Source, count: int, limit: float = 120.0, **route: Any) -> None:
    """A route from SOURCE to a :class:`CountingSink` until COUNT messages were written.

    ROUTE: the :class:`bridges.Route` options (in_flight, batch_count, ...).
    """
    sink = CountingSink(count)
    bench_route = Route("bench", source, sink, **route)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bench_route.run)
        with trio.fail_after(limit):
            await sink.done.wait()
        bench_route.stop()


async def run_from_memory(
    sink: Sink, count: int, size: int, limit: float = 120.0, **route: Any
) -> None:
    """A route from COUNT messages of SIZE bytes (a :class:`ListSource`) to SINK, to the end."""
    body = b"x" * size
    source = ListSource(Message(body, {}, f"m{i}") for i in range(count))
    with trio.fail_after(limit):
        await Route("bench", source, sink, **route).run()
    if source.acked != count:
        raise SystemExit(f"bridge sink wrote {source.acked} of {count}")
