"""How the durable store knows it is whole: row checksums, a tally, and the mark file.

Why the store cannot trust SQLite alone: SQLite's WAL recovery reads the log
frame by frame and stops at the first frame whose checksum fails, by design,
dropping that frame and every later one without a word. A killed broker's
WAL with a few damaged bytes therefore opens as an older, consistent
database that simply lacks the newest commits; and a database file that was
emptied, or deleted and created again, opens as a new, empty store. Both look
healthy from the inside, so the broker checks from the outside:

- Every row carries a CRC-32 of what it holds (key, id, destination,
  headers, body): a row damaged in place is found, and never delivered.
- The database keeps a *tally* (one row, with its own CRC), updated in the
  same transaction as every commit: commits so far, messages added and
  removed, the highest key added. The rows must number ``adds - removes``.
- The *mark* file, ``broker.mark`` beside the database, repeats the tally
  after every commit, where a truncated WAL cannot reach it. It is written
  after the commit's fsync and before the commit's RECEIPTs go out, in place
  (``pwrite`` of 48 bytes, alternating between two slots, each with its CRC,
  so a torn write leaves the other slot whole). It is not fsynced per commit:
  that would cost a second fsync per RECEIPT. What it holds survives a killed
  process (it is in the page cache); after a power cut it may lag behind the
  database, and that is allowed. The rule is one-sided: the database must
  have reached at least the mark's commit. A database behind its mark has
  lost commits.
- ``PRAGMA quick_check`` on open finds damaged pages of the database file.

What was lost is told from the two tallies: commits after the database's
last one are gone; the messages the mark counts and the database lacks are
lost (exactly, unless the lost commits also removed messages, which then
come back: then a range), and they are those stored from the key after the
database's highest on.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from pathlib import Path
from typing import Final

import attrs

__all__ = [
    "MARK_FILE",
    "Damage",
    "MarkFile",
    "Tally",
    "assess",
    "durable_checksum",
    "row_checksum",
]

#: The mark file's name inside the data dir.
MARK_FILE: Final = "broker.mark"
_MAGIC: Final = b"TSMARK01"
_SLOT: Final = struct.Struct("<8sQQQQI4x")  # magic, commits, adds, removes, high, crc
_SLOTS: Final = 2
_MAX_LISTED: Final = 10  # keys of damaged rows named in a report


def row_checksum(
    key: int, message_id: str, destination: str, headers: str, body: bytes, subscription: str = ""
) -> int:
    """The CRC-32 a stored row carries (``headers`` as stored: JSON).

    ``subscription`` (a durable subscription's stored key; "" for a queue's
    message, so older rows keep their checksum) counts when it is set.
    """
    head = f"{key}\0{message_id}\0{destination}\0{headers}\0"
    if subscription:
        head += f"{subscription}\0"
    return zlib.crc32(body, zlib.crc32(head.encode("utf-8", "surrogatepass")))


def durable_checksum(client_id: str, name: str, destination: str) -> int:
    """The CRC-32 a stored durable subscription carries."""
    text = f"durable\0{client_id}\0{name}\0{destination}\0"
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


@attrs.frozen
class Tally:
    """What the store has written, counted: the database's and the mark's.

    Attributes:
      commits: commits done (each one fsync); never goes back.
      adds: messages written, in all.
      removes: messages deleted, in all.
      high: the highest key written; keys only grow.
    """

    commits: int = 0
    adds: int = 0
    removes: int = 0
    high: int = 0

    @property
    def held(self) -> int:
        """How many messages the store holds after these commits."""
        return self.adds - self.removes

    def checksum(self) -> int:
        """The CRC-32 kept beside the tally's row in the database."""
        return zlib.crc32(_SLOT.pack(_MAGIC, *self.fields(), 0))

    def fields(self) -> tuple[int, int, int, int]:
        return (self.commits, self.adds, self.removes, self.high)


@attrs.frozen
class Damage:
    """What the broker found wrong with its store, and what that cost.

    Attributes:
      findings: one sentence per problem found.
      lost: messages lost, at least.
      lost_most: messages lost, at most (equal to ``lost`` when exact);
        None when it cannot be told (no mark to compare with).
      from_key: the lost messages were stored from this key on (0: no
        such range; damaged rows are named in ``findings``).
      redelivered: messages that were consumed but come back (at most).
    """

    findings: tuple[str, ...]
    lost: int = 0
    lost_most: int | None = 0
    from_key: int = 0
    redelivered: int = 0

    def describe(self) -> str:
        """One line: how many messages were lost, from where, and why."""
        if self.lost_most is None:
            count = "an unknown number of message(s) lost"
            if self.lost:
                count += f" (at least {self.lost})"
        elif self.lost == self.lost_most:
            count = f"{self.lost} message(s) lost"
        else:
            count = f"{self.lost} to {self.lost_most} message(s) lost"
        if self.from_key and self.lost_most != 0:
            count += f" (those stored from key {self.from_key} on)"
        if self.redelivered:
            count += f", up to {self.redelivered} consumed message(s) delivered again"
        return f"{count}: {'; '.join(self.findings)}"


