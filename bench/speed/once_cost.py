"""What skipping repeats costs: de-duplication on and off, in one run, for three targets.

    .venv/bin/python bench/speed/once_cost.py [--count 20000] [--size 100] [--batch 100]
        [--window 1000] [--rounds 3] [--senders 8] [--only broker,jsonl,redis]
        [--json PATH]

Each target is measured with its de-duplication at its default and off, the
two interleaved round after round (both see the same load): the best rate of
each, and the least CPU time per message of the process that does the work
(this one; for ``broker``, the broker's process). On a shared machine the
rates of the cells that wait for an fsync swing with the disk, while CPU
per message is the work itself: its ratio on / off is the cost (the target
is at most 1.1):

- ``session``: the broker's session alone, sans I/O (no sockets, no
  store): ``count`` SEND frames with a ``bridge-id`` each, every 100th with
  a receipt, fed to one :class:`~trio_stomp.broker._session.Session` in
  64 KiB chunks, with the duplicate window (10,000) and without: SENDs per
  CPU second (process time), the look-up and the record apart from any fsync;
- ``broker``: the embedded broker's send-with-receipt rate, as
  ``bench/speed/durable_store.py`` measures it (``--senders`` connections, each
  SEND with a receipt and a ``bridge-id`` of its own, 64 receipts
  outstanding per connection), ``trio-stomp broker`` in its own process,
  with a data dir (every RECEIPT after an fsync) and without one, each with
  ``--duplicate-window 10000`` (the default) and ``0``;
- ``jsonl``: a route from an in-memory source (``count`` messages of
  ``size`` bytes) to the ``file`` sink in JSON-lines mode, fsync on, batches
  of ``--batch``: ``dedup_window`` 10,000 (each batch's ids looked up and
  kept) and 0;
- ``redis``: the same route to the ``redis`` sink on a private
  ``redis-server`` (AOF, ``appendfsync always``): ``dedup_window`` 100,000
  (the idempotent append: one Lua script per batch) and 0 (a pipeline of
  XADDs).

``--json PATH`` writes the figures (``_base.write_report``: msg/s per
target, series "dedup on" / "dedup off").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from _common import (
    HOST,
    bench_command,
    environment_line,
    process_cpu,
    start_embedded_broker,
    stop_process,
    write_report,
)
from _endpoints import private_server, run_from_memory, timed
from durable_store import measure as send_with_receipt
from redis_throughput import publish_bridge, redis_command

from bridges import Context
from bridges.endpoints.file import FileSink, FileSinkConfig
from trio_stomp.broker._dedup import Duplicates
from trio_stomp.broker._destinations import Router
from trio_stomp.broker._session import Session

TARGETS = ("session", "broker", "jsonl", "redis")


class _Edge:
    """The session's I/O edge, doing nothing."""

    def wake(self) -> None:
        pass

    def abort(self) -> None:
        pass


#: One measurement: (msg/s, CPU us per message of the process that does the work).
Cell = tuple[float, float]


def session_rate(on: bool, args: Any) -> Cell:
    """SENDs through one sans-IO session: (SENDs per CPU second, CPU us per SEND)."""
    head = b"CONNECT\naccept-version:1.2\nhost:/\n\n\0"
    body = b"x" * args.size
    frames = [
        b"SEND\ndestination:/queue/cost\nbridge-id:m%d\n%scontent-length:%d\n\n%s\0"
        % (i, b"receipt:r\n" if i % 100 == 99 else b"", len(body), body)
        for i in range(args.count)
    ]
    data = b"".join(frames)
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    window = Duplicates(10_000, 600.0) if on else None
    session = Session(Router(), _Edge(), session_id="cost", duplicates=window)
    session.receive_data(head)
    session.take_output()
    started = time.process_time()  # (CPU: the figure is the work, whatever the load)
    for chunk in chunks:
        session.receive_data(chunk)
        session.take_output()
    cpu = time.process_time() - started
    return args.count / cpu, cpu / args.count * 1e6


def jsonl_sink(directory: Path, window: int, args: Any) -> FileSink:
    config = FileSinkConfig(path=str(directory), dedup_window=window)
    return FileSink(config, Context(route="bench", role="sink", in_flight=args.window))


def jsonl_write(window: int, args: Any) -> Cell:
    """The route to a fresh directory: msg/s, and this process's CPU per message."""
    with tempfile.TemporaryDirectory(prefix="once-cost-") as tmp:
        target = jsonl_sink(Path(tmp), window, args)
        route = {"in_flight": args.window, "batch_count": args.batch}
        return timed(
            lambda: trio.run(lambda: run_from_memory(target, args.count, args.size, **route)),
            args.count,
        )


