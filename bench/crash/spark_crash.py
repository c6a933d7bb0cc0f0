"""Crash test: STOMP -> Parquet on Spark, the driver killed with SIGKILL three times.

    .venv/bin/python bench/crash/spark_crash.py [--count 20000] [--kills 3] [--seed N] [--json]

A durable embedded broker (``trio-stomp broker --data-dir``, its own
process, never killed) holds ``count`` messages, each body ``msg-N``. A
driver process runs ``spark.readStream.format("stomp")`` -> Parquet
(``local[2]``, at most ``--per-trigger`` messages per batch) with its
checkpoint in a fresh directory. Once the query has committed a batch, the
driver's whole process group (Python, the JVM, its Python workers) is killed
with SIGKILL after a random 0-2 s, and started again from the same
checkpoint, ``--kills`` times; then it runs until every body is in the
output.

The output is read as Spark reads it: the files that the sink's
``_spark_metadata`` log lists (a killed batch's files that are not listed
do not count). Figures: bodies lost (must be 0), duplicate rows (a message
logged by the source whose ack the kill cut off is delivered again), and
whether every duplicate carries the same ``id`` (the broker's message-id,
kept on redelivery), that is, whether ``dropDuplicates(["id"])`` removes
all of them. Also the messages still on the broker and the write-ahead log
segments left under the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from _crash import committed_files, start_embedded_broker, stop_process

import trio_stomp

QUEUE = "/queue/spark-crash"


def child(url: str, checkpoint: str, output: str, per_trigger: int) -> None:
    """The driver: the query, until killed."""
    from pyspark.sql import SparkSession

    import bridges.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    bridges.spark.register(spark)
    frame = (
        spark.readStream.format("stomp")
        .option("url", url)
        .option("destination", QUEUE)
        .option("checkpointLocation", checkpoint)
        .option("prefetch", str(per_trigger))
        .option("maxMessagesPerTrigger", str(per_trigger))
        .load()
    )
    query = (
        frame.writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    query.awaitTermination()


def fill(url: str, count: int) -> None:
    async def main() -> None:
        async with trio_stomp.connect(url) as client:
            for n in range(count):
                await client.send(QUEUE, f"msg-{n}".encode(), receipt=n == count - 1)

    trio.run(main)


def queue_depth(url: str) -> int:
    """Messages still on the queue (received and released, not acked)."""
    seen = 0

    async def main() -> None:
        nonlocal seen
        async with trio_stomp.connect(url) as client:
            async with client.subscribe(QUEUE, ack="client-individual") as subscription:
                with trio.move_on_after(1.0):
                    async for _ in subscription:
                        seen += 1

    trio.run(main)
    return seen


def read_rows(output: Path) -> list[tuple[str, bytes]]:
    import pyarrow.parquet as pq

    rows: list[tuple[str, bytes]] = []
    for file in committed_files(output):
        table = pq.read_table(file, columns=["id", "body"])
        rows += zip(table.column("id").to_pylist(), table.column("body").to_pylist(), strict=True)
    return rows


def commits(checkpoint: Path) -> int:
    directory = checkpoint / "commits"
    return len([p for p in directory.iterdir() if p.name.isdigit()]) if directory.exists() else 0


def start_driver(args: argparse.Namespace, url: str, work: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, __file__, "--child", url, str(work / "ckpt"), str(work / "out")]
    command += ["--per-trigger", str(args.per_trigger)]
    return subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def kill(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="spark-crash-"))
    broker, target = start_embedded_broker(work / "broker")
    url = target.url
    try:
        fill(url, args.count)
        kills = []
        for _ in range(args.kills):
            driver = start_driver(args, url, work)
            before = commits(work / "ckpt")
            deadline = time.monotonic() + 180
            while commits(work / "ckpt") <= before and time.monotonic() < deadline:
                time.sleep(0.1)
            delay = rng.uniform(0, 2)
            time.sleep(delay)
            kills.append({"after_commits": commits(work / "ckpt"), "delay_s": round(delay, 2)})
            kill(driver)
        driver = start_driver(args, url, work)
        expected = {f"msg-{n}".encode() for n in range(args.count)}
        deadline = time.monotonic() + args.timeout
        try:
            while time.monotonic() < deadline:
                if {body for _, body in read_rows(work / "out")} >= expected:
                    break
                time.sleep(1.0)
        finally:
            kill(driver)
        rows = read_rows(work / "out")
        ids_of: dict[bytes, set[str]] = {}
        bodies_of: dict[str, set[bytes]] = {}
        for stable_id, body in rows:
            ids_of.setdefault(body, set()).add(stable_id)
            bodies_of.setdefault(stable_id, set()).add(body)
        lost = len(expected - set(ids_of))
        return {
            "messages": args.count,
            "kills": kills,
            "rows": len(rows),
            "lost": lost,
            "duplicates": len(rows) - len(ids_of),
            "dedupable_by_id": all(len(i) == 1 for i in ids_of.values())
            and all(len(b) == 1 for b in bodies_of.values()),
            "rows_after_dedupe_by_id": len(bodies_of),
            "left_on_broker": queue_depth(url),
            "wal_segments_left": len(list((work / "ckpt" / "stomp-wal").glob("*.seg"))),
            "batches_committed": commits(work / "ckpt"),
        }
    finally:
        stop_process(broker)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--per-trigger", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("URL", "CHECKPOINT", "OUTPUT"))
    args = parser.parse_args()
    if args.child:
        url, checkpoint, output = args.child
        child(url, checkpoint, output, args.per_trigger)
        return
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    started = time.monotonic()
    figures = run(args)
    figures["seed"] = args.seed
    figures["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"spark crash test: {args.count} messages, {args.kills} driver SIGKILLs, seed {args.seed}"
    )
    for key, value in figures.items():
        print(f"  {key:<24} {value}")


if __name__ == "__main__":
    main()
