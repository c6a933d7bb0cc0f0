"""A session's open transactions, sans-IO: frames held from BEGIN until COMMIT or ABORT.

What a transaction holds counts against the broker's limits
(:class:`~trio_stomp.broker._config.Limits`: ``max_transactions`` open at
once, ``max_transaction_bytes`` held across them), so a client cannot make
the broker buffer without bound. A frame that breaks a rule raises
:class:`ClientError`, which ends the session with an ERROR frame.
"""

from __future__ import annotations

from ..frame import Frame
from ._config import Limits


class ClientError(Exception):
    """A client error that ends the session with an ERROR frame.

    Attributes:
      message: the ERROR frame's ``message`` header.
      detail: its body (may be empty).
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


def frame_cost(frame: Frame) -> int:
    """Bytes a held frame is charged: body, headers and a fixed overhead."""
    return len(frame.body) + sum(len(n) + len(v) + 2 for n, v in frame.headers.items()) + 64


class Transactions:
    """The transactions one session has open, within ``limits``."""

    __slots__ = ("_bytes", "_limits", "_open")

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self._open: dict[str, list[Frame]] = {}
        self._bytes = 0

    def begin(self, frame: Frame) -> None:
        """BEGIN: open the frame's transaction."""
        tx = frame.headers.get("transaction")
        if tx is None:
            raise ClientError("BEGIN without transaction")
        if tx in self._open:
            raise ClientError("transaction already exists", f"transaction {tx!r} is already open")
        if len(self._open) >= self._limits.max_transactions:
            raise ClientError(
                "too many transactions", f"the limit is {self._limits.max_transactions}"
            )
        self._open[tx] = []

    def end(self, frame: Frame) -> list[Frame]:
        """COMMIT or ABORT: close the frame's transaction and return what it held, in order."""
        tx = frame.headers.get("transaction")
        if tx is None:
            raise ClientError(f"{frame.command} without transaction")
        frames = self._open.pop(tx, None)
        if frames is None:
            raise ClientError(
                "unknown transaction", f"{frame.command} of {tx!r}, which is not open"
            )
        self._bytes -= sum(frame_cost(f) for f in frames)
        return frames

    def hold(self, frame: Frame) -> bool:
        """Hold a SEND, ACK or NACK that names a transaction; False when it names none."""
        tx = frame.headers.get("transaction")
        if tx is None:
            return False
        frames = self._open.get(tx)
        if frames is None:
            raise ClientError(
                "unknown transaction", f"{frame.command} in {tx!r}, which is not open"
            )
        self._bytes += frame_cost(frame)
        if self._bytes > self._limits.max_transaction_bytes:
            raise ClientError(
                "transactions too large",
                f"open transactions hold more than {self._limits.max_transaction_bytes} bytes",
            )
        frames.append(frame)
        return True

    def clear(self) -> None:
        """Drop every open transaction (the connection is gone)."""
        self._open.clear()
        self._bytes = 0
