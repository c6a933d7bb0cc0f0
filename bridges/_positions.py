"""A durable position for sources whose messages carry an offset: :class:`Positions`.

A source that reads a log (a tailed file, an outbox table, a stream with
offsets) hands out items in offset order, and the sink acks them in any
order. What it may resume from after a crash is the offset below which
*every* item is acked, so a restart repeats only what was in flight. This
keeps that offset, and saves it as an ack moves it:

- :meth:`Positions.take` when an item ``[start, end)`` is handed out (False:
  it was acked before a restart, beyond the saved offset: settle it, do not
  hand it out again);
- :meth:`Positions.ack` when its envelope is acked, :meth:`Positions.skip`
  for an item that can never be delivered (unreadable: logged, counted as
  done), nothing for a nack: the item stays open and the source hands it
  out again (its offset cannot pass it until it is acked);
- :meth:`Positions.save_loop` in the source's nursery writes the position
  after each burst of acks, at most once per burst and never on the event
  loop: a fresh temporary file, fsync, a rename over the file, and an fsync
  of its folder (so a power cut leaves the old position or the new one).
  The offsets acked beyond the committed one are saved with it (at most the
  in-flight window), so a restart also skips those;
- :meth:`Positions.saved` to wait until a save holds every ack made so far.
  A source whose envelope acks await it (after marking a whole run with
  :meth:`ack`: one save for the run) frees an in-flight slot only once its
  ack is on disk, so a restart repeats at most the in-flight window; without
  it, the acks of a save still running (a slow disk) would be repeated too.

The file is JSON: ``{"offset": N, "acked": [...], ...}`` plus the source's
own fields (:attr:`Positions.extra`: the tail keeps the file's inode and how
often it started over). It is read as an untrusted file (a regular file, a size cap, no link
followed: :mod:`bridges._fs`).
"""

from __future__ import annotations

import collections
import json
import logging
import os
from pathlib import Path
from typing import Final

import trio

from ._blocking import blocking
from ._fs import Refused, atomic_write, open_directory, open_regular

log = logging.getLogger("bridges")

#: The largest position file read (the offsets acked out of order are in it).
MAX_POSITION_FILE: Final = 4 * 1024 * 1024

#: A value the source keeps with its position (JSON: a number, text, or nothing).
Extra = int | str | None


class PositionError(OSError):
    """The position file cannot be used (a link, not JSON, a wrong field): the
    message names it. Its source refuses to start rather than start over."""


class Positions:
    """The offset below which every item is acked, saved durably (see the module docs).

    Args:
      file: the position file (its folder must exist when it is saved).
    """

    def __init__(self, file: Path) -> None:
        self.file = file
        #: Every item that ends at or below this offset is acked.
        self.committed = 0
        #: The source's own fields, saved with the position (set, then :meth:`changed`).
        self.extra: dict[str, Extra] = {}
        # start -> [end, acked], in the order handed out (offset order)
        self._open: collections.OrderedDict[int, list[int]] = collections.OrderedDict()
        self._skip: set[int] = set()  # starts acked beyond ``committed`` before a restart
        self._saved: tuple[object, ...] | None = None
        self._dirty = trio.Event()
        self._acks = 0  # acks (and skips) so far
        self._acks_saved = 0  # how many of them the last finished save holds
        self._save_done = trio.Event()

    @property
    def in_flight(self) -> int:
        """Items handed out and not yet acked (nacked ones included)."""
        return sum(1 for end, acked in self._open.values() if not acked)

    async def restore(self) -> None:
        """Read the saved position (none yet: offset 0).

        Raises:
          PositionError: the file is there but unusable.
        """
        offset, acked, extra = await blocking(self._read, what=f"read {self.file}")
        self.committed, self._skip, self.extra = offset, set(acked), extra
        self._saved = self._state()

    def take(self, start: int, end: int) -> bool:
        """The item ``[start, end)`` is handed out; False when it was acked before
        a restart (it is settled now: do not hand it out again)."""
        if start not in self._open:
            self._open[start] = [end, 0]
        if self._skip and start in self._skip:
            self._skip.discard(start)
            self.ack(start)
            return False
        return True

    def ack(self, start: int) -> None:
        """The item at ``start`` is done; the committed offset moves past every
        acked item at the front."""
        entry = self._open.get(start)
        if entry is None:
            return
        entry[1] = 1
        while self._open:
            first, (end, acked) = next(iter(self._open.items()))
            if not acked:
                break
            del self._open[first]
            self.committed = end
        self._acks += 1
        self._dirty.set()

    async def saved(self) -> None:
        """Return once a finished save holds every :meth:`ack` made before the call.

        :meth:`save_loop` must be running (in the source's nursery); if it
        fails, the source fails, and this waits until it is cancelled.
        """
        wanted = self._acks
        while self._acks_saved < wanted:
            await self._save_done.wait()

    def skip(self, start: int, reason: str) -> None:
        """The item at ``start`` can never be delivered: logged, and counted as done."""
        log.error("%s: the item at offset %d is skipped: %s", self.file, start, reason)
        self.ack(start)

    def reset(self) -> None:
        """Start over from offset 0 (the log was replaced or truncated): nothing
        handed out before counts any more. It touches no Trio object, so a
        worker thread that found the change may call it; the new position is
        saved after the next :meth:`changed` or ack."""
        self._open.clear()
        self._skip.clear()
        self.committed = 0

    def changed(self) -> None:
        """:attr:`extra` changed: save it with the next burst."""
        self._dirty.set()

    async def save_loop(self) -> None:
        """Save after each burst of acks, until cancelled (run it in the source's nursery)."""
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            await self.save()

    async def save(self) -> None:
        """Save the position now, if it changed since the last save."""
        acks = self._acks
        state = self._state()
        if state != self._saved:
            data = json.dumps(self._fields()).encode()
            await blocking(lambda: _write(self.file, data), what=f"write {self.file}")
            self._saved = state
        if acks > self._acks_saved:
            self._acks_saved = acks
            done, self._save_done = self._save_done, trio.Event()
            done.set()

    def _fields(self) -> dict[str, object]:
        ahead = sorted(
            {
                *(start for start, (_, acked) in self._open.items() if acked),
                *(start for start in self._skip if start > self.committed),
            }
        )
        return {**self.extra, "offset": self.committed, "acked": ahead}

    def _state(self) -> tuple[object, ...]:
        return tuple(sorted((k, str(v)) for k, v in self._fields().items()))

    def _read(self) -> tuple[int, tuple[int, ...], dict[str, Extra]]:
        try:
            dir_fd = open_directory(self.file.parent)
            try:
                fd, _ = open_regular(dir_fd, self.file.name)
            finally:
                os.close(dir_fd)
            try:
                text = os.read(fd, MAX_POSITION_FILE)
            finally:
                os.close(fd)
            data = json.loads(text)
            offset = int(data.pop("offset"))
            acked = tuple(sorted({int(s) for s in data.pop("acked", ()) if int(s) > offset}))
            extra = {k: v for k, v in data.items() if isinstance(v, int | str) or v is None}
            return offset, acked, extra
        except FileNotFoundError:
            return 0, (), {}
        except Refused as exc:
            raise PositionError(
                f"the position file {self.file} is {exc.strerror}: refused"
            ) from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PositionError(f"the position file {self.file} is unusable: {exc}") from exc


def _write(file: Path, data: bytes) -> None:
    atomic_write(file.parent, file.name, data)
