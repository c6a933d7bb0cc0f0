"""STOMP in and out of a Spark Structured Streaming query (``trio-stomp[spark]``, Java 17).

Run it from the repository's top folder, in its venv (``source .venv/bin/activate``),
with the broker's URL as its argument::

    trio-stomp broker --listen 127.0.0.1:61640 &           # or any STOMP broker
    python examples/spark_stream.py stomp://127.0.0.1:61640

Reads /queue/raw, upper-cases each body on the executors and sends it to
/queue/upper; the source's write-ahead log and the query's progress live in
./spark-checkpoint/upper. Send and read (while it runs)::

    trio-stomp send -u stomp://127.0.0.1:61640 -b hello /queue/raw
    trio-stomp listen -u stomp://127.0.0.1:61640 /queue/upper

Stop with Ctrl-C; a restart resumes from the checkpoint. The Python workers
run this interpreter unless ``PYSPARK_PYTHON`` names another one.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from pyspark.sql import SparkSession

import bridges.spark

CHECKPOINT = "spark-checkpoint/upper"


def main(url: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # not python3 from PATH
    spark = SparkSession.builder.master("local[2]").appName("stomp-upper").getOrCreate()
    bridges.spark.register(spark)  # format("stomp") for readStream and writeStream
    messages = (
        spark.readStream.format("stomp")
        .option("url", url)
        .option("destination", "/queue/raw")
        .option("checkpointLocation", CHECKPOINT)
        .load()
    )
    upper = messages.selectExpr(
        "cast(upper(cast(body as string)) as binary) as body",
        "id",  # the sink's bridge-id: a consumer dedupes redeliveries by it
    )
    query = (
        upper.writeStream.format("stomp")
        .option("url", url)
        .option("destination", "/queue/upper")
        .option("checkpointLocation", CHECKPOINT)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    print(f"spark_stream: /queue/raw -> upper case -> /queue/upper on {url}", flush=True)
    # Ctrl-C only sets a flag. PySpark's own SIGINT handler calls into the JVM
    # from inside the call that awaitTermination is blocked in, which breaks
    # that connection mid-call: four tracebacks instead of a clean stop.
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        while not stop.is_set() and query.isActive:
            query.awaitTermination(1)  # (s) returns at least this often
        query.stop()
        print("spark_stream: stopped", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/spark_stream.py STOMP_URL (e.g. stomp://127.0.0.1:61640)")
    main(sys.argv[1])
