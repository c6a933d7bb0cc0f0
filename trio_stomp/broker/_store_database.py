"""The durable store's database: SQLite, as the store's worker thread uses it.

Why SQLite, and how:

- It is a well-kept store with a known crash story, in the standard library.
  One file, ``DATA_DIR/broker.sqlite3``, in WAL mode with
  ``synchronous=FULL``: every commit appends to the write-ahead log and
  fsyncs it before it returns, so a committed message survives a killed
  process and a power cut (``NORMAL`` would fsync only at checkpoints:
  safe against a killed process, not against a power cut, and the RECEIPT
  promises the message is on disk).
- ``locking_mode=EXCLUSIVE``: the broker holds the database's lock for as
  long as it runs, so a second broker on the same data dir fails at start
  instead of delivering the same messages twice.
- Every method of :class:`Database` runs in the store's one worker thread,
  never on the event loop (:mod:`._store` calls it).

A damaged store is never silent: each row carries a checksum, the database
keeps a tally of its commits, and ``DATA_DIR/broker.mark`` repeats it where a
truncated WAL cannot reach (:mod:`._store_mark` says why and how). A store
that lost or damaged messages since the broker last wrote it is refused with
:class:`StoreDamaged`, saying how many and from which key, unless the damage
is accepted (``accept_damage``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Protocol

from ._message import Message, message_size
from ._store_durable import (
    DurableChanges,
    Restored,
    durable_key,
    read_durables,
    restored,
    write_durables,
)
from ._store_mark import MARK_FILE, Damage, MarkFile, Tally, assess, row_checksum

__all__ = ["STORE_FILE", "Database", "StoreDamaged", "StoreError", "StoreInUse"]

log = logging.getLogger("trio_stomp.broker")

#: The store's file name inside the data dir.
STORE_FILE: Final = "broker.sqlite3"
_SCHEMA_VERSION: Final = 3


class StoreError(Exception):
    """The broker's data dir cannot be opened or written; the message names the file."""


class StoreInUse(StoreError):
    """The store is locked: a broker (or a command working on it) is running on the data dir."""


class StoreDamaged(StoreError):
    """The store is not what the broker last wrote: messages were lost or damaged.

    Raised when the store opens, unless the damage is accepted
    (``accept_damage=True``). The broker wrote nothing then: started again,
    it finds the same. The write-ahead log as it was found (its frames after
    the damaged one hold what was lost) is kept beside the store as
    ``broker.sqlite3-wal.refused``. See :mod:`._store_mark`.

    Attributes:
      path: the store's file.
      lost: messages lost, at least.
      lost_most: messages lost, at most (equal to ``lost`` when exact);
        None when it cannot be told (no mark to compare with).
      from_key: the lost messages were stored from this key on (0: no such
        range; damaged rows are named in :attr:`report`).
      report: what was found and what it cost, one line.
    """

    def __init__(self, path: Path, damage: Damage) -> None:
        self.path = path
        self.lost = damage.lost
        self.lost_most = damage.lost_most
        self.from_key = damage.from_key
        self.report = damage.describe()
        super().__init__(
            f"broker store {os.fspath(path)!r} is damaged: {self.report}. Refused: "
            "accept the damage (accept_damage=True, trio-stomp broker --accept-damage) "
            "to start with what is left"
        )


class Companion(Protocol):
    """What is written with each group, in its transaction (the ids of :mod:`._dedup`)."""

    def load(self, connection: sqlite3.Connection) -> None:
        """Read (and create) its part of the store; worker thread, before any group."""

    def take(self) -> object | None:
        """What the group now starting writes; None: nothing (event loop)."""

    def write(self, connection: sqlite3.Connection, taken: Any) -> None:
        """Write ``taken`` inside the group's transaction (worker thread)."""


