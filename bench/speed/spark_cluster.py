"""The STOMP round trip on a standalone Spark cluster on loopback: a master and two workers.

    .venv/bin/python bench/speed/spark_cluster.py [--count 2000]

Starts, from the pyspark package's own ``bin/spark-class``, a standalone
master (127.0.0.1, a free port) and two workers (1 core, 1 GiB each), and an
embedded broker; runs ``stomp`` source -> upper-case -> ``stomp`` sink with
``master = spark://...`` (executors on the workers, the source's log under a
local checkpoint that both workers see, being on this machine); checks that
every message arrived upper-cased; stops everything. Prints one line per
step and the verdict.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from _common import free_port, start_embedded_broker, stop_process

import trio_stomp


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def wait_for_log(path: Path, pattern: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and re.search(pattern, path.read_text(errors="replace")):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{path.name}: no {pattern!r} within {timeout} s")


def send(url: str, queue: str, count: int) -> None:
    async def main() -> None:
        async with trio_stomp.connect(url) as client:
            for n in range(count):
                await client.send(queue, f"message {n}".encode(), receipt=n == count - 1)

    trio.run(main)


def receive(url: str, queue: str, count: int, timeout: float) -> list[bytes]:
    bodies: list[bytes] = []

    async def main() -> None:
        async with trio_stomp.connect(url) as client:
            async with client.subscribe(queue, ack="client-individual") as subscription:
                with trio.move_on_after(timeout):
                    async for message in subscription:
                        bodies.append(message.body)
                        await message.ack()
                        if len(bodies) >= count:
                            return

    trio.run(main)
    return bodies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="spark-cluster-"))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(work / "w")}
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    processes: list[subprocess.Popen[bytes]] = []
    broker, target = start_embedded_broker()
    url = target.url
    try:
        log = work / "master.log"
        master_args = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"]
        worker_args = ["--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0"]
        worker = [str(spark_class()), "org.apache.spark.deploy.worker.Worker", *worker_args]
        processes.append(
            subprocess.Popen(
                [str(spark_class()), "org.apache.spark.deploy.master.Master", *master_args],
                stdout=open(log, "wb"),  # noqa: SIM115 (closed with the process)
                stderr=subprocess.STDOUT,
                env=env,
            )
        )
        wait_for_log(log, "I have been elected leader", 120)
        print(f"master up at {master_url}", flush=True)
        for n in range(2):
            worker_log = work / f"worker{n}.log"
            processes.append(
                subprocess.Popen(
                    [*worker, master_url],
                    stdout=open(worker_log, "wb"),  # noqa: SIM115 (closed with the process)
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
            wait_for_log(worker_log, "Successfully registered with master", 120)
            print(f"worker {n} registered", flush=True)
        from pyspark.sql import SparkSession

        import bridges.spark

        spark = (
            SparkSession.builder.master(master_url)
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.executor.memory", "768m")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        bridges.spark.register(spark)
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        print(f"session on the cluster, {executors} executor(s) so far", flush=True)
        inbox, outbox = "/queue/cluster-in", "/queue/cluster-out"
        send(url, inbox, args.count)
        checkpoint = str(work / "ckpt")
        query = (
            spark.readStream.format("stomp")
            .option("url", url)
            .option("destination", inbox)
            .option("checkpointLocation", checkpoint)
            .option("numPartitions", "4")
            .option("rowsPerPartition", "200")
            .load()
            .selectExpr("cast(upper(cast(body as string)) as binary) as body", "id")
            .writeStream.format("stomp")
            .option("url", url)
            .option("destination", outbox)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        started = time.monotonic()
        try:
            bodies = receive(url, outbox, args.count, timeout=300)
        finally:
            query.stop()
        expected = sorted(f"MESSAGE {n}".encode() for n in range(args.count))
        ok = sorted(set(bodies)) == expected
        hosts = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        print(
            f"round trip on {master_url} with {hosts} executors: {len(bodies)} of "
            f"{args.count} received in {time.monotonic() - started:.1f} s; "
            f"{'all present, upper-cased' if ok else 'MISMATCH'}",
            flush=True,
        )
        spark.stop()
        if not ok:
            sys.exit(1)
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(30)
        stop_process(broker)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
