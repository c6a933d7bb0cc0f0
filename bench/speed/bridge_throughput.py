"""Bridge throughput: a STOMP -> file route against the raw client-individual receive limit.

    .venv/bin/python bench/speed/bridge_throughput.py [--count 50000] [--size 100]
        [--brokers rabbitmq] [--rounds 3] [--windows 1000,4000] [--batch-times 0]
        [--profile DIR]

For each broker (RabbitMQ by default; ``embedded`` runs ``trio-stomp broker``
in its own process, ``activemq`` works too), measured in the same run, each
in a fresh interpreter, each on a fresh queue pre-filled (untimed) with
``count`` messages of ``size`` bytes:

- raw limit: a raw socket SUBSCRIBEs with ``ack: client-individual`` and
  ``prefetch-count: 1000`` and ACKs every message from pre-formatted frames,
  no client logic (``bench/speed/_common.py``). The clock runs from SUBSCRIBE to
  the last message.
- bridge, for each ``--windows`` W: a :class:`bridges.Route` with a ``stomp``
  source (client-individual, prefetch W, in-flight window W) and a ``file``
  sink (JSON lines; each batch of up to W/2 messages, at most 1000, fsynced
  before its envelopes are acked; group commit, or ``--batch-times`` T, a cell
  for each): at-least-once, as ``bridges run`` does
  it. The clock runs from the start of the route until the last envelope
  was acked; the route then stops gracefully (DISCONNECT receipt: every ACK
  reached the broker) and the JSON-lines output must hold ``count`` lines.
  As in ``bridges run`` (``bridges.service.freeze_heap``), the heap built
  before the route starts is frozen (``gc.freeze``), out of the way of the
  garbage collector, and young objects are collected less often.

The bridge holds each message until its batch is fsynced, so it needs a
larger window than a consumer that acks on arrival to keep the broker busy;
the window is also the bound on duplicates after a crash.

Target: the bridge at >= 80% of the raw limit's rate. Brokers share the
machine's cores with the client (and with whatever else runs), so absolute
numbers move between runs. ``--rounds N`` runs every cell N times,
interleaved: the table gives each cell's best rate, the ratio of the bests,
and the median of the per-round ratios (each bridge run against the raw run
of its own round), which load that drifts during the run disturbs least.

``--metrics`` adds, for each window, the same bridge with the service's
metrics on (``[bridge] http``'s :class:`RouteMetrics`: histograms fed per
batch, the health task ticking, ``/metrics`` rendered once a second, more
often than Prometheus scrapes), and prints their cost: 1 - the median of the
per-round rate ratios metrics-on / metrics-off (target: <= 5%).

``--profile DIR`` runs the bridge cells under cProfile and writes one
``.prof`` per cell and round there (the table is then not for quoting).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from _common import (
    EMBEDDED,
    TARGETS,
    BenchError,
    Meter,
    RawClient,
    Result,
    Target,
    body_of,
    check_raw_count,
    check_target,
    child_main,
    drain_rest,
    embedded_broker,
    environment_line,
    fmt_rate,
    listening_pid,
    parse_brokers,
    prefill,
    process_cpu,
    run_child,
    run_trio_cell,
    unique_queue,
)

TARGET_RATIO: Final = 0.80


def run_raw(spec: dict[str, Any], meter: Meter) -> None:
    target = Target(**spec["target"])
    count = spec["count"]
    client = RawClient(target, timeout=spec["timeout"])
    meter.start()
    client.subscribe(spec["destination"], "client-individual")
    got = client.consume(count, ack=True)
    meter.stop(count)
    check_raw_count(got, count)
    client.disconnect()


def run_bridge(spec: dict[str, Any], meter: Meter) -> None:
    import trio

    from bridges import Context, Route
    from bridges.endpoints.file import FileSink, FileSinkConfig
    from bridges.endpoints.stomp import StompSource, StompSourceConfig
    from bridges.service import freeze_heap

    target = Target(**spec["target"])
    count = spec["count"]
    out = Path(spec["out"])
    context = Context(route="bench", role="source", base_dir=out)
    source = StompSource(
        StompSourceConfig(
            url=target.url,
            destination=spec["destination"],
            prefetch=spec["window"],
            heartbeat=(0, 0),
        ),
        context,
    )
    sink = FileSink(FileSinkConfig(path="."), context)
    route = Route(
        "bench",
        source,
        sink,
        in_flight=spec["window"],
        batch_count=min(spec["window"] // 2, 1000),
        batch_time=spec["batch_time"],
    )

    freeze_heap()  # as bridges run does before its routes start

    async def main() -> None:
        with trio.fail_after(spec["timeout"]):
            async with trio.open_nursery() as nursery:
                if spec.get("metrics"):  # (set up, imports included, before the clock starts)
                    await nursery.start(scrape_metrics, route)
                meter.start()
                nursery.start_soon(route.run)
                # Poll, often only near the end (a wake-up costs the bridge's
                # process CPU). Below 100,000 msg/s a sleep never outlasts what
                # is left; the last polls are 2 ms apart.
                while (left := count - route.stats.written) > 0:  # noqa: ASYNC110 - a counter
                    await trio.sleep(min(0.05, max(0.002, left / 100_000)))
                meter.stop(route.stats.written)
                route.stop()

    run_trio_cell(main, spec["timeout"])
    lines = sum(p.read_bytes().count(b"\n") for p in out.glob("messages-*.jsonl*"))
    if lines != count or route.stats.restarts or route.stats.retries:
        raise BenchError(
            f"{lines} lines written for {count} messages "
            f"({route.stats.restarts} restarts, {route.stats.retries} retries)"
        )


async def scrape_metrics(route: Any, task_status: Any) -> None:
    """What ``[bridge] http`` adds to a route: its metrics hooked, health ticking, scrapes."""
    import trio
    from prometheus_client import generate_latest

    from bridges.service._health import Health
    from bridges.service._metrics import RouteMetrics
    from bridges.service._notify import Notifier
    from bridges.service._service import Service

    service = Service(Notifier({}), Health([route], stall_timeout=60))
    metrics = RouteMetrics(service)
    generate_latest(metrics.registry)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.health.run)
        task_status.started()
        while True:
            await trio.sleep(1.0)
            generate_latest(metrics.registry)
            if route.finished.is_set():
                nursery.cancel_scope.cancel()


CHILDREN: Final = {"raw": run_raw, "bridge": run_bridge}
RAW: Final = "raw socket, client-individual, prefetch 1000"

#: broker, consumer, its best result, the broker's best raw result, per-round ratios to raw
Row = tuple[str, str, Result | str, Result | str, list[float]]
#: Broker CPU seconds per 10k messages, by id() of the Result it was measured with.
BROKER_CPU: dict[int, float] = {}


def measure(
    target: Target,
    which: str,
    window: int,
    args: argparse.Namespace,
    round_: int = 0,
    metrics: bool = False,
    batch_time: float = 0.0,
) -> Result | str:
    destination = unique_queue("bridge", which)
    timeout = max(60.0, args.count / 500)
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as out:
        spec = {
            "which": which,
            "target": target.__dict__,
            "destination": destination,
            "count": args.count,
            "window": window,
            "out": out,
            "timeout": timeout,
            "metrics": metrics,
            "batch_time": batch_time,
        }
        if args.profile and which == "bridge":
            name = f"bridge-{target.name}-w{window}-r{round_}.prof"
            spec["profile"] = str(Path(args.profile) / name)
        try:
            prefill(target, destination, body_of(args.size), args.count, timeout)
            pid = listening_pid(target.port)
            before = process_cpu(pid)
            result = run_child(__file__, spec, timeout + 30)
            after = process_cpu(pid)
            if before is not None and after is not None:
                BROKER_CPU[id(result)] = (after - before) / args.count * 10_000
            return result
        except (BenchError, OSError) as exc:
            drain_rest(target, destination)
            return f"failed: {exc}"


def best(results: list[Result | str]) -> Result | str:
    good = [r for r in results if isinstance(r, Result)]
    return max(good, key=lambda r: r.rate) if good else results[-1]


def run_target(label: str, target: Target, args: argparse.Namespace) -> list[Row]:
    first = args.batch_times[0]
    cells = [("raw", 1000, RAW, first)] + [
        ("bridge", w, bridge_cell(w, t, args), t) for w in args.windows for t in args.batch_times
    ]
    if args.metrics:
        cells += [("bridge", w, f"bridge + metrics, window {w}", first) for w in args.windows]
    results: dict[str, list[Result | str]] = {}
    for round_ in range(args.rounds):
        # Odd rounds take the bridge cells in reverse order: no cell always runs first.
        order = cells if round_ % 2 == 0 else [cells[0], *reversed(cells[1:])]
        for which, window, what, batch_time in order:
            metrics = "metrics" in what
            result = measure(target, which, window, args, round_, metrics, batch_time)
            results.setdefault(what, []).append(result)
    if args.metrics:
        METRICS_COST.extend(metrics_cost(label, results, args))
    raw = best(results[RAW])
    rows = []
    for _, _, what, _ in cells:
        ratios = [
            mine.rate / theirs.rate
            for mine, theirs in zip(results[what], results[RAW], strict=True)
            if isinstance(mine, Result) and isinstance(theirs, Result)
        ]
        rows.append((label, what, best(results[what]), raw, ratios))
    return rows


def bridge_cell(window: int, batch_time: float, args: argparse.Namespace) -> str:
    name = f"bridge, window/prefetch {window}, batch {min(window // 2, 1000)}"
    return name if len(args.batch_times) == 1 else f"{name}, time {batch_time:g}"


#: Lines on what metrics cost, one per broker and window.
METRICS_COST: list[str] = []


def metrics_cost(
    label: str, results: dict[str, list[Result | str]], args: argparse.Namespace
) -> list[str]:
    lines = []
    for w in args.windows:
        off = results[bridge_cell(w, args.batch_times[0], args)]
        on = results[f"bridge + metrics, window {w}"]
        ratios = [
            a.rate / b.rate
            for a, b in zip(on, off, strict=True)
            if isinstance(a, Result) and isinstance(b, Result)
        ]
        if not ratios:
            continue
        each = ", ".join(f"{r:.1%}" for r in ratios)
        cost = 1 - statistics.median(ratios)
        verdict = "met" if cost <= 0.05 else "NOT met"
        cpu = [
            a.cpu_per_10k / b.cpu_per_10k - 1
            for a, b in zip(on, off, strict=True)
            if isinstance(a, Result) and isinstance(b, Result) and b.cpu_per_10k
        ]
        lines.append(
            f"{label} window {w}: rate on/off per round {each}; cost {cost:.1%} "
            f"(target <= 5%: {verdict}); CPU per message {statistics.median(cpu):+.1%} "
            "(median per round)"
        )
    return lines


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| broker   | consumer                                     |  msg/s | best/best "
        "| per round (median) | consumer CPU s/10k | broker CPU s/10k |",
        "|----------|----------------------------------------------|--------|-----------"
        "|--------------------|--------------------|------------------|",
    ]
    for label, what, result, raw, ratios in rows:
        rate = result.rate if isinstance(result, Result) else None
        raw_rate = raw.rate if isinstance(raw, Result) else None
        ratio = "-" if rate is None or raw_rate is None else f"{rate / raw_rate:.0%}"
        median = f"{statistics.median(ratios):.0%}" if ratios else "-"
        cpu = f"{result.cpu_per_10k:.2f}" if isinstance(result, Result) else "-"
        broker = BROKER_CPU.get(id(result))
        broker_cpu = "-" if broker is None else f"{broker:.2f}"
        lines.append(
            f"| {label:<8} | {what:<44} | {fmt_rate(rate):>6} | {ratio:>9} | {median:>18} "
            f"| {cpu:>18} | {broker_cpu:>16} |"
        )
        if isinstance(result, str):
            lines.append(f"  {label} {what}: {result}")
    return lines


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        spec = json.loads(sys.argv[2])
        child_main(CHILDREN[spec["which"]], spec)
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--brokers", type=parse_brokers, default=["rabbitmq"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--windows",
        type=lambda text: [int(w) for w in text.split(",")],
        default=[1000, 4000],
        help="bridge in-flight windows (= prefetch) to measure",
    )
    parser.add_argument(
        "--batch-times",
        type=lambda text: [float(t) for t in text.split(",")],
        default=[0.0],
        help="the bridge's batch.time, each a cell of its own (default 0: group commit)",
    )
    parser.add_argument("--profile", metavar="DIR", help="cProfile the bridge cells into DIR")
    parser.add_argument(
        "--metrics", action="store_true", help="also measure each window with metrics on"
    )
    args = parser.parse_args()
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    print(environment_line())
    print(
        f"{args.count:,} messages of {args.size} bytes, best of {args.rounds} interleaved "
        "rounds; bridge: stomp source -> file sink (JSON lines, fsync per batch)"
    )
    rows: list[Row] = []
    for name in args.brokers:
        if name == EMBEDDED:
            with embedded_broker() as target:
                rows.extend(run_target("embedded", target, args))
            continue
        target = TARGETS[name]
        reason = check_target(target)
        if reason is not None:
            rows.append((target.label, RAW, f"skipped: {reason}", "skipped", []))
            continue
        rows.extend(run_target(target.label, target, args))
    print()
    for line in table(rows):
        print(line)
    for label, what, _, _, ratios in rows:
        if what != RAW and ratios:
            each = ", ".join(f"{r:.0%}" for r in ratios)
            print(f"{label} {what}: per-round ratios {each}")
    medians = [statistics.median(r) for _, what, _, _, r in rows if what != RAW and r]
    verdict = "met" if medians and max(medians) >= TARGET_RATIO else "NOT met"
    print(
        f"\ntarget: bridge >= {TARGET_RATIO:.0%} of the raw limit (median per-round ratio, "
        f"best window): {verdict}"
    )
    for line in METRICS_COST:
        print(line)
    if args.profile:
        print("(profiled: not for quoting)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
