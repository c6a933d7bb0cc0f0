"""The engine's own cost per message: an in-memory source into a counting sink, no socket.

A :class:`bridges.Route` at the shipped defaults (``in_flight = 1000``,
``batch.count = 100``, group commit) from a source that has every message
ready to a sink that only counts: what is left is what the engine spends
per message (taking, gathering, writing, settling), plus building each
message and envelope, which any source pays. Shapes:

- ``bulk``: a :class:`~bridges.BulkReceiver` whose envelopes share a
  ``settle_key`` (acked in runs by ``ack_all``), as the kafka, nats and
  stomp sources are;
- ``single``: one envelope per ``receive()``, each acked alone, as a
  file's are;
- ``push``: as ``single``, with a pass through the scheduler in each
  ``receive()``, as a webhook's (a memory channel) is;
- ``bare``, ``bare-single`` and ``bare-push``: the envelopes of the
  ``bulk``, ``single`` and ``push`` sources received and acked in a plain
  loop, no engine: the floor under each. A shape's CPU µs less its floor's
  (the ``engine`` column) is what the engine spends per message.

The table gives, per shape, CPU µs per message (the best round: on a
shared machine the minimum is the cost, the rest is noise; and the
median), and Python-level calls per message, counted by cProfile in one
more run of 20,000 (every call and every resumption of a coroutine, Trio's
scheduler included): a count that a busy machine does not change. The
``engine`` columns are a shape's figure less its floor's.

Each measurement runs in a fresh interpreter. With ``--against TREE`` the
same shapes also run with another checkout's ``bridges`` (its folder put
first on ``PYTHONPATH``), interleaved round by round, and the table gives
the median of per-round ratios of CPU per message (this tree's over the
other's: on a shared machine the wall clock measures the share the process
got more than what it spent)::

    .venv/bin/python bench/speed/engine.py --rounds 5
    git worktree add --detach /tmp/wt_enginebase main
    .venv/bin/python bench/speed/engine.py --rounds 5 --against /tmp/wt_enginebase
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import trio
from _common import bench_command, environment_line, write_report
from _endpoints import BulkSource

from bridges import Envelope, Message, Route
from bridges._message import trusted_message

SHAPES: Final = ("bulk", "bare", "single", "bare-single", "push", "bare-push")
#: The floor under each shape: its source's envelopes made and acked with no route.
#: Messages of the one run per shape that counts calls (cProfile slows it down).
CALLS_COUNT: Final = 20_000
FLOORS: Final = {"bulk": "bare", "single": "bare-single", "push": "bare-push"}
HERE: Final = Path(__file__).resolve()
ROOT: Final = HERE.parents[2]


# -- the child: one measurement -------------------------------------------------------------


async def _refuse(error: BaseException | None) -> None:
    raise SystemExit(f"a message was nacked: {error!r}")


class _Source:
    """``count`` messages of ``body``, made when asked for (not a list of live objects)."""

    def __init__(self, count: int, body: bytes) -> None:
        self.count = count
        self.body = body
        self.made = 0
        self.acked = 0

    def describe(self) -> str:
        return "memory"

    async def _ack(self) -> None:
        self.acked += 1


class _SingleSource(_Source):
    """A plain :class:`~bridges.Receiver`: one at a time, each acked alone."""

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_SingleSource]:
        yield self

    async def receive(self) -> Envelope:
        if self.made >= self.count:
            raise trio.EndOfChannel
        self.made += 1
        message = trusted_message(self.body, {}, f"m/{self.made}")
        return Envelope(message, ack=self._ack, nack=_refuse)


class _PushSource(_SingleSource):
    """As :class:`_SingleSource`, but each ``receive()`` passes through the scheduler, as
    a receive from a memory channel does (a webhook's source hands requests over so)."""

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_PushSource]:
        yield self

    async def receive(self) -> Envelope:
        await trio.lowlevel.checkpoint()
        return await super().receive()


class _CountingSink:
    def __init__(self) -> None:
        self.count = 0

    def describe(self) -> str:
        return "count"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_CountingSink]:
        yield self

    async def write(self, batch: Sequence[Message]) -> None:
        self.count += len(batch)
        await trio.lowlevel.checkpoint()


async def _run(shape: str, count: int, body: bytes) -> int:
    if shape == "bare":  # the bulk source's envelopes, made and acked with no route
        bare = BulkSource(count, body)
        while bare.made < count:
            envelopes = bare.make(1000)
            await envelopes[0].ack_all(envelopes)
            await trio.lowlevel.checkpoint()
        return bare.acked
    if shape in ("bare-single", "bare-push"):  # received and acked with no route
        single = _SingleSource(count, body) if shape == "bare-single" else _PushSource(count, body)
        while single.made < count:
            await (await single.receive()).ack()
            if single.made % 64 == 0:
                await trio.lowlevel.checkpoint()
        return single.acked
    source: _SingleSource | BulkSource
    if shape == "bulk":
        source = BulkSource(count, body)
    else:
        source = _PushSource(count, body) if shape == "push" else _SingleSource(count, body)
    await Route("bench", source, _CountingSink()).run()
    return source.acked


def measure(shape: str, count: int, size: int) -> dict[str, float]:
    """Run ``shape`` once with ``count`` messages of ``size`` bytes: wall and CPU s."""
    wall, cpu = time.perf_counter(), time.process_time()
    acked = trio.run(_run, shape, count, b"x" * size)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if acked != count:
        raise SystemExit(f"{shape}: {acked} of {count} acked")
    return {"wall": wall, "cpu": cpu}


