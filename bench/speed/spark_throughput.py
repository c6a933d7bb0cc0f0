"""Throughput: one route config on the local engine (one process) and on Spark (local[2]).

    .venv/bin/python bench/speed/spark_throughput.py [--count 100000] [--cpu-count 20000] [--json]

The route is the same config for both engines but its sink: a queue of the
embedded broker (its own process) -> the ``stomp`` source -> (transforms)
-> the data lake, which is JSON-lines files (the ``file`` sink, fsync per
batch) for ``bridges run --engine local`` and Parquet (``type = "spark"``,
Spark's file sink) for the Spark engine, whose queries run in this process
through :func:`bridges.spark.start_routes` (what ``bridges run --engine
spark`` calls). Two cases:

- plain: no transform (``--count`` messages of 100 bytes);
- cpu: a Python transform that burns ~200 us of CPU per message
  (``--cpu-count`` messages): the work Spark spreads over its cores.

Spark's rate is given twice: over all batches, and "steady", without the
first batch (which also starts the executors' Python workers and imports
bridges there).

The queue is filled before each run. Rate = messages / (time from the first
output to the last), so start-up (the JVM, Python workers) is left out and
reported apart. Batch latency: the median and the longest micro-batch
(``triggerExecution``) of the Spark runs that held rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import trio
from _common import committed_files, environment_line, start_embedded_broker, stop_process

import bridges
import trio_stomp

HERE = Path(__file__).resolve().parent
BURN_SECONDS = 200e-6


def burn(message: bridges.Message) -> bridges.Message:
    """The cpu case's transform: ~200 us of pure Python per message."""
    end = time.perf_counter() + BURN_SECONDS
    spins = 0
    while time.perf_counter() < end:
        spins += 1
    return bridges.Message(message.body, {**message.headers, "spins": str(spins)}, message.id)


def fill(url: str, queue: str, count: int) -> None:
    body = b"x" * 100

    async def main() -> None:
        async with trio_stomp.connect(url) as client:
            for n in range(count):
                await client.send(queue, body, receipt=n == count - 1)

    trio.run(main)


def write_config(
    work: Path, url: str, queue: str, engine: str, cpu: bool, window: int = 10_000
) -> Path:
    sink = (
        '{ type = "file", path = "out", format = "jsonl" }'
        if engine == "local"
        else '{ type = "spark", format = "parquet", path = "out" }'
    )
    text = f"""
[bridge]
engine = "{engine}"

[spark]
master = "local[2]"
checkpoint = "ckpt"
trigger = "100 ms"
spark.ui.enabled = false

[routes.bench]
in_flight = {window}
batch = {{ count = 1000, time = 0.02 }}
source = {{ type = "stomp", url = "{url}", destination = "{queue}" }}
sink = {sink}
"""
    if cpu:
        text += (
            '\n[[routes.bench.transforms]]\ntype = "python"\ncallable = "spark_throughput:burn"\n'
        )
    config = work / "route.toml"
    config.write_text(text)
    return config


def wait_rate(count_rows: Callable[[], int], total: int, timeout: float) -> tuple[float, float]:
    """Poll until ``total`` rows; return (seconds to the first row, first->last rows/s)."""
    started = time.monotonic()
    first: tuple[float, int] | None = None
    while True:
        rows = count_rows()
        now = time.monotonic()
        if rows and first is None:
            first = (now, rows)
        if rows >= total:
            break
        if now - started > timeout:
            raise RuntimeError(f"only {rows} of {total} rows after {timeout} s")
        time.sleep(0.05)
    assert first is not None
    window = max(now - first[0], 1e-3)
    return first[0] - started, (total - first[1]) / window


def jsonl_rows(directory: Path) -> int:
    if not directory.exists():
        return 0
    return sum(f.read_bytes().count(b"\n") for f in directory.iterdir() if f.is_file())


