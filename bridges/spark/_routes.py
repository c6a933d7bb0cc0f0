"""``engine = "spark"``: every route of a config as a Structured Streaming query.

Nothing in the route config changes. Per route:

- the source becomes a Spark source: ``stomp`` natively (the ``stomp``
  format, with the route's connection settings), every other type through
  the ``bridges-route`` format (the same driver-side write-ahead log);
- the transforms run on executors, per message of each Arrow batch
  (``mapInArrow``), the same objects as under the local engine;
- the sink runs on executors: each task opens the route's bridges sink and
  returns once its rows are durable; or, for ``type = "spark"``, Spark's own
  file sink writes them (parquet, json, delta...).

Each query keeps its checkpoint in ``[spark] checkpoint``/ROUTE.
:func:`run_on_spark` is ``bridges run`` for this engine: it starts the
queries and waits until SIGTERM/SIGINT or until one fails.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import lit
from pyspark.sql.streaming.query import StreamingQuery

import bridges

from ._bridged import RouteDataSource, RouteRef
from ._stomp import StompDataSource
from ._transform import TRANSFORMED_SCHEMA, RouteTransformer

Say = Callable[[str], None]


def open_session(settings: bridges.SparkSettings, app_name: str = "bridges") -> SparkSession:
    """A session for ``settings`` (master, ``spark.*`` conf) with both formats registered.

    Python workers run this process's own interpreter unless ``PYSPARK_PYTHON``
    (or ``spark.pyspark.python``) says otherwise: Spark's default, ``python3``
    from PATH, is rarely the one with pyspark, pyarrow and bridges installed.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(settings.master).appName(app_name)
    for key, value in settings.conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register_formats(spark)
    return spark


def register_formats(spark: SparkSession) -> None:
    """Register ``stomp`` and ``bridges-route`` with ``spark``."""
    spark.dataSource.register(StompDataSource)
    spark.dataSource.register(RouteDataSource)


def checkpoint_of(config: bridges.Config, route: str) -> Path:
    """Where a route's query keeps its checkpoint."""
    if config.spark.checkpoint is None:
        raise ValueError('[spark] checkpoint is required with engine = "spark"')
    return config.base_dir / Path(config.spark.checkpoint).expanduser() / route


def _stomp_options(source: Any) -> dict[str, str]:
    url = source.url if isinstance(source.url, str) else ",".join(source.url)
    options = {"url": url, "destination": source.destination}
    for key in ("login", "passcode", "vhost", "prefetch"):
        value = getattr(source, key, None)
        if value is not None:
            options[key] = str(value)
    headers = getattr(source, "subscribe_headers", {})
    if headers:
        # As JSON: Spark lowercases option names (header.NAME), and STOMP header names
        # are case-sensitive (activemq.subscriptionName).
        options["headers"] = json.dumps(dict(headers))
    return options


def source_frame(
    spark: SparkSession, config: bridges.Config, route: bridges.RouteConfig, ref: RouteRef
) -> DataFrame:
    """The route's source as a streaming DataFrame of the ``stomp`` source's columns."""
    checkpoint = str(checkpoint_of(config, route.name))
    if route.source.type == "stomp":
        reader = spark.readStream.format("stomp").options(**_stomp_options(route.source.config))
        if getattr(route.source.config, "prefetch", None) is None:
            reader = reader.option("prefetch", str(route.in_flight))
    else:
        reader = spark.readStream.format("bridges-route").options(
            config=ref.config_path, route=ref.route, baseDir=ref.base_dir
        )
    return reader.option("checkpointLocation", checkpoint).load()


