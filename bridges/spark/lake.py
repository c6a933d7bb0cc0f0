"""The ``spark`` sink type: a route's messages written by Spark itself (the data-lake case).

::

    [routes.archive]
    source = { type = "stomp", url = "stomp://127.0.0.1:61613", destination = "/queue/orders" }
    sink = { type = "spark", format = "parquet", path = "lake/orders" }

Only ``engine = "spark"`` runs it: the route's query ends in Spark's own
file sink (``format`` is any format Spark writes: parquet, json, orc, csv,
delta when installed), with Spark's exactly-once file sink semantics (a
batch's files are listed in the sink's ``_spark_metadata`` log once, and a
batch run again after a crash replaces, never duplicates, them). Rows have
the ``stomp`` source's columns. ``bridges check`` rejects it under the
local engine.

This module imports no pyspark: ``bridges plugins`` and ``bridges check``
stay fast; the family is unavailable when pyspark is not installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import attrs

from bridges import Context, InvalidSetting, Registry, Writer

if importlib.util.find_spec("pyspark") is None:  # the family needs trio-stomp[spark]
    raise ImportError("pyspark is not installed", name="pyspark")

#: Formats Spark's file sink writes without a package of its own.
BUILT_IN_FORMATS: Final = ("parquet", "json", "orc", "csv", "text", "delta")


@attrs.frozen
class SparkSinkConfig:
    """Written by Spark's file sink (engine = "spark" only): parquet, json, delta...

    Attributes:
      path: required: the directory Spark writes (its ``_spark_metadata``
        lists each micro-batch's files once).
      format: any format Spark's file sink writes (``parquet``, ``json``,
        ``orc``, ``csv``, ``text``; ``delta`` when installed).
      options: passed to the writer (``{ compression = "zstd" }``).
      partition_by: the columns to partition by (``destination``,
        ``message_id``, ``id``, ``headers``, ``body``, ``received_at``).
    """

    path: str
    format: str = "parquet"
    options: dict[str, str] = attrs.field(factory=dict)
    partition_by: tuple[str, ...] = ()


@attrs.frozen
class SparkSink:
    """The settings of a Spark file sink; the spark engine reads them, nothing opens it."""

    format: str
    path: str
    options: tuple[tuple[str, str], ...]
    partition_by: tuple[str, ...]

    @classmethod
    def build(cls, config: SparkSinkConfig, context: Context) -> SparkSink:
        if not config.path:
            raise InvalidSetting("path", "missing (required)")
        if not config.format or not config.format.replace(".", "").isalnum():
            raise InvalidSetting("format", f"not a Spark format name: {config.format!r}")
        columns = {"destination", "message_id", "id", "headers", "body", "received_at"}
        for column in config.partition_by:
            if column not in columns:
                raise InvalidSetting("partition_by", f"no column {column!r}")
        return cls(
            config.format,
            str(context.path(config.path)),
            tuple(sorted(config.options.items())),
            config.partition_by,
        )

    def describe(self) -> str:
        return f"spark {self.format} {self.path}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Writer]:
        raise RuntimeError('a "spark" sink runs only with engine = "spark"')
        yield  # pragma: no cover (an async generator)


def register(registry: Registry) -> None:
    """Register the ``spark`` sink type."""
    registry.register("sink", "spark", SparkSinkConfig, SparkSink.build)
