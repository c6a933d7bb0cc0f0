"""Which offset of a partition may be committed, when acks come out of order.

Kafka keeps one committed offset per partition and group: everything below
it counts as done. The sink acks messages in any order (a batch that is
retried, a dead letter), so a partition's commit is the lowest offset handed
out and not yet acked (the *watermark*), never more. The offsets acked above
the watermark are written into the commit's metadata string (Kafka keeps up
to ``offset.metadata.max.bytes``, 4 KiB by default, beside each committed
offset), so that an ack stays final across a restart: the next owner of the
partition skips them. What does not fit in the metadata is delivered again
(at least once).

No I/O and no clock here: the source feeds offsets in and commits what
:meth:`Partition.commit` says.
"""

from __future__ import annotations

import collections
from collections.abc import Collection
from typing import Final

#: The most characters of metadata written per partition (Kafka's default limit is 4,096).
MAX_METADATA: Final = 4000
#: The metadata's prefix: says the rest is a list of acked offsets (a format version).
_PREFIX: Final = "acked1:"


class WentBack(Exception):
    """A partition's log went back: an offset below one read before in this assignment
    (its topic was deleted and created again, or its log truncated)."""


class Partition:
    """One assigned partition: what was handed out, what was acked, what to skip.

    Offsets are given in the order the consumer reads them (ascending).
    """

    __slots__ = ("_acked", "_end", "_out", "skip")

    def __init__(self, committed: int, metadata: str | None = None) -> None:
        #: Offsets taken from the consumer, oldest first, until everything before is acked.
        self._out: collections.deque[int] = collections.deque()
        self._acked: set[int] = set()
        #: The offset after the last one taken (the commit when nothing is out).
        self._end = committed
        #: Offsets acked by an earlier owner above its committed offset: not handed out again.
        self.skip: frozenset[int] = parse_metadata(committed, metadata)

    def take(self, offset: int) -> bool:
        """``offset`` was read; False when it was acked before (skip it: it counts as acked).

        Raises:
          WentBack: ``offset`` is below the last one read (nothing is changed).
        """
        if offset < self._end:
            raise WentBack(offset)
        self._out.append(offset)
        self._end = offset + 1
        if offset in self.skip:
            self.ack(offset)
            return False
        return True

    def ack(self, offset: int) -> None:
        """``offset`` is done (written by the sink, or dead-lettered)."""
        out, acked = self._out, self._acked
        if out and out[0] == offset:
            out.popleft()  # (acks mostly come in order: then the set is not needed)
        else:
            acked.add(offset)
        while out and out[0] in acked:
            acked.discard(out.popleft())

    @property
    def watermark(self) -> int:
        """The offset to commit: every offset below it that was read is acked."""
        return self._out[0] if self._out else self._end

    @property
    def outstanding(self) -> int:
        """How many offsets read are not acked yet."""
        return len(self._out) - len(self._acked)

    def commit(self) -> tuple[int, str]:
        """The offset to commit and its metadata (the offsets acked above it)."""
        watermark = self.watermark
        return watermark, format_metadata(watermark, self._acked)

    def commit_with(self, offsets: Collection[int]) -> tuple[int, str]:
        """What :meth:`commit` would say once ``offsets`` (read, not acked yet) are acked.

        Changes nothing: a transaction that carries it may still abort (see ``._carry``).
        """
        if not offsets:
            return self.commit()
        done = self._acked.union(offsets)
        watermark = self._end
        for offset in self._out:  # (mostly the head is in ``offsets``: a short walk)
            if offset not in done:
                watermark = offset
                break
        return watermark, format_metadata(watermark, done)


def format_metadata(watermark: int, acked: set[int]) -> str:
    """``acked1:`` and the acked offsets above ``watermark`` as deltas, at most MAX_METADATA.

    Offsets that do not fit are left out: they will be delivered again.
    """
    parts = [_PREFIX]
    size = len(_PREFIX)
    previous = watermark
    for offset in sorted(o for o in acked if o > watermark):
        item = f"{offset - previous},"
        size += len(item)
        if size > MAX_METADATA:
            break
        parts.append(item)
        previous = offset
    return "".join(parts).rstrip(",") if len(parts) > 1 else ""


def parse_metadata(watermark: int, metadata: str | None) -> frozenset[int]:
    """The offsets :func:`format_metadata` wrote; anything else (another tool's) is no offsets."""
    if not metadata or not metadata.startswith(_PREFIX):
        return frozenset()
    found: set[int] = set()
    offset = watermark
    for item in metadata[len(_PREFIX) :].split(","):
        if not item.isdigit() or len(item) > 18:
            return frozenset()  # not ours, or damaged: deliver again rather than guess
        offset += int(item)
        found.add(offset)
    return frozenset(found)
