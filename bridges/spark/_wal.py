"""The source's write-ahead log: what a micro-batch holds, on disk before Spark sees it.

The driver-side reader writes every message it takes from the broker into a
*segment* file, fsyncs it (and its directory), and only then acks the
broker and offers the new offset to Spark. Offsets are message counts: a
segment named ``{start:020d}-{end:020d}.seg`` holds messages ``start`` to
``end - 1``. Executors read a batch's rows back from the segments by path
(so the log must be on storage that every executor sees, like Spark's own
checkpoint), and a batch re-run after a crash reads the very same rows.
Once Spark commits an offset, the segments that end at or before it are
deleted.

A segment is written to an unpredictable temporary name and renamed, so a
crash leaves either a whole segment or a ``.tmp-*`` file that the next start
removes. Each record carries a CRC-32: a damaged segment is an error naming
the file, never a wrong row. The format imports neither Trio nor Spark.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

#: The start of every segment: a format tag.
MAGIC: Final = b"STOMPWAL1\n"
_RECORD = struct.Struct(">III")  # meta length, body length, CRC-32 of meta + body
_NAME = re.compile(r"^(\d{20})-(\d{20})\.seg$")


class WalError(Exception):
    """A segment cannot be read back as written (damaged, truncated, foreign)."""


@attrs.frozen
class Record:
    """One message as the log keeps it (the source's row, before Spark types).

    Attributes:
      destination: where the broker delivered it from.
      message_id: the broker's ``message-id`` of this delivery.
      id: the stable id (the ``bridge-id`` header when the producer set one,
        else the message id): equal for a message and its duplicates.
      headers: the message's headers (first value of a repeated name).
      body: the payload.
      received_at: when the driver received it, seconds since the epoch.
    """

    destination: str
    message_id: str
    id: str
    headers: Mapping[str, str]
    body: bytes
    received_at: float


@attrs.frozen(order=True)
class Segment:
    """A segment file and the offsets it covers: ``[start, end)``."""

    start: int
    end: int
    path: Path

    @property
    def count(self) -> int:
        return self.end - self.start


def segment_name(start: int, end: int) -> str:
    return f"{start:020d}-{end:020d}.seg"


def _encode(record: Record) -> bytes:
    fields = [record.destination, record.message_id, record.id, dict(record.headers)]
    meta = json.dumps([*fields, record.received_at], separators=(",", ":")).encode()
    crc = zlib.crc32(record.body, zlib.crc32(meta))
    return _RECORD.pack(len(meta), len(record.body), crc) + meta + record.body


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_segment(directory: Path, start: int, records: Sequence[Record]) -> Segment:
    """Write ``records`` as the segment starting at offset ``start``; durable on return.

    Raises:
      OSError: the write or the fsync failed (nothing was renamed into place).
    """
    end = start + len(records)
    final = directory / segment_name(start, end)
    temp = directory / f".tmp-{secrets.token_hex(8)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(MAGIC)
            for record in records:
                file.write(_encode(record))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    return Segment(start, end, final)


def read_segment(path: Path, skip: int = 0, count: int | None = None) -> Iterator[Record]:
    """The records of the segment at ``path``, from the ``skip``-th, at most ``count``.

    Raises:
      WalError: the file is not a whole segment (names the file).
      OSError: it cannot be opened (deleted: the batch was committed).
    """
    left = count
    with open(path, "rb") as file:
        if file.read(len(MAGIC)) != MAGIC:
            raise WalError(f"{path}: not a write-ahead log segment")
        index = 0
        while left is None or left > 0:
            head = file.read(_RECORD.size)
            if not head:
                if left is not None:
                    raise WalError(f"{path}: ends after {index} records, {left} short")
                return
            if len(head) != _RECORD.size:
                raise WalError(f"{path}: record {index} is truncated")
            meta_len, body_len, crc = _RECORD.unpack(head)
            if index < skip:
                file.seek(meta_len + body_len, os.SEEK_CUR)
                index += 1
                continue
            meta = file.read(meta_len)
            body = file.read(body_len)
            if len(body) != body_len or zlib.crc32(body, zlib.crc32(meta)) != crc:
                raise WalError(f"{path}: record {index} is damaged (CRC mismatch)")
            destination, message_id, stable_id, headers, received_at = json.loads(meta)
            yield Record(destination, message_id, stable_id, headers, body, received_at)
            index += 1
            if left is not None:
                left -= 1


class WriteAheadLog:
    """The segments of one source in one directory (under the query's checkpoint).

    Only the driver-side reader writes and deletes; executors only read.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        for leftover in directory.glob(".tmp-*"):  # a crash during a write
            leftover.unlink(missing_ok=True)

    def segments(self) -> list[Segment]:
        """The whole segments on disk, in offset order."""
        found = []
        for entry in os.scandir(self.directory):
            match = _NAME.match(entry.name)
            if match is not None:
                start, end = int(match[1]), int(match[2])
                found.append(Segment(start, end, Path(entry.path)))
        return sorted(found)

    def end(self) -> int | None:
        """The offset after the last logged message, or None when the log is empty."""
        segments = self.segments()
        return segments[-1].end if segments else None

    def append(self, start: int, records: Sequence[Record]) -> Segment:
        """Log ``records`` as offsets ``start``...; durable on return."""
        return write_segment(self.directory, start, records)

    def covering(self, start: int, end: int) -> list[tuple[Segment, int, int]]:
        """``(segment, skip, count)`` slices that hold offsets ``[start, end)`` in order.

        Raises:
          WalError: some offset of the range is in no segment (the log was
            deleted or belongs to another query).
        """
        slices = []
        at = start
        for segment in self.segments():
            if segment.end <= at or segment.start >= end:
                continue
            if segment.start > at:
                break
            stop = min(segment.end, end)
            slices.append((segment, at - segment.start, stop - at))
            at = stop
        if at < end:
            raise WalError(
                f"{self.directory}: offsets {at} to {end - 1} are in no segment "
                "(was the log deleted, or does the checkpoint belong to another query?)"
            )
        return slices

    def delete_through(self, offset: int) -> int:
        """Delete the segments that end at or before ``offset``; how many went."""
        deleted = 0
        for segment in self.segments():
            if segment.end <= offset:
                segment.path.unlink(missing_ok=True)
                deleted += 1
        if deleted:
            _fsync_dir(self.directory)
        return deleted