def broker_rate(durable: bool, window: int, args: Any) -> Cell:
    """Send-with-receipt msg/s, and the broker process's CPU per message."""
    options = ("--duplicate-window", str(window))
    with tempfile.TemporaryDirectory(prefix="once-cost-broker-") as tmp:
        data_dir = Path(tmp) if durable else None
        proc, target = start_embedded_broker(data_dir, options=options)
        try:
            before = process_cpu(proc.pid) or 0.0
            rate = send_with_receipt(target, args.count, args.size, args.senders, 64, True)
            cpu = (process_cpu(proc.pid) or 0.0) - before  # (the drain after it included)
        finally:
            stop_process(proc)
    return rate, cpu / args.count * 1e6


def cells(args: Any, redis_url: str | None) -> dict[str, Callable[[bool], Cell]]:
    """label -> measure(dedup on?) -> (msg/s, CPU us/msg)."""
    found: dict[str, Callable[[bool], Cell]] = {}
    if "session" in args.only:
        found["broker session, sans I/O: SEND"] = lambda on: session_rate(on, args)
    if "broker" in args.only:
        found["embedded broker, data dir: send+receipt"] = lambda on: broker_rate(
            True, 10_000 if on else 0, args
        )
        found["embedded broker, in memory: send+receipt"] = lambda on: broker_rate(
            False, 10_000 if on else 0, args
        )
    if "jsonl" in args.only:
        found["file sink, JSON lines"] = lambda on: jsonl_write(10_000 if on else 0, args)
    if redis_url is not None:

        def redis(on: bool) -> Cell:
            stream = f"bench-{uuid.uuid4().hex[:8]}"
            return timed(
                lambda: trio.run(publish_bridge, redis_url, stream, args.count, args.size, on),
                args.count,
            )

        found["redis sink"] = redis
    return found


def measure(args: Any, redis_url: str | None) -> list[dict[str, Any]]:
    """Rows: the best rate and the least CPU per message of each cell, on and off."""
    rate: dict[tuple[str, bool], float] = {}
    cpu: dict[tuple[str, bool], float] = {}
    measured = cells(args, redis_url)
    for round_ in range(args.rounds):  # interleaved: both see the same load
        for label, run in measured.items():
            for on in (True, False) if round_ % 2 == 0 else (False, True):
                got, used = run(on)
                rate[label, on] = max(got, rate.get((label, on), 0.0))
                cpu[label, on] = min(used, cpu.get((label, on), float("inf")))
    rows: list[dict[str, Any]] = []
    for label in measured:
        for on in (True, False):
            rows.append(
                {
                    "series": "dedup on" if on else "dedup off",
                    "label": label,
                    "value": round(rate[label, on]),
                    "cpu_us": round(cpu[label, on], 2),
                    "rate_on_off": round(rate[label, True] / rate[label, False], 3),
                    "cpu_on_off": round(cpu[label, True] / cpu[label, False], 3),
                }
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--window", type=int, default=1000, help="the routes' in_flight")
    parser.add_argument("--senders", type=int, default=8, help="broker: connections")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(TARGETS))
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    args = parser.parse_args()
    args.only = [name for name in args.only.split(",") if name]
    print(environment_line(), flush=True)
    if "redis" in args.only:
        with private_server(redis_command("always"), "redis-server") as port:
            rows = measure(args, f"redis://{HOST}:{port}/0")
    else:
        rows = measure(args, None)
    print(
        f"{args.count} messages of {args.size} B per cell; best of {args.rounds} interleaved "
        f"rounds; routes: batch {args.batch}, in_flight {args.window}; broker: "
        f"{args.senders} senders, 64 receipts outstanding each"
    )
    print(
        "| target | dedup on: msg/s, CPU us/msg | dedup off: msg/s, CPU us/msg "
        "| rate on/off | CPU on/off |"
    )
    print("|---|---:|---:|---:|---:|")
    for on, off in zip(rows[::2], rows[1::2], strict=True):
        print(
            f"| {on['label']} | {on['value']:,}, {on['cpu_us']:.1f} "
            f"| {off['value']:,}, {off['cpu_us']:.1f} "
            f"| {on['rate_on_off']:.2f} | {on['cpu_on_off']:.2f} |"
        )
    if args.json:
        write_report(
            args.json,
            bench="once_cost",
            command=bench_command(__file__, sys.argv[1:]),
            unit="msg/s",
            rows=rows,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
