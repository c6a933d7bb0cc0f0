"""The narrow interface between the client and what it hands out.

A :class:`~trio_stomp.Subscription`, a :class:`~trio_stomp.Transaction` and a
:class:`~trio_stomp.Message` own their state and build their own frames; all
they need of the client is a :class:`Sender`: send a frame (waiting for its
receipt or not), send a cleanup frame (shielded, bounded), the negotiated
version, and which connection of the session is current. The client
implements it; nothing here imports the client, so there is no cycle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Protocol

import trio

from ._errors import LocalProtocolError, StompError
from .frame import Frame

HeaderArg = Mapping[str, str] | Iterable[tuple[str, str]] | None
Pairs = list[tuple[str, str]]


def user_headers(headers: HeaderArg, reserved: frozenset[str]) -> Pairs:
    """The pairs of a caller's ``headers``, checked: ``str`` names and values, none of
    ``reserved`` (the ones the client sets from its own arguments).

    Raises:
      TypeError: a name or value is not ``str``.
      LocalProtocolError: a name is one of ``reserved``.
    """
    if headers is None:
        return []
    pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
    for name, value in pairs:
        if not isinstance(name, str) or not isinstance(value, str):
            shown = repr(name) if isinstance(name, str) else f"a {type(name).__name__} name"
            raise TypeError(
                f"header names and values must be str, got {shown} with a "
                f"{type(value).__name__} value"
            )
        if name in reserved:
            raise LocalProtocolError(
                f"header {name!r} is set by the client; use the matching argument instead"
            )
    return pairs


class ReceiptWaiter:
    """Waits for one RECEIPT, or for the connection to fail."""

    __slots__ = ("_error", "_event")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._error: StompError | None = None

    def set(self) -> None:
        self._event.set()

    def fail(self, error: StompError) -> None:
        self._error = error
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        if self._error is not None:
            raise self._error


class Sender(Protocol):
    """What subscriptions, transactions and messages need of their client."""

    @property
    def version(self) -> str:
        """The STOMP version of the current connection."""

    @property
    def generation(self) -> int:
        """Which connection of the session is current: it grows on each reconnect.
        An ack or a transaction is valid only on the connection it started on."""

    @property
    def connected(self) -> bool:
        """False while a reconnect is under way."""

    def check_open(self) -> None:
        """Raise the session's error, or ClientClosed once it is closed."""

    async def wait_connected(self) -> None:
        """Return once a connection is up (at once, usually); raise as :meth:`check_open`."""

    async def queue_frame(
        self, command: str, pairs: Pairs, body: bytes, receipt: bool
    ) -> ReceiptWaiter | None:
        """Queue one frame; return its receipt's waiter when ``receipt``. Nothing is
        sent when it raises (invalid frame, connection down, cancelled)."""

    async def await_receipt(self, waiter: ReceiptWaiter | None) -> None:
        """Wait for the receipt :meth:`queue_frame` asked for (nothing if None)."""

    async def send_frame(
        self, command: str, pairs: Pairs, body: bytes = b"", *, receipt: bool
    ) -> None:
        """:meth:`queue_frame`, then :meth:`await_receipt`."""

    async def send_cleanup(self, command: str, pairs: Pairs) -> None:
        """Send a frame that must reach the wire even when the caller is cancelled:
        shielded, bounded by ``disconnect_timeout``, skipped on a broken connection."""

    def send_now(self, command: str, pairs: Pairs) -> None:
        """Queue a frame without waiting (past the queue's bound): for the reader task."""

    async def send_ack(self, command: str, pairs: Pairs, *, receipt: bool, message: object) -> None:
        """Send an ACK or NACK of ``message`` (named in errors)."""

    def send_ack_id(self, command: str, ack_id: str, *, message: object) -> Awaitable[None]:
        """Send a 1.2 ACK or NACK without receipt whose ``id`` is ``ack_id``: what to await."""

    async def send_acks(
        self, command: str, acks: list[Pairs], *, receipt: bool, message: object
    ) -> None:
        """Send the ACKs or NACKs of a batch (each one's headers in ``acks``) in one
        write; with ``receipt``, wait for the last one's."""

    async def send_ack_ids(self, command: str, ack_ids: list[str], *, message: object) -> None:
        """Send 1.2 ACKs or NACKs without receipt, one for each of ``ack_ids`` (its
        ``id`` header), in one write."""

    async def send_message(
        self,
        destination: str,
        body: bytes | str,
        headers: HeaderArg,
        content_type: str | None,
        receipt: bool,
        transaction: str | None,
    ) -> None:
        """Send a SEND frame (in ``transaction`` when given)."""


class ReplyRouter(Protocol):
    """Where the client hands replies to requests (:class:`trio_stomp._request.Replies`)."""

    def claims(self, frame: Frame) -> bool:
        """True when ``frame``, a MESSAGE no subscription claimed, is a reply."""

    def deliver(self, frames: Sequence[Frame]) -> None:
        """Hand out replies (from the reader task: never blocks)."""

    def fail(self, error: StompError) -> None:
        """The connection is gone: wake every request with ``error``."""
