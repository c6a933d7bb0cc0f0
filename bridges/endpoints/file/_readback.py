"""The JSON-lines sink's read-back: the ids of the last lines it wrote, to skip a repeat.

Effectively once needs the record of what was written to be the written
data itself (DESIGN.md, "Delivery semantics"): a separate table of ids
beside the files could be fsynced a moment before or after them and say
the wrong thing after a crash. So, when the sink opens, it reads its own
output back, newest file first and each file from its end, and keeps the
ids of the last ``window`` lines (:class:`RecentIds`); while it runs, it
adds the ids of each batch once that batch is fsynced. A message whose id
is among them is not written again.

Reading from the end: each file is mapped (``mmap``) and its lines are
found backwards with ``rfind``, so the cost is that of the last ``window``
lines, not of the files. Only the start of a line is decoded (the id is the
first field the sink writes, and an id longer than :data:`MAX_ID_BYTES` is
not looked for). A file that is a link, not a regular file, or not of the
record format is skipped (its lines count for nothing): the read-back can
only make the window shorter, never make the sink skip a message whose id
it did not find.
"""

from __future__ import annotations

import collections
import json
import logging
import mmap
import os
from collections.abc import Iterable
from typing import Final

from ..._fs import Refused, open_regular

log = logging.getLogger("bridges.file")

#: Bytes of a line's start decoded to find its id: longer ids are not looked for.
MAX_ID_BYTES: Final = 4096
_ID_START: Final = b'{"id":'
_decode = json.JSONDecoder().raw_decode


class RecentIds:
    """The ids of the last ``window`` messages written: a set bounded by first-written order.

    A set for the lookups and a deque for the order, so that a batch of new
    ids goes in with two C calls (:meth:`add_new`): this runs for every batch.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self._ids: set[str] = set()
        self._order: collections.deque[str] = collections.deque()

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def none_of(self, ids: list[str]) -> bool:
        """Whether ``ids`` are all non-empty, different, and none of them kept."""
        return "" not in ids and self._ids.isdisjoint(ids) and len(set(ids)) == len(ids)

    def add_new(self, ids: list[str]) -> None:
        """Remember ``ids``, for which :meth:`none_of` was true, as the newest."""
        self._ids.update(ids)
        self._order.extend(ids)
        self._trim()

    def add(self, ids: Iterable[str]) -> None:
        """Remember ``ids`` (empty or known ones left out) as the newest."""
        kept, order = self._ids, self._order
        for message_id in ids:
            if message_id and message_id not in kept:
                kept.add(message_id)
                order.append(message_id)
        self._trim()

    def _trim(self) -> None:
        """Forget the oldest beyond the window."""
        excess = len(self._order) - self.window
        if excess > 0:
            popleft, discard = self._order.popleft, self._ids.discard
            for _ in range(excess):
                discard(popleft())


def read_back(dir_fd: int, names: Iterable[str], window: int) -> RecentIds:
    """The ids of the last ``window`` lines of the files ``names`` (newest first) in ``dir_fd``."""
    found: list[str] = []  # newest first
    for name in names:
        if len(found) >= window:
            break
        try:
            fd, info = open_regular(dir_fd, name)
        except Refused as exc:
            log.warning("%s is %s; not read back", name, exc.strerror or "refused")
            continue
        except FileNotFoundError:
            continue
        try:
            if info.st_size:
                with mmap.mmap(fd, info.st_size, access=mmap.ACCESS_READ) as mapped:
                    found.extend(_last_ids(mapped, window - len(found)))
        finally:
            os.close(fd)
    recent = RecentIds(window)
    recent.add(reversed(found))
    return recent


def _last_ids(data: mmap.mmap, most: int) -> list[str]:
    """The ids of the last ``most`` complete lines of ``data``, newest first."""
    ids: list[str] = []
    end = data.rfind(b"\n") + 1  # (a last line without its newline is not complete)
    while end > 0 and len(ids) < most:
        start = data.rfind(b"\n", 0, end - 1) + 1
        head = data[start : min(end - 1, start + MAX_ID_BYTES)]
        end = start
        if not head.startswith(_ID_START):
            continue
        try:
            value, _ = _decode(head[len(_ID_START) :].decode("utf-8", "replace"))
        except ValueError:
            continue
        if isinstance(value, str) and value:
            ids.append(value)
    return ids
