"""STOMP in and out of a Spark Structured Streaming query (``trio-stomp[spark]``, Java 17).

    trio-stomp broker &                      # a broker on 127.0.0.1:61613
    python examples/spark_stream.py

Reads /queue/raw, upper-cases each body on the executors and sends it to
/queue/upper; the source's write-ahead log and the query's progress live in
./spark-checkpoint/upper. Stop with Ctrl-C; a restart resumes from there.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

import bridges.spark

URL = "stomp://127.0.0.1:61613"
CHECKPOINT = "spark-checkpoint/upper"


def main() -> None:
    spark = SparkSession.builder.master("local[2]").appName("stomp-upper").getOrCreate()
    bridges.spark.register(spark)  # format("stomp") for readStream and writeStream
    messages = (
        spark.readStream.format("stomp")
        .option("url", URL)
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
        .option("url", URL)
        .option("destination", "/queue/upper")
        .option("checkpointLocation", CHECKPOINT)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
