"""What ``[bridge] http``'s metrics cost a route: the same route with them off and on, one run.

    .venv/bin/python bench/speed/service_overhead.py [--count 200000] [--rounds 9]
        [--sink count|file]

Each round runs a route twice, metrics off and metrics on, in an order that
alternates from round to round, each on fresh objects in this process:

- the route: a :class:`ListSource` (messages made on demand) -> the sink,
  as ``bridges run`` builds it (the sink wrapped for trace context), in-flight
  window 1000, batches of up to 500 (``batch_time`` 5 ms);
- ``--sink count`` (default) only counts: the route's own cost, so metrics
  weigh the most they can; ``--sink file`` writes JSON lines, fsynced per
  batch, as a real route would;
- metrics on: what ``[bridge] http`` adds, less the socket: the
  :class:`RouteMetrics` histograms fed per batch, the health task ticking
  every 0.25 s, and ``/metrics`` rendered every second (Prometheus scrapes
  every 15 s or more).

It prints messages/s and CPU µs per message of each run, and the cost: the
median over rounds of (CPU per message on / off - 1), and the same for the
rate. Target: <= 5%. Rates and CPU both move with what else runs on the
machine; the interleaved rounds and the per-round ratios keep the
comparison fair.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import trio
from _common import environment_line
from _endpoints import CountingSink, ListSource
from prometheus_client import generate_latest

from bridges import Context, Message, Route, Sink
from bridges._trace import traced
from bridges.endpoints.file import FileSink, FileSinkConfig
from bridges.service._health import Health
from bridges.service._metrics import RouteMetrics
from bridges.service._notify import Notifier
from bridges.service._service import Service

TARGET: Final = 0.05


async def scrape(route: Route, task_status: trio.TaskStatus[None]) -> None:
    service = Service(Notifier({}), Health([route], stall_timeout=60))
    metrics = RouteMetrics(service)
    generate_latest(metrics.registry)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.health.run)
        task_status.started()
        while not route.finished.is_set():
            await trio.sleep(1.0)
            generate_latest(metrics.registry)
        nursery.cancel_scope.cancel()


def make_sink(kind: str, out: Path, count: int) -> Sink:
    if kind == "file":
        return FileSink(FileSinkConfig(path=str(out)), Context(route="bench", base_dir=out))
    return CountingSink(count)


def one_run(count: int, metrics: bool, kind: str) -> tuple[float, float]:
    """(messages/s, CPU µs per message) of one route run."""
    with tempfile.TemporaryDirectory(prefix="service-overhead-") as out:
        body = b"x" * 100
        source = ListSource(Message(body, {"k": "v"}, f"m{i}") for i in range(count))
        route = Route(
            "bench",
            source,
            traced(make_sink(kind, Path(out), count)),
            in_flight=1000,
            batch_count=500,
            batch_time=0.005,
        )
        result: list[float] = []

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                if metrics:
                    await nursery.start(scrape, route)
                wall, cpu = time.perf_counter(), time.process_time()
                await route.run()
                result.extend((time.perf_counter() - wall, time.process_time() - cpu))

        gc.collect()
        trio.run(main)
        if source.acked != count:
            raise SystemExit(f"{source.acked} of {count} acked")
    wall, cpu = result
    return count / wall, cpu / count * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--sink", choices=("count", "file"), default="count")
    args = parser.parse_args()
    print(environment_line())
    print(
        f"{args.count:,} messages of 100 bytes per run, list source -> {args.sink} sink, "
        f"{args.rounds} rounds, metrics off and on alternating"
    )
    one_run(min(args.count, 20_000), True, args.sink)  # warm up (imports, caches)
    rates: list[float] = []
    cpus: list[float] = []
    print("\n| round | off msg/s | on msg/s | off CPU µs/msg | on CPU µs/msg |")
    print("|------:|----------:|---------:|---------------:|--------------:|")
    for round_ in range(args.rounds):
        order = (False, True) if round_ % 2 == 0 else (True, False)
        runs = {metrics: one_run(args.count, metrics, args.sink) for metrics in order}
        (off_rate, off_cpu), (on_rate, on_cpu) = runs[False], runs[True]
        rates.append(1 - on_rate / off_rate)
        cpus.append(on_cpu / off_cpu - 1)
        print(
            f"| {round_ + 1:>5} | {off_rate:>9,.0f} | {on_rate:>8,.0f} "
            f"| {off_cpu:>14.2f} | {on_cpu:>13.2f} |"
        )
    cpu_cost, rate_cost = statistics.median(cpus), statistics.median(rates)
    verdict = "met" if max(cpu_cost, rate_cost) <= TARGET else "NOT met"
    print(
        f"\nmetrics cost (median of per-round ratios; negative: none measurable): "
        f"CPU per message {cpu_cost:+.1%}, rate {rate_cost:+.1%}; target <= {TARGET:.0%}: "
        f"{verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
