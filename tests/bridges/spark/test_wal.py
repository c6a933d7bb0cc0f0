"""The write-ahead log and the reader's offsets, without Spark: replay gives the same rows."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from bridges.spark._pump import Delivery
from bridges.spark._reader import LoggedStreamReader, WalPartition
from bridges.spark._wal import Record, WalError, WriteAheadLog, read_segment


def _record(i: int) -> Record:
    return Record("/queue/a", f"m-{i}", f"id-{i}", {"n": str(i)}, b"\x00body %d" % i, 1700.0 + i)


def test_a_segment_reads_back_as_written_and_in_slices(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    segment = wal.append(10, [_record(i) for i in range(5)])
    assert (segment.start, segment.end) == (10, 15)
    assert list(read_segment(segment.path)) == [_record(i) for i in range(5)]
    assert list(read_segment(segment.path, skip=2, count=2)) == [_record(2), _record(3)]
    assert wal.end() == 15


def test_a_damaged_segment_is_an_error_naming_the_file(tmp_path: Path) -> None:
    segment = WriteAheadLog(tmp_path).append(0, [_record(0), _record(1)])
    data = bytearray(segment.path.read_bytes())
    data[-3] ^= 0xFF
    segment.path.write_bytes(bytes(data))
    with pytest.raises(WalError, match="record 1 is damaged"):
        list(read_segment(segment.path))
    whole = WriteAheadLog(tmp_path / "b").append(0, [_record(0)])
    with pytest.raises(WalError, match="1 short"):
        list(read_segment(whole.path, skip=0, count=2))


def test_covering_spans_segments_and_a_gap_is_an_error(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    first = wal.append(0, [_record(i) for i in range(3)])
    second = wal.append(3, [_record(i) for i in range(3, 7)])
    assert wal.covering(2, 5) == [(first, 2, 1), (second, 0, 2)]
    wal.delete_through(3)
    assert not first.path.exists()
    assert second.path.exists()
    with pytest.raises(WalError, match="offsets 0 to 3 are in no segment"):
        wal.covering(0, 4)


def test_a_half_written_segment_is_removed_at_start(tmp_path: Path) -> None:
    (tmp_path / ".tmp-0123").write_bytes(b"partial")
    WriteAheadLog(tmp_path)
    assert list(tmp_path.iterdir()) == []


class FakeSource:
    """A feed over a list; records which messages were acked."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records
        self.acked: list[str] = []

    @asynccontextmanager
    async def __call__(self) -> AsyncIterator[Callable[[], Awaitable[Delivery]]]:
        pending = iter(self.records)

        async def receive() -> Delivery:
            record = next(pending, None)
            if record is None:
                raise trio.EndOfChannel
            await trio.lowlevel.checkpoint()

            async def ack() -> None:
                self.acked.append(record.id)

            return Delivery(record, ack)

        yield receive


def _reader(feed: FakeSource, wal: Path, max_per_trigger: int | None = None) -> LoggedStreamReader:
    return LoggedStreamReader(
        feed,
        str(wal),
        window=100,
        max_per_trigger=max_per_trigger,
        partitions=3,
        rows_per_partition=4,
        name="fake",
    )


def _rows(reader: LoggedStreamReader, start: int, end: int) -> list[tuple[object, ...]]:
    parts = reader.partitions({"offset": start}, {"offset": end})
    assert all(isinstance(p, WalPartition) for p in parts)
    return [
        tuple(row.values())
        for part in parts
        for batch in reader.read(part)
        for row in batch.to_pylist()
    ]


def _until(reader: LoggedStreamReader, start: int, want: int, limit: object) -> int:
    for _ in range(200):
        end = reader.latestOffset({"offset": start}, limit)["offset"]  # type: ignore[arg-type]
        if end >= want:
            return end
        trio.run(trio.sleep, 0.01)
    raise AssertionError(f"the reader never offered offset {want}")


def _wait(condition: Callable[[], bool]) -> None:
    for _ in range(300):
        if condition():
            return
        trio.run(trio.sleep, 0.01)
    raise AssertionError("not true within 3 s")


def _logged(path: Path) -> list[str]:
    return [r.id for s in WriteAheadLog(path).segments() for r in read_segment(s.path)]


def test_acks_follow_the_log_and_a_restart_replays_the_same_rows(tmp_path: Path) -> None:
    feed = FakeSource([_record(i) for i in range(10)])
    reader = _reader(feed, tmp_path, max_per_trigger=6)
    assert reader.initialOffset() == {"offset": 0}
    assert reader.getDefaultReadLimit() == ReadMaxRows(6)
    try:
        end = _until(reader, 0, 6, ReadMaxRows(6))
        assert end == 6  # the limit holds even when more is ready
        # The logger goes on while Spark runs the batch; every acked message
        # is in the log, in order: nothing acked is only in memory.
        _wait(lambda: len(feed.acked) == 10)
        assert feed.acked == [f"id-{i}" for i in range(10)]
        assert _logged(tmp_path) == feed.acked
        first = _rows(reader, 0, 6)
        assert [row[2] for row in first] == [f"id-{i}" for i in range(6)]
        assert len(reader.partitions({"offset": 0}, {"offset": 6})) == 2
    finally:
        reader.stop()
    assert reader.pump is not None
    assert not reader.pump.running
    # The driver "crashed" before committing batch 0: a new reader (a restart)
    # yields the same rows for it, and offers what was logged after it.
    again = _reader(FakeSource([]), tmp_path)
    try:
        assert _rows(again, 0, 6) == first
        end = _until(again, 6, 10, ReadAllAvailable())
        assert end == 10
        assert [row[2] for row in _rows(again, 6, end)] == [f"id-{i}" for i in range(6, 10)]
        again.commit({"offset": 6})
        assert all(s.end > 6 for s in WriteAheadLog(tmp_path).segments())
        again.commit({"offset": end})
        assert WriteAheadLog(tmp_path).segments() == []
    finally:
        again.stop()


def test_the_log_runs_at_most_two_windows_ahead_of_what_spark_was_offered(
    tmp_path: Path,
) -> None:
    feed = FakeSource([_record(i) for i in range(10)])
    reader = LoggedStreamReader(
        feed, str(tmp_path), window=2, max_per_trigger=None, partitions=1,
        rows_per_partition=10, name="small",
    )  # fmt: skip
    try:
        offered = reader.latestOffset({"offset": 0}, ReadAllAvailable())["offset"]
        _wait(lambda: len(feed.acked) == offered + 4)
        trio.run(trio.sleep, 0.3)
        assert len(feed.acked) == offered + 4  # then the broker's window holds the rest
        # Offering more makes room again: no commit is needed (none would come).
        offered = reader.latestOffset({"offset": 0}, ReadAllAvailable())["offset"]
        _wait(lambda: len(feed.acked) == min(10, offered + 4))
    finally:
        reader.stop()


def test_the_reader_pickles_without_its_pump(tmp_path: Path) -> None:
    import pickle

    reader = _reader(FakeSource([_record(0)]), tmp_path)
    try:
        _until(reader, 0, 1, ReadAllAvailable())
        copy = pickle.loads(pickle.dumps(reader))
        assert copy.pump is None
        assert _rows(copy, 0, 1)[0][2] == "id-0"
    finally:
        reader.stop()