def assess(
    database: Tally,
    rows: int,
    damaged: list[int],
    mark: Tally | None,
    *,
    new: bool,
    mark_problem: str | None = None,
    pages: tuple[str, ...] = (),
    damaged_subscriptions: int = 0,
) -> Damage | None:
    """Compare what the database holds with what was written; None when it is whole.

    Args:
      database: the database's tally (a fresh one when ``new``).
      rows: the rows it holds, damaged ones included.
      damaged: the keys of rows whose checksum failed (or that cannot be read).
      mark: the mark file's tally; None when there is no mark file.
      new: the database had no store in it (a new data dir, or a file that
        was emptied or deleted).
      mark_problem: the mark file exists but no slot of it can be read.
      pages: what ``PRAGMA quick_check`` reported, when not "ok".
      damaged_subscriptions: durable subscriptions whose checksum failed
        (a subscription whose messages remain is rebuilt from them; one that
        held none is gone).
    """
    findings: list[str] = [f"quick_check: {line}" for line in pages]
    if damaged_subscriptions:
        findings.append(
            f"{damaged_subscriptions} durable subscription record(s) damaged (checksum failed)"
        )
    lost = lost_most = from_key = redelivered = 0
    known = not pages
    if damaged:
        listed = ", ".join(str(key) for key in damaged[:_MAX_LISTED])
        more = ", ..." if len(damaged) > _MAX_LISTED else ""
        findings.append(
            f"{len(damaged)} stored message(s) damaged (checksum failed; keys {listed}{more})"
        )
        lost = lost_most = len(damaged)
    if mark_problem is not None and database.commits:
        findings.append(f"{MARK_FILE} is unreadable ({mark_problem})")
        known = False
    elif mark is None and database.commits:
        findings.append(f"{MARK_FILE} is missing (the database has {database.commits} commit(s))")
        known = False
    elif mark is not None and mark.commits > database.commits:
        gone_adds = mark.adds - database.adds
        gone_removes = mark.removes - database.removes
        back = max(0, min(gone_removes, database.held))
        lost += max(0, mark.held - database.held)
        lost_most += max(0, min(gone_adds, mark.held, mark.held - database.held + back))
        from_key = database.high + 1
        redelivered = back
        where = "the database is empty (new)" if new else "the database ends at commit"
        last = "" if new else f" {database.commits}"
        findings.append(
            f"{where}{last} but {MARK_FILE} says commit {mark.commits} was written "
            f"(it held {mark.held} message(s), it holds {database.held})"
        )
    elif mark is not None and mark.commits == database.commits and mark != database:
        findings.append(
            f"the database's tally {database.fields()} differs from {MARK_FILE}'s "
            f"{mark.fields()} at the same commit"
        )
        lost += max(0, mark.held - database.held)
        lost_most += max(0, mark.held - database.held)
    if rows != database.held and not new:
        findings.append(f"the database counts {database.held} message(s) but holds {rows}")
        lost += max(0, database.held - rows)
        lost_most += max(0, database.held - rows)
    if not findings:
        return None
    most = max(lost, lost_most) if known else None
    return Damage(tuple(findings), lost, most, from_key, redelivered)


class MarkFile:
    """The open mark file (see the module's docstring); used from one thread."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @staticmethod
    def read(path: Path) -> tuple[Tally | None, str | None]:
        """The newest whole slot's tally, or ``(None, None)`` without a mark file.

        Returns ``(None, problem)`` when the file exists but no slot is whole.

        Raises:
          OSError: it cannot be read (a link, a directory, no permission).
        """
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None, None
        try:
            data = os.pread(fd, _SLOT.size * _SLOTS, 0)
        finally:
            os.close(fd)
        if not data:
            return None, "empty"
        found = [
            tally
            for index in range(_SLOTS)
            if (tally := _unpack(data[index * _SLOT.size : (index + 1) * _SLOT.size]))
        ]
        if not found:
            return None, "no whole slot"
        return max(found, key=lambda t: t.commits), None

    @classmethod
    def create(cls, path: Path, tally: Tally) -> MarkFile:
        """Open (or create) the mark file, write ``tally`` to every slot, fsync it."""
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        mark = cls(path, fd)
        try:
            os.pwrite(fd, _pack(tally) * _SLOTS, 0)
            os.fsync(fd)
            if created:
                _sync_directory(path.parent)
        except BaseException:
            mark.close()
            raise
        return mark

    def write(self, tally: Tally) -> None:
        """Overwrite the slot of ``tally.commits`` (no fsync; see the module)."""
        offset = (tally.commits % _SLOTS) * _SLOT.size
        if os.pwrite(self._fd, _pack(tally), offset) != _SLOT.size:
            raise OSError(errno.EIO, f"short write to {self.path}")

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def _pack(tally: Tally) -> bytes:
    return _SLOT.pack(_MAGIC, *tally.fields(), tally.checksum())


def _unpack(data: bytes) -> Tally | None:
    if len(data) != _SLOT.size:
        return None
    magic, commits, adds, removes, high, crc = _SLOT.unpack(data)
    tally = Tally(commits, adds, removes, high)
    return tally if magic == _MAGIC and crc == tally.checksum() else None


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
