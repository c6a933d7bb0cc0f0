"""Duplicate detection on ``bridge-id``: a SEND seen within the window is dropped.

Like ActiveMQ Artemis's duplicate-id cache (``_AMQ_DUPL_ID``), and with the
header the ``bridges`` stomp sink puts on every SEND: a SEND whose
``bridge-id`` the broker already accepted for the same destination, within
the window, gets its RECEIPT (once what it repeats is on disk) and is
dropped. A sender that resends after a crash, because it never saw the
RECEIPT, therefore does not make a second copy.

The window is both a count and a time (:class:`~trio_stomp.broker.Limits`
``duplicate_window`` and ``duplicate_window_seconds``): an id is remembered
until ``duplicate_window`` newer ones were accepted, or for
``duplicate_window_seconds``, whichever ends first. A repeat that comes
later is accepted as new: the window has to outlast what the sender needs to
come back (a restart), and the count has to cover what the sender may have
had in flight when it crashed.

With a data dir the ids of stored messages are kept in the store, in the
same SQLite transaction as the messages themselves (never a separate
write: a crash between the two would either repeat or lose), one row per
commit group, so the cost is one short row per fsync rather than one per
message; they survive a SIGKILL of the broker. Messages that are not
stored (topics, temporary queues, a volatile broker) have their ids in
memory only, as they do themselves.

What it does not cover: a message delivered and acknowledged before the
commit that holds it, then the broker killed before that commit, is gone
from the store with its id, while its sender saw no RECEIPT and sends it
again: the consumer gets it twice (a sink that de-duplicates by id, such as
the bridges' file sinks, still skips it). The wall clock (``time.time``)
dates the ids, so the time window also runs while the broker is stopped.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Final

from ..frame import Headers

__all__ = ["ID_HEADER", "Duplicates", "Key"]

#: The header that carries a message's stable id (set by the bridges' stomp sink).
ID_HEADER: Final = "bridge-id"
_TABLE: Final = "duplicate_ids"

#: What the window remembers of an accepted SEND: (destination, bridge-id).
Key = tuple[str, str]


class Duplicates:
    """The broker's window of accepted ``bridge-id`` values, per destination.

    Sans-IO: the clock is given (``clock``, seconds since the epoch), and the
    store calls :meth:`take` and :meth:`write` to keep the ids of stored
    messages with them (see :class:`~trio_stomp.broker._store.Store` ``attach``).

    Args:
      count: the most ids remembered (0: off; every SEND is accepted).
      seconds: how long an id is remembered.
      clock: the current time in seconds since the epoch.
    """

    def __init__(self, count: int, seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.count = count
        self.seconds = seconds
        self._clock = clock
        #: (destination, id) -> (when accepted, the store's commit holding it; 0: none
        #: or done), oldest first. The count bounds it; an id older than the time
        #: window is found stale by :meth:`check` (and dropped from disk by :meth:`take`).
        self._seen: OrderedDict[Key, tuple[float, int]] = OrderedDict()
        self._on = count > 0 and seconds > 0
        #: Repeats dropped since the broker started.
        self.dropped = 0
        self._unwritten: list[Key] = []
        self._rows: deque[tuple[int, float, int]] = deque()  # (row, when, ids) on disk
        self._stored = 0  # ids in the rows on disk
        self._next_row = 1

    def __len__(self) -> int:
        return len(self._seen)

    def check(self, destination: str, headers: Headers) -> tuple[Key | None, int | None]:
        """Look a SEND to ``destination`` with ``headers`` up.

        Returns:
          Its key (None when it has no ``bridge-id`` or the window is off: it
          is accepted, and not remembered), and None when it is new, or, for
          a repeat (counted as dropped), the store's commit that must be on
          disk before its RECEIPT (0: none).
        """
        bridge_id = headers.get(ID_HEADER)
        if not bridge_id or not self._on:
            return None, None
        key = (destination, bridge_id)
        found = self._seen.get(key)
        if found is None:
            return key, None
        accepted, ticket = found
        if accepted < self._clock() - self.seconds:
            del self._seen[key]
            return key, None
        self.dropped += 1
        return key, ticket

    def accept(self, key: Key, ticket: int) -> None:
        """``key`` was accepted; ``ticket``: the store's commit holding its message
        (0: not stored, the id is kept in memory only)."""
        seen = self._seen
        seen[key] = (self._clock(), ticket)  # (new: check() removed a stale one: it goes last)
        if ticket:
            self._unwritten.append(key)
        if len(seen) > self.count:
            seen.popitem(last=False)

    # -- with the store (worker thread for load and write) ------------------------

    def load(self, connection: sqlite3.Connection) -> None:
        """Create the table when missing and read back the ids it keeps (in the
        store's worker thread, before the broker serves)."""
        connection.execute(
            f"CREATE TABLE IF NOT EXISTS {_TABLE} (row INTEGER PRIMARY KEY, "
            "accepted REAL NOT NULL, ids TEXT NOT NULL)"
        )
        horizon = self._clock() - self.seconds
        for row, accepted, ids in connection.execute(
            f"SELECT row, accepted, ids FROM {_TABLE} ORDER BY row"
        ):
            try:
                keys = [(str(d), str(i)) for d, some in json.loads(ids).items() for i in some]
            except (ValueError, TypeError, AttributeError):  # (not ours: not trusted)
                keys = []
            self._rows.append((int(row), float(accepted), len(keys)))
            self._stored += len(keys)
            self._next_row = int(row) + 1
            if float(accepted) < horizon:
                continue
            for key in keys:
                self._seen[key] = (float(accepted), 0)
                self._seen.move_to_end(key)
        while len(self._seen) > self.count:
            self._seen.popitem(last=False)

    def take(self) -> tuple[list[tuple[int, float, list[Key]]], list[int]] | None:
        """What the next commit writes: a row of the ids accepted since the last,
        and the rows now out of the window; None when nothing (on the event loop)."""
        keys, self._unwritten = self._unwritten, []
        now = self._clock()
        rows = self._rows
        new: list[tuple[int, float, list[Key]]] = []
        if keys:
            new.append((self._next_row, now, keys))
            rows.append((self._next_row, now, len(keys)))
            self._next_row += 1
            self._stored += len(keys)
        old: list[int] = []
        horizon = now - self.seconds
        # A row goes once the ids after it fill the count window, or it is too old.
        while rows and (self._stored - rows[0][2] >= self.count or rows[0][1] < horizon):
            row, _, size = rows.popleft()
            self._stored -= size
            old.append(row)
        if not (new or old):
            return None
        return new, old

    @staticmethod
    def write(
        connection: sqlite3.Connection,
        taken: tuple[list[tuple[int, float, list[Key]]], list[int]],
    ) -> None:
        """Write what :meth:`take` gave, inside the store's transaction (worker thread):
        a row's ids as JSON, ``{destination: [id, ...]}`` (each destination once)."""
        new, old = taken
        for row, accepted, keys in new:
            grouped: dict[str, list[str]] = {}
            for destination, bridge_id in keys:
                grouped.setdefault(destination, []).append(bridge_id)
            connection.execute(
                f"INSERT INTO {_TABLE} (row, accepted, ids) VALUES (?, ?, ?)",
                (row, accepted, json.dumps(grouped)),
            )
        if old:
            connection.executemany(f"DELETE FROM {_TABLE} WHERE row = ?", ((r,) for r in old))
