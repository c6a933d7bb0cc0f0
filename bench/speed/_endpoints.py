"""What the endpoint throughput benchmarks (mqtt, redis, nats, amqp) share.

- :func:`private_server`: a server of our own (mosquitto, redis-server,
  nats-server) on a free port for the block.
- :func:`timed` and :func:`in_rounds`: messages/s and CPU per message of one
  run, and each :class:`Case` run once per round, judged against the bare
  library in the same direction by the median of the per-round ratios.
- Routes whose other end costs nothing: :func:`run_to_count` (into a
  :class:`CountingSink`) and :func:`run_from_memory` (from a :class:`ListSource`).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from _common import BenchError, bench_command, free_port, wait_port, write_report

from bridges import Envelope, Message, Route, Sink, Source
from bridges._message import trusted_message


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


@dataclass(frozen=True)
class Case:
    """One client measured in one direction.

    ``once()`` makes one measurement, ``(messages/s, CPU µs per message)``
    (:func:`timed`), preparing what it needs (a filled queue) untimed. The
    first case of each direction is the bare library the others are judged by.
    """

    direction: str
    name: str
    once: Callable[[], tuple[float, float]]


def in_rounds(cases: Sequence[Case], rounds: int) -> list[dict[str, Any]]:
    """Each case once per round, in turn (every other round in the reverse order,
    so that no case always runs first); then, per case, the median of its
    per-round ratios to the bare library's rate in the same round.

    Returns one row per case, in order: ``direction``, ``name``, ``rate`` and
    ``cpu_us`` (medians over the rounds), ``ratio`` (the median per-round
    ratio) and ``ratios`` (each round's, in order).
    """
    runs: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(cases))}
    order = list(enumerate(cases))
    for round_ in range(rounds):
        for i, case in order if round_ % 2 == 0 else reversed(order):
            runs[i].append(case.once())
    rows: list[dict[str, Any]] = []
    for i, case in enumerate(cases):
        bare = next(j for j, c in enumerate(cases) if c.direction == case.direction)
        ratios = [mine[0] / theirs[0] for mine, theirs in zip(runs[i], runs[bare], strict=True)]
        rows.append(
            {
                "direction": case.direction,
                "name": case.name,
                "rate": statistics.median(rate for rate, _ in runs[i]),
                "cpu_us": statistics.median(cpu for _, cpu in runs[i]),
                "ratio": statistics.median(ratios),
                "ratios": ratios,
            }
        )
    return rows


def write_rows(path: str, bench: str, rows: list[dict[str, Any]]) -> None:
    """:func:`in_rounds` rows as a ``write_report`` file: series the client,
    label the direction, value the median msg/s (with ratio, ratios and cpu_us)."""
    report = [
        {
            "series": row["name"],
            "label": row["direction"],
            "value": round(row["rate"]),
            "ratio": round(row["ratio"], 3),
            "ratios": [round(ratio, 3) for ratio in row["ratios"]],
            "cpu_us": round(row["cpu_us"], 1),
        }
        for row in rows
    ]
    command = bench_command(sys.argv[0], sys.argv[1:])
    write_report(path, bench=bench, command=command, unit="msg/s", rows=report)


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


class _BulkEnvelope(Envelope):
    __slots__ = ("settle_key",)

    settle_key: BulkSource

    async def ack_all(self, envelopes: Sequence[Envelope]) -> None:
        acked = 0
        for envelope in envelopes:
            if envelope.state == "open":
                envelope.state = "acked"
                acked += 1
        source = self.settle_key
        source.acked += acked
        if source.first_ack is None:
            source.first_ack = time.perf_counter()


async def _refuse(_error: BaseException | None = None) -> None:
    raise SystemExit("a bench message was nacked")


class BulkSource:
    """COUNT messages of BODY, made when asked for, handed out and acked in bulk (a
    :class:`~bridges.BulkReceiver`: ``receive_some``, acks in runs through ``ack_all``),
    as the kafka, nats and stomp sources hand out theirs: what such a source costs a
    route, without its I/O.

    Attributes:
      made, acked: how many so far.
      first_ack: ``time.perf_counter()`` at the first run of acks (None before).
    """

    def __init__(self, count: int, body: bytes) -> None:
        self.count = count
        self.body = body
        self.made = 0
        self.acked = 0
        self.first_ack: float | None = None

    def describe(self) -> str:
        return "memory"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[BulkSource]:
        yield self

    async def _ack(self) -> None:
        self.acked += 1

    def make(self, most: int) -> list[Envelope]:
        """Up to MOST new envelopes; raises trio.EndOfChannel after the last."""
        first = self.made
        last = min(self.count, first + most)
        if first >= last:
            raise trio.EndOfChannel
        self.made = last
        body, ack = self.body, self._ack
        out: list[Envelope] = []
        for number in range(first, last):
            message = trusted_message(body, {}, f"m/{number}")
            envelope = _BulkEnvelope(message, ack=ack, nack=_refuse)
            envelope.settle_key = self
            out.append(envelope)
        return out

    async def receive_some(self, most: int) -> Sequence[Envelope]:
        return self.make(most)

    async def receive(self) -> Envelope:
        return self.make(1)[0]


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
