"""The ``stomp`` data source: a STOMP subscription as a stream, a destination as a sink.

``spark.readStream.format("stomp")`` subscribes on the driver with
client-individual acks (see :mod:`._reader` for the write-ahead log that
makes it replayable); ``df.writeStream.format("stomp")`` sends from the
executors (see :mod:`._sink`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.types import StructType

import trio_stomp
from trio_stomp.frame import RESERVED_HEADERS

from ._options import StompOptions
from ._pump import Delivery
from ._reader import SOURCE_SCHEMA, LoggedStreamReader
from ._sink import ID_HEADER, StompStreamWriter
from ._wal import Record

#: Bound on UNSUBSCRIBE and DISCONNECT when the pump closes, s: everything
#: durable is in the log already; a silent broker costs a redelivery at most.
_DISCONNECT_TIMEOUT = 0.5


def message_record(message: trio_stomp.Message) -> Record:
    """A received MESSAGE as a log record: headers (first value wins), stable id."""
    headers: dict[str, str] = {}
    for name, value in message.headers.items():
        if name not in RESERVED_HEADERS:
            headers.setdefault(name, value)
    message_id = message.message_id
    return Record(
        destination=message.destination,
        message_id=message_id,
        id=headers.get(ID_HEADER) or message_id,
        headers=headers,
        body=message.body,
        received_at=time.time(),
    )


@attrs.frozen
class StompFeed:
    """Opens the source's subscription (on the pump's loop); picklable."""

    options: StompOptions

    @asynccontextmanager
    async def __call__(self) -> AsyncIterator[Callable[[], Awaitable[Delivery]]]:
        options = self.options
        window = str(options.prefetch)
        headers = {"prefetch-count": window, "activemq.prefetchSize": window}
        headers.update(options.subscribe_headers)
        reconnect = trio_stomp.Reconnect(initial_delay=0.2, max_delay=10.0)
        async with options.connect(
            disconnect_timeout=_DISCONNECT_TIMEOUT, reconnect=reconnect
        ) as client:
            subscription = client.subscribe(
                options.destination, ack="client-individual", headers=headers
            )
            async with subscription:
                messages = subscription.__aiter__()

                async def receive() -> Delivery:
                    try:
                        message = await messages.__anext__()
                    except StopAsyncIteration:
                        raise trio_stomp.ConnectionLost("the subscription ended") from None
                    return Delivery(message_record(message), message.ack)

                yield receive


class StompDataSource(DataSource):
    """``format("stomp")``: register it with :func:`bridges.spark.register`.

    Source options: ``url`` (failover lists comma-separated), ``destination``,
    ``checkpointLocation`` (the query's; the write-ahead log goes in its
    ``stomp-wal`` directory; or ``walPath``), ``login``/``passcode`` (or in
    the URL), ``vhost``, ``prefetch`` (default 1000), ``maxMessagesPerTrigger``,
    ``version``, ``numPartitions``, ``rowsPerPartition``, and extra SUBSCRIBE
    headers: ``headers``, a JSON object whose names keep their case
    (``{"activemq.subscriptionName": "orders"}``), or ``header.NAME``
    (``header.selector``), whose name Spark lowercases.

    Sink options: ``url``, ``destination`` (or a ``destination`` column),
    ``transactional`` (default true), ``login``/``passcode``, ``vhost``.
    """

    @classmethod
    def name(cls) -> str:
        return "stomp"

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = StompOptions.from_options(self.options, role="source")
        assert options.wal_path is not None  # from_options insists for a source
        return LoggedStreamReader(
            StompFeed(options),
            options.wal_path,
            window=options.prefetch,
            max_per_trigger=options.max_per_trigger,
            partitions=options.partitions,
            rows_per_partition=options.rows_per_partition,
            name=f"stomp {options.destination}",
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StompStreamWriter(StompOptions.from_options(self.options, role="sink"), schema)
