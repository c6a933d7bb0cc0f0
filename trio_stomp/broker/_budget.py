"""The broker-wide bound on incomplete client frames (``Limits.max_buffered_bytes``).

Each connection's parser holds the frame it is receiving until it is
complete. One connection is bounded by ``max_frame_size`` (and by
``max_preconnect_frame`` before CONNECT), but many connections each sending
part of a large frame could still add up; the sessions of one broker share a
:class:`Budget`, and the connection whose partial frame takes the total past
the limit is the one that is refused.
"""

from __future__ import annotations


class Budget:
    """Bytes of incomplete frames held, per holder and in total, against ``limit``."""

    __slots__ = ("_held", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._held: dict[object, int] = {}

    def hold(self, holder: object, size: int) -> bool:
        """``holder`` now holds ``size`` bytes (0: none); False when that is over the limit.

        A holder that shrinks or holds nothing is never refused.
        """
        before = self._held.pop(holder, 0)
        if size:
            self._held[holder] = size
        self.used += size - before
        return size <= before or self.used <= self.limit

    @property
    def exceeded(self) -> str:
        """The ERROR detail for a holder refused by :meth:`hold`."""
        return f"incomplete frames across connections exceed max_buffered_bytes={self.limit}"