def run_local(url: str, count: int, cpu: bool, window: int, timeout: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="spark-bench-local-"))
    queue = f"/queue/bench-local-{int(time.time() * 1000)}"
    try:
        fill(url, queue, count)
        config = write_config(work, url, queue, "local", cpu, window)
        script = Path(sys.executable).with_name("bridges")
        process = subprocess.Popen(
            [str(script), "run", str(config)], cwd=work, stderr=subprocess.DEVNULL
        )
        try:
            startup, rate = wait_rate(lambda: jsonl_rows(work / "out"), count, timeout)
        finally:
            process.terminate()
            process.wait(30)
        return {"startup_s": round(startup, 1), "msgs_per_s": round(rate)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_spark(
    spark: Any, url: str, count: int, cpu: bool, window: int, timeout: float
) -> dict[str, Any]:
    from bridges.spark import start_routes

    work = Path(tempfile.mkdtemp(prefix="spark-bench-spark-"))
    queue = f"/queue/bench-spark-{int(time.time() * 1000)}"
    try:
        fill(url, queue, count)
        config_path = write_config(work, url, queue, "spark", cpu, window)
        config = bridges.load_config(config_path, bridges.default_registry(), base_dir=work)
        queries = start_routes(spark, config, str(config_path))
        try:
            startup, _ = wait_rate(
                lambda: parquet_rows(committed_files(work / "out")), count, timeout
            )
            progress = list(queries[0].recentProgress)
        finally:
            for query in queries:
                query.stop()
        full = [p for p in progress if p["numInputRows"] > 0]
        if not full:  # (Spark keeps the last few progress reports: a run too short has none)
            raise SystemExit(f"spark_throughput: no progress report with rows for {count} messages")
        starts = [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")) for p in full]
        latency = [p["durationMs"]["triggerExecution"] / 1000 for p in full]

        def rate(first: int) -> float:
            window = (starts[-1] - starts[first]).total_seconds() + float(latency[-1])
            rows: int = sum(p["numInputRows"] for p in full[first:])
            return rows / window

        return {
            "startup_s": round(startup, 1),
            "msgs_per_s": round(rate(0)),
            # Without the first batch, which also starts the executors' Python workers.
            "steady_msgs_per_s": round(rate(1)) if len(full) > 1 else None,
            "batches": len(full),
            "batch_median_s": round(statistics.median(latency), 2),
            "batch_max_s": round(max(latency), 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def parquet_rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    rows = 0
    for file in files:
        try:
            rows += pq.read_metadata(file).num_rows
        except OSError:
            pass
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--cpu-count", type=int, default=60_000)
    parser.add_argument("--window", type=int, default=20_000, help="the route's in_flight")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # The cpu case's transform is imported by name on executors and by bridges run.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), os.environ.get("PYTHONPATH")])
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    broker, target = start_embedded_broker()
    url = target.url
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    results: dict[str, dict[str, Any]] = {}
    try:
        for case, count, cpu in (("plain", args.count, False), ("cpu", args.cpu_count, True)):
            results[f"{case} local"] = run_local(url, count, cpu, args.window, args.timeout)
            results[f"{case} spark"] = run_spark(spark, url, count, cpu, args.window, args.timeout)
            results[f"{case} spark"]["vs_local"] = round(
                results[f"{case} spark"]["msgs_per_s"] / results[f"{case} local"]["msgs_per_s"], 2
            )
    finally:
        spark.stop()
        stop_process(broker)
    if args.json:
        print(json.dumps(results))
        return
    print(environment_line())
    print(
        f"STOMP -> data lake, {os.cpu_count()} cores, window {args.window}; "
        f"plain {args.count}, cpu {args.cpu_count}"
    )
    print(
        f"{'case':<12} {'msgs/s':>9} {'vs local':>9} {'steady':>9} {'start s':>8} "
        f"{'batches':>8} {'batch med/max s':>16}"
    )
    for name, row in results.items():
        batch = f"{row['batch_median_s']}/{row['batch_max_s']}" if "batches" in row else "-"
        print(
            f"{name:<12} {row['msgs_per_s']:>9} {row.get('vs_local', '')!s:>9} "
            f"{row.get('steady_msgs_per_s') or '-'!s:>9} {row['startup_s']:>8} "
            f"{row.get('batches', '-')!s:>8} {batch:>16}"
        )


if __name__ == "__main__":
    main()