def start_route(
    spark: SparkSession, config: bridges.Config, route: bridges.RouteConfig, config_path: str
) -> StreamingQuery:
    """Start one route's query (see the module)."""
    ref = RouteRef(str(Path(config_path).resolve()), route.name, str(config.base_dir))
    frame = source_frame(spark, config, route, ref)
    if route.transforms:
        frame = frame.mapInArrow(RouteTransformer(ref), TRANSFORMED_SCHEMA)
    else:
        frame = frame.withColumn("target", lit(None).cast("string"))
    sink = route.sink
    if sink.type == "spark":
        lake = ref.build(sink, "sink")
        writer = frame.drop("target").writeStream.format(lake.format).option("path", lake.path)
        writer = writer.options(**dict(lake.options))
        if lake.partition_by:
            writer = writer.partitionBy(*lake.partition_by)
    else:
        writer = frame.writeStream.format("bridges-route").options(
            config=ref.config_path, route=ref.route, baseDir=ref.base_dir
        )
    writer = writer.queryName(f"bridges_{route.name}").option(
        "checkpointLocation", str(checkpoint_of(config, route.name))
    )
    writer = writer.trigger(processingTime=spark_interval(config.spark.trigger))
    return writer.start()


_UNITS = {"ms": "milliseconds", "s": "seconds", "min": "minutes"}


def spark_interval(trigger: str) -> str:
    """``[spark] trigger`` ("200 ms", "1 second") as Spark's interval ("200 milliseconds")."""
    number = trigger.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    unit = trigger[len(trigger.rstrip("abcdefghijklmnopqrstuvwxyz")) :]
    return f"{number} {_UNITS.get(unit, unit)}"


def start_routes(
    spark: SparkSession, config: bridges.Config, config_path: str
) -> list[StreamingQuery]:
    """Start every route of ``config`` as a query; stop those started if one fails to."""
    register_formats(spark)
    queries: list[StreamingQuery] = []
    try:
        for route in config.routes:
            queries.append(start_route(spark, config, route, config_path))
    except BaseException:
        for query in queries:
            query.stop()
        raise
    return queries


def run_on_spark(config: bridges.Config, config_path: str, say: Say) -> int:
    """``bridges run`` with ``engine = "spark"``: run until a signal or a failed query.

    It stops as the local engine does: on SIGTERM or SIGINT (Ctrl-C) the
    queries stop, the last line is :meth:`bridges.service.Stopped.summary`
    and the exit status :attr:`~bridges.service.Stopped.exit_status`. Spark
    keeps what a query had not committed in its checkpoint and its source
    (a STOMP source's unacknowledged messages go back to the broker), and
    this engine has no embedded broker, so a stop leaves nothing to count:
    ``stopped``, status 0.

    PySpark's SparkContext installs its own SIGINT handler (cancel the jobs,
    raise KeyboardInterrupt), which would end ``bridges run`` with status
    130 and no summary: ours is installed again once the session is open,
    and a Ctrl-C while it opens counts as a stop too.

    Returns:
      the exit status: that of the stop, or 1 when a query failed (its error
      is said).
    """
    from bridges.service import Stopped  # (the layer below: run_bridge's summary and rules)

    # py4j logs every connection it closes at info, the last ones at exit:
    # after the summary, which must stay the last line.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()

    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, on_signal) for sig in signals}
    status = 0
    spark: SparkSession | None = None
    try:
        try:
            spark = open_session(config.spark)
        except KeyboardInterrupt:  # pyspark's SIGINT handler, before ours is back
            stop.set()
        for sig in signals:
            signal.signal(sig, on_signal)
        if spark is not None and not stop.is_set():
            status = _run_queries(spark, config, config_path, say, stop)
    finally:
        if spark is not None:
            spark.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    stopped = Stopped()
    say(stopped.summary())
    return status or stopped.exit_status


def _run_queries(
    spark: SparkSession, config: bridges.Config, config_path: str, say: Say, stop: threading.Event
) -> int:
    """Start the queries, wait for ``stop`` or a failed query, stop them; 1 if one failed."""
    status = 0
    queries = start_routes(spark, config, config_path)
    say(f"running {len(queries)} route(s) on Spark ({config.spark.master})")
    while not stop.is_set() and all(q.isActive for q in queries):
        stop.wait(0.5)
    if stop.is_set():
        say("stopping (the queries' checkpoints keep what they had not committed)")
    for query in queries:
        error = query.exception()
        if error is not None:
            say(f"route {query.name.removeprefix('bridges_')} failed: {error}")
            status = 1
        query.stop()
    return status
