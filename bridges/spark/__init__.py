"""bridges.spark: STOMP as a Spark Structured Streaming source and sink.

One call registers the ``stomp`` format with a session::

    import bridges.spark
    bridges.spark.register(spark)

    messages = (
        spark.readStream.format("stomp")
        .option("url", "stomp://127.0.0.1:61613")
        .option("destination", "/queue/in")
        .option("checkpointLocation", "/data/ckpt/in")   # the query's: the log lives there
        .load()
    )
    (messages.selectExpr("upper(cast(body as string)) as body")
        .writeStream.format("stomp")
        .option("url", "stomp://127.0.0.1:61613")
        .option("destination", "/queue/out")
        .option("checkpointLocation", "/data/ckpt/in")
        .start())

The source is at least once across driver crashes (a write-ahead log under
the checkpoint, acked only once fsynced); its ``id`` column is stable for
de-duplication. The sink sends each task's rows in a transaction with a
deterministic ``bridge-id``. ``docs/howto/spark.md``, "What it guarantees",
has the guarantees. Needs the ``trio-stomp[spark]`` extra and Java 17.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ._reader import SOURCE_SCHEMA as SOURCE_SCHEMA
    from ._routes import run_on_spark as run_on_spark
    from ._routes import start_routes as start_routes
    from ._stomp import StompDataSource as StompDataSource

__all__ = ["SOURCE_SCHEMA", "StompDataSource", "register", "run_on_spark", "start_routes"]

#: Names loaded on first use: importing the package (``bridges plugins``
#: loads its ``lake`` module) must not import pyspark.
_LAZY: dict[str, str] = {
    "SOURCE_SCHEMA": "._reader",
    "StompDataSource": "._stomp",
    "run_on_spark": "._routes",
    "start_routes": "._routes",
}

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value


def register(spark: SparkSession) -> None:
    """Make ``format("stomp")`` available to ``spark``'s readStream and writeStream."""
    from ._stomp import StompDataSource

    spark.dataSource.register(StompDataSource)