class Database:
    """The SQLite connection and the mark file; every method runs in the store's worker thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connection = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=0
        )
        self.connection.create_function("checksum_of", 5, row_checksum, deterministic=True)
        #: The tally of the last commit (see :mod:`._store_mark`).
        self.tally = Tally()
        #: What was found wrong at open and accepted; None when the store was whole.
        self.damage: Damage | None = None
        self._mark: MarkFile | None = None

    @classmethod
    def open(cls, path: Path, accept_damage: bool = False) -> tuple[Database, Restored, int]:
        """Open (or create) the store; return it, what it holds in order, and the next key.

        Raises:
          StoreDamaged: the store is damaged (see :mod:`._store_mark`) and
            ``accept_damage`` is False. The broker wrote nothing, so the next
            start finds the same; the write-ahead log as it was found is kept
            as ``broker.sqlite3-wal.refused`` (SQLite folds its whole part into
            the database and removes it when the refused store is closed).
        """
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        wal = path.with_name(f"{path.name}-wal")
        found = path.with_name(f"{path.name}-wal.found")
        with contextlib.suppress(FileNotFoundError):
            found.unlink()  # (left by a start that was killed)
        try:
            os.link(wal, found, follow_symlinks=False)
        except OSError:  # (no WAL: a clean stop; or no hard links here)
            pass
        database = cls(path)
        try:
            try:
                messages = database.prepare(accept_damage)
                database._mark = MarkFile.create(path.with_name(MARK_FILE), database.tally)
            except BaseException:
                database.close()
                raise
        except StoreDamaged:
            with contextlib.suppress(FileNotFoundError):
                found.replace(path.with_name(f"{path.name}-wal.refused"))
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                found.unlink()
        return database, messages, database.tally.high + 1

    def prepare(self, accept_damage: bool = False) -> Restored:
        execute = self.connection.execute
        execute("PRAGMA locking_mode=EXCLUSIVE")
        mode = execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot use WAL mode (journal_mode is {mode})")
        execute("PRAGMA synchronous=FULL")
        # A write now takes the exclusive lock (held until close) and proves
        # the file is writable before any client is told anything.
        execute("BEGIN IMMEDIATE")
        try:
            messages = self._check(accept_damage)
            execute("COMMIT")
        except BaseException:
            execute("ROLLBACK")  # (a refused store is left as it was found)
            raise
        return messages

    def _check(self, accept_damage: bool) -> Restored:
        """Create or upgrade the schema, read every row, compare the tallies."""
        execute = self.connection.execute
        version = execute("PRAGMA user_version").fetchone()[0]
        if version > _SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"written by a newer trio-stomp (schema {version}, this one reads "
                f"{_SCHEMA_VERSION})"
            )
        tables = {name for (name,) in execute("SELECT name FROM sqlite_master")}
        new = "messages" not in tables
        pages = () if new else _quick_check(self.connection)
        if new:
            execute(
                "CREATE TABLE messages (key INTEGER PRIMARY KEY, id TEXT NOT NULL, "
                "destination TEXT NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL, "
                "checksum INTEGER NOT NULL)"
            )
        elif version < 2:  # (schema 1: rows without checksums, no tally)
            execute("ALTER TABLE messages ADD COLUMN checksum INTEGER NOT NULL DEFAULT 0")
            execute(
                "UPDATE messages SET checksum = checksum_of(key, id, destination, headers, body)"
            )
        if not new and version < 3:  # (schema 2: no durable subscriptions)
            execute("ALTER TABLE messages ADD COLUMN subscription TEXT NOT NULL DEFAULT ''")
        if new:
            execute("ALTER TABLE messages ADD COLUMN subscription TEXT NOT NULL DEFAULT ''")
        if "durables" not in tables:
            execute(
                "CREATE TABLE durables (client_id TEXT NOT NULL, name TEXT NOT NULL, "
                "destination TEXT NOT NULL, checksum INTEGER NOT NULL, "
                "PRIMARY KEY (client_id, name))"
            )
        if "tally" not in tables:
            execute(
                "CREATE TABLE tally (id INTEGER PRIMARY KEY CHECK (id = 1), "
                "commits INTEGER NOT NULL, adds INTEGER NOT NULL, removes INTEGER NOT NULL, "
                "high INTEGER NOT NULL, checksum INTEGER NOT NULL)"
            )
            count, high = execute("SELECT COUNT(*), COALESCE(MAX(key), 0) FROM messages").fetchone()
            execute("INSERT INTO tally VALUES (1, 0, 0, 0, 0, 0)")
            self._write_tally(Tally(0, count, 0, high))
        execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        messages, damaged = self._read_rows()
        durables, damaged_durables = read_durables(self.connection)
        rows = len(messages) + len(damaged)
        mark, problem = MarkFile.read(self.path.with_name(MARK_FILE))
        row = execute("SELECT commits, adds, removes, high, checksum FROM tally").fetchone()
        tally = Tally(*row[:4])
        whole = row[4] == tally.checksum()
        if not whole:  # (then only the mark can tell what the database held)
            last = [message.key for message, _ in messages[-1:]]
            tally = Tally(0, rows, 0, max([tally.high, *damaged, *last]))
        damage = assess(
            tally,
            rows,
            damaged,
            mark,
            new=new,
            mark_problem=problem,
            pages=pages,
            damaged_subscriptions=len(damaged_durables),
        )
        if not whole:
            first = "the database's own tally is damaged"
            findings = (first, *(damage.findings if damage is not None else ()))
            damage = Damage(findings, 0 if damage is None else damage.lost, None)
        self.tally = tally
        if damage is None:
            return restored(messages, durables)
        if not accept_damage:
            raise StoreDamaged(self.path, damage)
        # Accepted: drop the damaged rows, and count on from past everything the
        # mark or the database ever had (the new tally is ahead of both).
        self.connection.executemany("DELETE FROM messages WHERE key = ?", ((k,) for k in damaged))
        self.connection.executemany(
            "DELETE FROM durables WHERE client_id = ? AND name = ?", damaged_durables
        )
        newest = max(tally.commits, mark.commits if mark is not None else 0)
        high = max(tally.high, mark.high if mark is not None else 0)
        self._write_tally(Tally(newest + 1, len(messages), 0, high))
        self.damage = damage
        return restored(messages, durables)

    def _read_rows(self) -> tuple[list[tuple[Message, str]], list[int]]:
        """Every row whose checksum holds, in order, with the durable subscription it
        belongs to ("" for a queue's); and the keys of those that fail."""
        messages: list[tuple[Message, str]] = []
        damaged: list[int] = []
        query = (
            "SELECT key, id, destination, headers, body, checksum, subscription "
            "FROM messages ORDER BY key"
        )
        for row in self.connection.execute(query):
            key, message_id, destination, headers_json, body, checksum, owner = row
            try:
                if (
                    row_checksum(key, message_id, destination, headers_json, body, owner)
                    != checksum
                ):
                    raise ValueError("checksum")
                headers = tuple((str(n), str(v)) for n, v in json.loads(headers_json))
                if owner:
                    durable_key(owner)
            except (ValueError, TypeError):  # (also a row that is not ours)
                damaged.append(key)
                continue
            size = message_size(destination, headers, body)
            message = Message(message_id, destination, headers, bytes(body), size, True, key)
            messages.append((message, owner))
        return messages, damaged

    def _write_tally(self, tally: Tally) -> None:
        self.connection.execute(
            "UPDATE tally SET commits = ?, adds = ?, removes = ?, high = ?, checksum = ?",
            (*tally.fields(), tally.checksum()),
        )
        self.tally = tally

    def commit(
        self,
        adds: Iterable[Message],
        removes: Iterable[int],
        durables: DurableChanges | None = None,
        extras: Iterable[tuple[Companion, object]] = (),
    ) -> None:
        """Write one group: insert ``adds``, delete ``removes``, write the durable
        subscriptions' changes and the companions' ``extras``; one fsync; then the mark."""
        execute = self.connection.execute
        owners = durables.owners if durables is not None else {}
        rows = [
            (
                m.key,
                m.message_id,
                m.destination,
                headers,
                m.body,
                row_checksum(m.key, m.message_id, m.destination, headers, m.body, owner),
                owner,
            )
            for m in adds
            for headers, owner in ((json.dumps(m.headers), owners.get(m.key, "")),)
        ]
        before = self.tally
        execute("BEGIN")
        try:
            if durables is not None:
                write_durables(self.connection, durables)
            for companion, taken in extras:
                companion.write(self.connection, taken)
            self.connection.executemany(
                "INSERT INTO messages (key, id, destination, headers, body, checksum, "
                "subscription) VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            deleted = self.connection.executemany(
                "DELETE FROM messages WHERE key = ?", ((key,) for key in removes)
            ).rowcount
            high = max([before.high, *(row[0] for row in rows)])
            self._write_tally(
                Tally(before.commits + 1, before.adds + len(rows), before.removes + deleted, high)
            )
            execute("COMMIT")
        except BaseException:
            self.tally = before
            if self.connection.in_transaction:
                execute("ROLLBACK")
            raise
        if self._mark is not None:
            self._mark.write(self.tally)

    def close(self) -> None:
        mark, self._mark = self._mark, None
        try:
            if mark is not None:
                try:
                    mark.sync()
                except OSError as exc:  # (harmless: the mark may lag behind the database)
                    log.warning("broker store %s: cannot fsync %s: %s", self.path, mark.path, exc)
                mark.close()
        finally:
            self.connection.close()


def _quick_check(connection: sqlite3.Connection) -> tuple[str, ...]:
    """What ``PRAGMA quick_check`` found wrong with the file's pages (nothing: ``()``)."""
    lines = tuple(str(line) for (line,) in connection.execute("PRAGMA quick_check(10)"))
    return () if lines == ("ok",) else lines
