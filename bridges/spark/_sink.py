"""The ``stomp`` streaming sink: each task sends its rows in STOMP transactions.

``df.writeStream.format("stomp")`` takes a ``body`` column (binary or
string) and optionally ``headers`` (map<string,string>), ``destination``
(string; else the ``destination`` option) and ``id`` (string). Each task of
a micro-batch runs on an executor with a Trio loop of its own
(``trio.run`` for the length of the task; nothing of the driver's): it opens
one connection, sends its partition inside a transaction whose COMMIT
carries a receipt (several in turn when the rows exceed
``maxTransactionBytes``), and returns only after the last RECEIPT, so a task
that succeeded is on the broker. An error aborts the open transaction and
fails the task; Spark retries it.

With ``transactional = false`` the rows are sent plainly and the last SEND
asks for a receipt: the broker handles a connection's frames in order, so
that receipt covers the partition.

Every message carries a deterministic ``bridge-id``: the row's ``id``
column when there is one, else ``QUERY-ID:BATCH:PARTITION:ROW``. A task
or batch that Spark runs again (a retry, a restart from the checkpoint)
sends the same ids, so a consumer dedupes by them, and the embedded broker
drops them itself (its duplicate window on ``bridge-id``): to it, this sink
is effectively once. The positional id names the same row again only when
the batch's plan puts the rows in the same partitions in the same order
(the source's partitions, narrow transformations); after a shuffle give an
``id`` column (the ``stomp`` source's rows have one).

Why there is no option to skip, on a re-run, what the same query already
sent: Spark's logs cannot tell. The commit log (``commits/N`` in the
checkpoint) is written by the driver after :meth:`commit` returned for
batch N, that is after every task of N succeeded, and names the batch
only; the tasks' commit messages reach the driver in memory and are never
written. Spark runs again only a batch that has ``offsets/N`` and no
``commits/N``: exactly the one of which nothing is logged, while the
repeats come from its tasks that reached the broker before the crash. A
marker this sink would write beside the checkpoint after each RECEIPT is a
second write: a crash between the two repeats the partition. So the
de-duplication has to be at the target, in the same write as the message.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Final

import trio
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

import trio_stomp
from trio_stomp.frame import RESERVED_HEADERS

from ._options import StompOptions

log = logging.getLogger("bridges.spark")

#: The header that carries a message's stable id (as the bridges stomp endpoints).
ID_HEADER: Final = "bridge-id"
#: The most frame bytes in one transaction (the embedded broker holds 64 MiB per connection).
MAX_TRANSACTION_BYTES: Final = 16 * 1024 * 1024
_NOT_SENT: Final = RESERVED_HEADERS | {ID_HEADER}


class SentMessage(WriterCommitMessage):
    """What one task reports to the driver: how many rows it sent."""

    def __init__(self, partition: int, count: int) -> None:
        self.partition = partition
        self.count = count


def _prepared(row: Row, fields: frozenset[str]) -> tuple[bytes, dict[str, str]]:
    body = row["body"]
    if body is None:
        data = b""
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = bytes(body)
    headers: dict[str, str] = {}
    raw = row["headers"] if "headers" in fields else None
    if raw:
        headers = {str(k): str(v) for k, v in raw.items() if k not in _NOT_SENT and v is not None}
    return data, headers


class StompStreamWriter(DataSourceStreamWriter):
    """Writes each micro-batch's partitions to a STOMP destination (see the module)."""

    def __init__(self, options: StompOptions, schema: StructType) -> None:
        fields = frozenset(schema.fieldNames())
        if "body" not in fields:
            raise ValueError("stomp sink: the data frame needs a body column (binary or string)")
        if not options.destination and "destination" not in fields:
            raise ValueError("stomp sink: give the destination option or a destination column")
        self._options = options
        self._fields = fields

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        """Send one partition (on an executor); return once the broker has it."""
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        query = (context.getLocalProperty("sql.streaming.queryId") if context else None) or "-"
        batch = (context.getLocalProperty("streaming.sql.batchId") if context else None) or "-"
        prefix = f"{query}:{batch}:{partition}:"
        count = trio.run(self._send, iterator, prefix)
        return SentMessage(partition, count)

    async def _send(self, rows: Iterator[Row], prefix: str) -> int:
        options = self._options
        async with options.connect(disconnect_timeout=2.0) as client:
            if options.transactional:
                return await self._in_transactions(client, rows, prefix)
            return await self._with_receipt(client, rows, prefix)

    def _frame(self, index: int, row: Row, prefix: str) -> tuple[str, bytes, dict[str, str]]:
        body, headers = _prepared(row, self._fields)
        stable = row["id"] if "id" in self._fields else None
        headers[ID_HEADER] = str(stable) if stable else f"{prefix}{index}"
        if self._options.persistent:
            headers.setdefault("persistent", "true")
        destination = (row["destination"] if "destination" in self._fields else None) or (
            self._options.destination
        )
        if not destination:
            raise ValueError(f"stomp sink: row {index} has no destination")
        return destination, body, headers

    async def _in_transactions(
        self, client: trio_stomp.Client, rows: Iterator[Row], prefix: str
    ) -> int:
        index = 0
        pending = iter(rows)
        while True:
            first = next(pending, None)
            if first is None:
                return index
            size = 0
            async with client.transaction(receipt=True) as transaction:
                row: Row | None = first
                while row is not None:
                    destination, body, headers = self._frame(index, row, prefix)
                    await transaction.send(destination, body, headers=headers)
                    index += 1
                    size += len(body) + sum(len(k) + len(v) + 2 for k, v in headers.items())
                    if size >= MAX_TRANSACTION_BYTES:
                        break  # COMMIT this one; the next rows go in another
                    row = next(pending, None)

    async def _with_receipt(
        self, client: trio_stomp.Client, rows: Iterator[Row], prefix: str
    ) -> int:
        last: tuple[str, bytes, dict[str, str]] | None = None
        index = 0
        for row in rows:
            if last is not None:
                await client.send(last[0], last[1], headers=last[2])
            last = self._frame(index, row, prefix)
            index += 1
        if last is not None:
            await client.send(last[0], last[1], headers=last[2], receipt=True)
        return index

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = sum(m.count for m in messages if isinstance(m, SentMessage))
        log.debug("stomp sink: batch %d sent %d messages", batchId, sent)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Tasks that succeeded committed their transactions: a re-run sends
        # the same bridge-ids again, for consumers to dedupe.
        log.warning("stomp sink: batch %d aborted; it will be sent again", batchId)
