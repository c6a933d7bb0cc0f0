"""Duplicate detection on ``bridge-id``: a SEND seen within the window is dropped.

Like ActiveMQ Artemis's duplicate-id cache (``_AMQ_DUPL_ID``), and with the
header the ``bridges`` stomp sink puts on every SEND: a SEND whose
``bridge-id`` the broker already accepted for the same destination, within
the window, gets its RECEIPT (once what it repeats is on disk) and is
dropped. A sender that resends after a crash, because it never saw the
RECEIPT, therefore does not make a second copy.

Off unless asked for (:class:`~trio_stomp.broker.Limits`
``duplicate_window``, 0 by default): an application that sends a second,
different message under an id it used before (a message that passed through a
bridge and is sent again to retry it) would lose it. ``bridges`` turns it on
for its embedded broker, whose senders are its own sinks with the sources'
namespaced ids.

The window is kept **per destination**: each destination remembers its last
``duplicate_window`` ids, for at most ``duplicate_window_seconds``, so ids
sent to one destination never push another's out. Its memory is bounded by
``duplicate_window_bytes`` over all destinations (each id is accounted at
its own size plus a fixed cost per entry, each destination at its name's
size plus a fixed cost); past it, the oldest id of the destination holding
the most bytes goes, so a destination flooded with ids flushes its own
first. An id longer than ``max_duplicate_id_length`` bytes of UTF-8 is
remembered (in memory and on disk) as its BLAKE2b-256 digest: the id stays
exact for de-duplication (a collision is as unlikely as a digest
collision), and its cost is bounded; a SEND is never refused for its id.

With a data dir the ids of stored messages are kept in the store, in the
same SQLite transaction as the messages themselves (never a separate
write: a crash between the two would either repeat or lose), one row per
commit group, so the cost is one short row per fsync rather than one per
message; they survive a SIGKILL of the broker. A row is deleted (in a
later commit) once none of its ids is still in the window. Messages that
are not stored (topics, temporary queues, a volatile broker) have their ids
in memory only, as they do themselves.

Every drop is counted (:attr:`Duplicates.dropped`, per destination in
:attr:`Duplicates.dropped_by_destination`) and logged at INFO, sampled: the
first drop to a destination, then at most one line per ``log_every``
seconds for it, with the count since the last line.

What it does not cover: a message delivered and acknowledged before the
commit that holds it, then the broker killed before that commit, is gone
from the store with its id, while its sender saw no RECEIPT and sends it
again: the consumer gets it twice (a sink that de-duplicates by id, such as
the bridges' file sinks, still skips it). The wall clock (``time.time``)
dates the ids, so the time window also runs while the broker is stopped.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import sqlite3
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from ..frame import Headers

__all__ = ["ENTRY_COST", "ID_HEADER", "OTHER_DESTINATIONS", "Duplicates", "Key"]

log = logging.getLogger("trio_stomp.broker")

#: The header that carries a message's stable id (set by the bridges' stomp sink).
ID_HEADER: Final = "bridge-id"
_TABLE: Final = "duplicate_ids"
#: What one remembered id costs beside its text (its entry object, its places in the
#: destination's and the window's ordered dicts, the heap of sizes), bytes: measured with
#: tracemalloc on CPython 3.11, 280 to 385 from 2,000 to 100,000 ids (the dicts grow in
#: steps); rounded up.
ENTRY_COST: Final = 400
#: What one destination costs beside its name (its ordered dict, counters), bytes.
_DESTINATION_COST: Final = 600
#: The most destinations whose drops are counted by name; the others are counted together
#: under this name.
_NAMED_DROPS: Final = 1000
OTHER_DESTINATIONS: Final = "(other destinations)"
#: How much of an id a log line shows.
_LOGGED_ID: Final = 200

#: What the window remembers of an accepted SEND: (destination, bridge-id, or its digest).
Key = tuple[str, str]


def window_id(bridge_id: str, max_length: int) -> str:
    """What the window keeps for ``bridge-id``: itself, or ``#`` and its BLAKE2b-256 digest
    when it is longer than ``max_length`` bytes of UTF-8 (the digest form is 65 bytes)."""
    if len(bridge_id) * 4 <= max_length:
        return bridge_id
    encoded = bridge_id.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_length:
        return bridge_id
    return "#" + hashlib.blake2b(encoded, digest_size=32).hexdigest()


class _Entry:
    __slots__ = ("accepted", "alive", "destination", "id", "row", "size", "ticket")

    def __init__(self, destination: str, id_: str, accepted: float, ticket: int) -> None:
        self.destination = destination
        self.id = id_
        self.accepted = accepted
        self.ticket = ticket  # the store's commit holding its message (0: none or done)
        self.row = 0  # the store's row holding the id (0: not written)
        self.alive = True
        self.size = sys.getsizeof(id_) + ENTRY_COST


class _Destination:
    __slots__ = ("bytes", "ids", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.ids: OrderedDict[str, _Entry] = OrderedDict()  # oldest first
        self.bytes = sys.getsizeof(name) + _DESTINATION_COST


class _Drops:
    __slots__ = ("count", "logged_at", "unlogged")

    def __init__(self) -> None:
        self.count = 0
        self.logged_at: float | None = None
        self.unlogged = 0


class Duplicates:
    """The broker's window of accepted ``bridge-id`` values, per destination.

    Sans-IO: the clock is given (``clock``, seconds since the epoch), and the
    store calls :meth:`take` and :meth:`write` to keep the ids of stored
    messages with them (see :class:`~trio_stomp.broker._store.Store` ``attach``).

    Args:
      count: the most ids remembered per destination (0: off; every SEND is accepted).
      seconds: how long an id is remembered.
      clock: the current time in seconds since the epoch.
      max_bytes: the bound on the window's accounted memory, all destinations together.
      max_id_length: ids longer than this (bytes of UTF-8) are kept as their digest.
      log_every: after the first drop to a destination is logged, at most one line per
        this many seconds for it.
    """

    def __init__(
        self,
        count: int,
        seconds: float,
        clock: Callable[[], float] = time.time,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        max_id_length: int = 256,
        log_every: float = 60.0,
    ) -> None:
        self.count = count
        self.seconds = seconds
        self.max_bytes = max_bytes
        self.max_id_length = max_id_length
        self.log_every = log_every
        self._clock = clock
        self._on = count > 0 and seconds > 0
        self._destinations: dict[str, _Destination] = {}
        self._order: OrderedDict[_Entry, None] = OrderedDict()  # every entry, oldest first
        self._largest: list[tuple[int, str]] = []  # (-bytes, destination), some stale
        #: The window's accounted memory, bytes (at most ``max_bytes``).
        self.bytes = 0
        #: Repeats dropped since the broker started.
        self.dropped = 0
        #: Repeats dropped, per destination (at most 1,000 names; the rest together under
        #: :data:`OTHER_DESTINATIONS`).
        self.dropped_by_destination: dict[str, int] = {}
        self._drops: dict[str, _Drops] = {}
        self._unwritten: list[_Entry] = []
        self._live: dict[int, int] = {}  # row on disk -> its ids still in the window
        self._dead_rows: list[int] = []  # rows on disk to delete with the next commit
        self._next_row = 1

    def __len__(self) -> int:
        return len(self._order)

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
        key = (destination, window_id(bridge_id, self.max_id_length))
        place = self._destinations.get(destination)
        found = None if place is None else place.ids.get(key[1])
        if found is None:
            return key, None
        now = self._clock()
        if found.accepted < now - self.seconds:
            self._forget(found)
            return key, None
        self._count_drop(destination, bridge_id, now - found.accepted, now)
        return key, found.ticket

    def accept(self, key: Key, ticket: int) -> None:
        """``key`` was accepted; ``ticket``: the store's commit holding its message
        (0: not stored, the id is kept in memory only)."""
        now = self._clock()
        entry = self._add(key, now, ticket)
        if ticket:
            self._unwritten.append(entry)
        self._expire(now)

    # -- the window's bounds ----------------------------------------------------------

    def _add(self, key: Key, accepted: float, ticket: int) -> _Entry:
        destination, id_ = key
        place = self._destinations.get(destination)
        if place is not None and (old := place.ids.get(id_)) is not None:
            self._forget(old)  # (a stale one check() found, or one read back twice)
            place = self._destinations.get(destination)
        if place is None:
            place = self._destinations[destination] = _Destination(destination)
            self.bytes += place.bytes
        entry = _Entry(destination, id_, accepted, ticket)
        place.ids[id_] = entry
        place.bytes += entry.size
        self.bytes += entry.size
        self._order[entry] = None
        heapq.heappush(self._largest, (-place.bytes, destination))
        if len(place.ids) > self.count:
            self._forget(next(iter(place.ids.values())))
        self._shrink()
        return entry

    def _forget(self, entry: _Entry) -> None:
        if not entry.alive:
            return
        entry.alive = False
        place = self._destinations[entry.destination]
        del place.ids[entry.id]
        del self._order[entry]
        place.bytes -= entry.size
        self.bytes -= entry.size
        if not place.ids:
            del self._destinations[entry.destination]
            self.bytes -= place.bytes
        if entry.row:
            left = self._live[entry.row] - 1
            if left:
                self._live[entry.row] = left
            else:
                del self._live[entry.row]
                self._dead_rows.append(entry.row)

    def _shrink(self) -> None:
        """Past ``max_bytes``: the oldest ids of the destination holding the most go."""
        while self.bytes > self.max_bytes and self._order:
            place = self._biggest()
            self._forget(next(iter(place.ids.values())))
            if place.ids:
                heapq.heappush(self._largest, (-place.bytes, place.name))
        if len(self._largest) > 4 * len(self._destinations) + 1024:
            self._rebuild()

    def _biggest(self) -> _Destination:
        heap = self._largest
        while True:
            if not heap:
                self._rebuild()
            size, name = heap[0]
            place = self._destinations.get(name)
            if place is not None and place.bytes == -size:
                return place
            heapq.heappop(heap)

    def _rebuild(self) -> None:
        self._largest = [(-place.bytes, name) for name, place in self._destinations.items()]
        heapq.heapify(self._largest)

    def _expire(self, now: float) -> None:
        horizon = now - self.seconds
        order = self._order
        while order:
            oldest = next(iter(order))
            if oldest.accepted >= horizon:
                break
            self._forget(oldest)

    # -- what it dropped --------------------------------------------------------------

    def _count_drop(self, destination: str, bridge_id: str, age: float, now: float) -> None:
        self.dropped += 1
        named = self.dropped_by_destination
        bucket = destination
        if bucket not in named and len(named) >= _NAMED_DROPS:
            bucket = OTHER_DESTINATIONS
        named[bucket] = named.get(bucket, 0) + 1
        drops = self._drops.get(bucket)
        if drops is None:
            drops = self._drops[bucket] = _Drops()
        drops.count += 1
        drops.unlogged += 1
        if drops.logged_at is not None and now - drops.logged_at < self.log_every:
            return
        shown = bridge_id if len(bridge_id) <= _LOGGED_ID else bridge_id[:_LOGGED_ID] + "..."
        # %r: a name or id from a peer is shown escaped (no control character reaches a
        # terminal or a log line raw).
        log.info(
            "duplicate window: dropped a SEND to %r repeating bridge-id %r (accepted %.1f s "
            "ago): %d dropped to it since the last line, %d in all",
            destination,
            shown,
            age,
            drops.unlogged,
            drops.count,
        )
        drops.logged_at = now
        drops.unlogged = 0

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
            row, accepted = int(row), float(accepted)
            self._next_row = row + 1
            try:
                keys = [(str(d), str(i)) for d, some in json.loads(ids).items() for i in some]
            except (ValueError, TypeError, AttributeError):  # (not ours: not trusted)
                keys = []
            if accepted < horizon or not keys:
                self._dead_rows.append(row)
                continue
            self._live[row] = 0
            for destination, id_ in keys:
                entry = self._add((destination, window_id(id_, self.max_id_length)), accepted, 0)
                if entry.alive:
                    entry.row = row
                    self._live[row] += 1
            if not self._live[row]:
                del self._live[row]
                self._dead_rows.append(row)

    def take(self) -> tuple[list[tuple[int, float, list[Key]]], list[int]] | None:
        """What the next commit writes: a row of the ids accepted since the last,
        and the rows now out of the window; None when nothing (on the event loop)."""
        now = self._clock()
        self._expire(now)
        entries = [entry for entry in self._unwritten if entry.alive and not entry.row]
        self._unwritten = []
        new: list[tuple[int, float, list[Key]]] = []
        if entries:
            row = self._next_row
            self._next_row += 1
            for entry in entries:
                entry.row = row
            self._live[row] = len(entries)
            new.append((row, now, [(entry.destination, entry.id) for entry in entries]))
        old, self._dead_rows = self._dead_rows, []
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
