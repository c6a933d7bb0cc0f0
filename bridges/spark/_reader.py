"""A Spark stream reader over any feed, made replayable by the write-ahead log.

The shape of Spark's Python streaming API decides the design:

- ``initialOffset``, ``latestOffset``, ``partitions``, ``commit`` and
  ``stop`` run in one long-lived planner process on the driver; ``read``
  runs in executors, on an unpickled copy of the reader, and must not
  depend on the planner's state. So the connection lives on the driver (in
  a :class:`Pump`), and executors read rows from the log on disk.
- ``commit(end)`` arrives one batch late, and only once another batch is
  planned, which happens only when ``latestOffset`` moves. Acking on commit
  would deadlock as soon as the broker's unacked window is full (nothing new
  arrives, no batch is planned, no commit comes). So messages are acked as
  soon as they are in the log (written and fsynced under the query's
  checkpoint, by the pump's logger every few milliseconds, while Spark runs
  a batch): from then on the log, not the broker, holds them, and the window
  frees up whatever Spark does. ``commit`` only deletes the segments Spark
  no longer needs.
- The log may run ahead of what ``latestOffset`` last offered by at most
  ``2 * window`` messages; then the buffer fills, the broker's window
  closes, and the broker holds the rest (backpressure). The bound counts
  from what was *offered*, not committed: each ``latestOffset`` call makes
  room again, so it cannot wait on a commit that waits on it.

Offsets are ``{"offset": N}``: N messages logged before. After a driver
crash the next start finds the log's end on disk: batches Spark had planned
are re-run from the same segments (same rows), and what was logged but not
yet planned goes into the next batch. Nothing acked is only in memory.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    BinaryType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import trio_stomp

from ._pump import Feed, Pump
from ._wal import Record, WriteAheadLog, read_segment

#: One row of the ``stomp`` source (Spark DDL).
SOURCE_SCHEMA = (
    "destination string, message_id string, id string, "
    "headers map<string,string>, body binary, received_at timestamp"
)
#: The same as Spark types.
SOURCE_TYPE = StructType(
    [
        StructField("destination", StringType()),
        StructField("message_id", StringType()),
        StructField("id", StringType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),
        StructField("received_at", TimestampType()),
    ]
)
#: Rows per Arrow batch that ``read`` yields.
ARROW_BATCH_ROWS = 10_000


@functools.cache
def _arrow_schema() -> pa.Schema:
    # Exactly what Spark checks a data source's Arrow batches against.
    return to_arrow_schema(SOURCE_TYPE, timezone="UTC")


def _headers(records: Sequence[Record], kind: pa.DataType) -> pa.Array:
    # From flat keys, values and offsets: ~80x faster than from a list of pairs.
    offsets = [0]
    keys: list[str] = []
    values: list[str] = []
    for record in records:
        keys += record.headers.keys()
        values += record.headers.values()
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(keys, pa.string()),
        pa.array(values, pa.string()),
        type=kind,
    )


def arrow_batch(records: Sequence[Record]) -> pa.RecordBatch:
    """Records as one Arrow batch of :data:`SOURCE_TYPE` (column by column: no per-row
    conversion in Spark's worker)."""
    schema = _arrow_schema()
    columns = [
        pa.array([r.destination for r in records], pa.string()),
        pa.array([r.message_id for r in records], pa.string()),
        pa.array([r.id for r in records], pa.string()),
        _headers(records, schema.field("headers").type),
        pa.array([r.body for r in records], pa.binary()),
        pa.array(
            [round(r.received_at * 1_000_000) for r in records], schema.field("received_at").type
        ),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class WalPartition(InputPartition):
    """Part of a batch: ``(segment path, skip, count)`` pieces, read in order."""

    def __init__(self, pieces: Sequence[tuple[str, int, int]]) -> None:
        super().__init__(tuple(pieces))
        self.pieces = tuple(pieces)


def split(
    slices: Sequence[tuple[Path, int, int]], total: int, partitions: int, per_partition: int
) -> list[WalPartition]:
    """Cut a batch's slices of segments into at most ``partitions`` even partitions."""
    count = max(1, min(partitions, math.ceil(total / per_partition)))
    size = math.ceil(total / count) if total else 0
    result: list[WalPartition] = []
    pieces: list[tuple[str, int, int]] = []
    room = size
    for path, skip, length in slices:
        at, left = skip, length
        while left > 0:
            take = min(left, room)
            pieces.append((str(path), at, take))
            at, left, room = at + take, left - take, room - take
            if room == 0:
                result.append(WalPartition(pieces))
                pieces, room = [], size
    if pieces:
        result.append(WalPartition(pieces))
    return result


class LoggedStreamReader(DataSourceStreamReader):
    """Offsets, partitions and acks for one feed and its log.

    Args:
      feed: opens the source on the pump's loop (picklable: it is shipped
        with the reader to executors, which never call it).
      wal_path: the log's directory.
      window: the most messages buffered in memory before they are logged.
      max_per_trigger: at most this many messages per batch (None: all).
      partitions, rows_per_partition: how a batch is cut for executors.
      name: for logs and the thread's name.
    """

    def __init__(
        self,
        feed: Feed,
        wal_path: str,
        *,
        window: int,
        max_per_trigger: int | None,
        partitions: int,
        rows_per_partition: int,
        name: str,
    ) -> None:
        self._feed = feed
        self._wal_path = wal_path
        self._window = window
        self._max_per_trigger = max_per_trigger
        self._partitions = partitions
        self._rows_per_partition = rows_per_partition
        self._name = name
        self._wal: WriteAheadLog | None = None
        self._pump: Pump | None = None
        self._lock = threading.Lock()  # _end and _offered: the logger's thread and Spark's
        self._end = 0  # the offset after the last logged message
        self._offered = 0  # the offset latestOffset returned last

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the reader for read(): no pump, no open log, no lock.
        state = self.__dict__.copy()
        state.update(_wal=None, _pump=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def pump(self) -> Pump | None:
        """The driver-side pump, once ``latestOffset`` started it."""
        return self._pump

    def _log(self) -> WriteAheadLog:
        if self._wal is None:
            self._wal = WriteAheadLog(Path(self._wal_path))
        return self._wal

    def initialOffset(self) -> dict[str, int]:
        segments = self._log().segments()
        return {"offset": segments[0].start if segments else 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self._max_per_trigger)

    def latestOffset(  # (Spark's name)
        self, start: dict[str, int], limit: ReadLimit
    ) -> dict[str, int]:
        """The end of what is logged (and acked), at most ``limit`` past ``start``.

        Raises:
          Exception: the pump could not log (a full disk): the query fails
            with it; nothing unlogged was acked.
        """
        begin = int(start["offset"])
        if self._pump is None:
            self._start_pump(begin)
        assert self._pump is not None
        if self._pump.failure is not None:
            raise self._pump.failure
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        with self._lock:
            end = self._end if cap is None else min(self._end, begin + cap)
            self._offered = end
        return {"offset": end}

    def _start_pump(self, begin: int) -> None:
        wal = self._log()
        self._end = self._offered = max(wal.end() or 0, begin)
        self._pump = Pump(
            self._feed,
            log=self._append,
            room=self._room,
            window=self._window,
            reconnect=trio_stomp.Reconnect(initial_delay=0.2, max_delay=10.0),
            name=self._name,
        )
        self._pump.start()

    def _append(self, records: list[Record]) -> None:
        # In a worker thread of the pump's loop; the only writer of the log.
        start = self._end
        self._log().append(start, records)
        with self._lock:
            self._end = start + len(records)

    def _room(self) -> int:
        with self._lock:
            return 2 * self._window - (self._end - self._offered)

    def partitions(  # (Spark's signature)
        self, start: dict[str, int], end: dict[str, int]
    ) -> Sequence[InputPartition]:
        begin, stop = int(start["offset"]), int(end["offset"])
        if stop <= begin:
            return []
        slices = [(s.path, skip, n) for s, skip, n in self._log().covering(begin, stop)]
        return split(slices, stop - begin, self._partitions, self._rows_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Rows of one partition, from the log, as Arrow batches (on an executor)."""
        assert isinstance(partition, WalPartition)
        records: list[Record] = []
        for path, skip, count in partition.pieces:
            for record in read_segment(Path(path), skip, count):
                records.append(record)
                if len(records) >= ARROW_BATCH_ROWS:
                    yield arrow_batch(records)
                    records = []
        if records:
            yield arrow_batch(records)

    def commit(self, end: dict[str, int]) -> None:
        """Spark has the batches up to ``end``: their segments go."""
        self._log().delete_through(int(end["offset"]))

    def stop(self) -> None:
        """The query ended: disconnect and join the pump's thread."""
        if self._pump is not None:
            self._pump.close()