def count_calls(shape: str, count: int, size: int) -> dict[str, float]:
    """Python-level calls per message of ``shape`` (cProfile's count: every call and
    every resumption of a coroutine, Trio's scheduler included): the same on a busy
    machine as on a quiet one."""
    profile = cProfile.Profile()
    profile.runcall(measure, shape, count, size)
    return {"calls": pstats.Stats(profile).total_calls / count}  # type: ignore[attr-defined]


# -- the parent: rounds, trees, the table -----------------------------------------------------


def run_child(
    tree: Path, shape: str, count: int, size: int, calls: bool = False
) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, str(HERE), "--child", shape, "--count", str(count), "--size", str(size)]
    argv += ["--calls"] if calls else []
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{shape} with {tree}: {done.stderr.strip() or done.returncode}")
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200_000, help="messages per run")
    parser.add_argument("--size", type=int, default=100, help="body bytes")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES)
    )
    parser.add_argument("--against", type=Path, help="another checkout to measure side by side")
    parser.add_argument("--json", help="write the report here (bench/_base.write_report)")
    parser.add_argument("--child", choices=SHAPES, help=argparse.SUPPRESS)
    parser.add_argument("--calls", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        how = count_calls if args.calls else measure
        print(json.dumps(how(args.child, args.count, args.size)))
        return
    shapes = [shape.strip() for shape in args.shapes.split(",") if shape.strip()]
    if unknown := set(shapes) - set(SHAPES):
        parser.error(f"unknown shape(s): {', '.join(sorted(unknown))}")
    trees = {"this": ROOT}
    if args.against is not None:
        if not (args.against / "bridges" / "_engine.py").is_file():
            parser.error(f"--against {args.against}: no bridges/_engine.py there")
        trees["other"] = args.against.resolve()
    print(environment_line())
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.count:,} x {args.size} B")
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    order = [(tree, shape) for shape in shapes for tree in trees]
    for round_ in range(args.rounds):
        for tree, shape in order if round_ % 2 == 0 else reversed(order):
            runs.setdefault((tree, shape), []).append(
                run_child(trees[tree], shape, args.count, args.size)
            )
    calls = {
        (tree, shape): run_child(trees[tree], shape, CALLS_COUNT, args.size, calls=True)["calls"]
        for tree, shape in order
    }
    rows = table(runs, calls, shapes, list(trees), args.count)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    if args.json:
        write_report(
            args.json,
            bench="engine",
            command=bench_command(sys.argv[0], sys.argv[1:]),
            unit="CPU us/msg",
            rows=rows,
        )


def table(
    runs: dict[tuple[str, str], list[dict[str, float]]],
    calls: dict[tuple[str, str], float],
    shapes: list[str],
    trees: list[str],
    count: int,
) -> list[dict[str, Any]]:
    """Print the table; return its rows for the report. CPU µs per message: the best
    round (on a shared machine the minimum is the cost, the rest is noise) and the
    median; the engine's share: the shape's less its floor's (:data:`FLOORS`)."""

    def best(tree: str, shape: str) -> float:
        return min(run["cpu"] for run in runs[(tree, shape)]) / count * 1e6

    print(
        f"{'shape':11} {'tree':5} {'msg/s':>9} {'CPU µs':>6} {'median':>6} {'engine':>6} "
        f"{'calls':>6} {'engine':>6}" + ("  CPU this/other, per round" if len(trees) > 1 else "")
    )
    rows: list[dict[str, Any]] = []
    for shape in shapes:
        for tree in trees:
            got = runs[(tree, shape)]
            wall = statistics.median(run["wall"] for run in got) / count * 1e6
            row: dict[str, Any] = {
                "series": tree,
                "label": shape,
                "value": round(best(tree, shape), 3),
                "cpu_us_median": round(
                    statistics.median(run["cpu"] for run in got) / count * 1e6, 3
                ),
                "cpu_us_rounds": [round(run["cpu"] / count * 1e6, 3) for run in got],
                "rate": round(1e6 / wall),
                "calls": round(calls[(tree, shape)], 2),
            }
            floor = FLOORS.get(shape)
            engine = engine_calls = ""
            if floor in shapes:
                row["engine_cpu_us"] = round(best(tree, shape) - best(tree, floor), 3)
                row["engine_calls"] = round(calls[(tree, shape)] - calls[(tree, floor)], 2)
                engine, engine_calls = f"{row['engine_cpu_us']:6.2f}", f"{row['engine_calls']:6.2f}"
            line = (
                f"{shape:11} {tree:5} {row['rate']:9,} {row['value']:6.2f} "
                f"{row['cpu_us_median']:6.2f} {engine:>6} {row['calls']:6.2f} {engine_calls:>6}"
            )
            if tree == "this" and len(trees) > 1:
                theirs = runs[("other", shape)]
                ratios = [a["cpu"] / b["cpu"] for a, b in zip(got, theirs, strict=True)]
                row["ratio"] = round(statistics.median(ratios), 3)
                row["ratios"] = [round(ratio, 3) for ratio in ratios]
                line += f"  {row['ratio']:.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})"
            rows.append(row)
            print(line)
    return rows


if __name__ == "__main__":
    main()
