"""Transactions: BEGIN on entry, COMMIT on success, ABORT on error or cancellation."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from ._errors import TransactionError
from ._message import Message

if TYPE_CHECKING:
    from ._client import Client


class Transaction:
    """A STOMP transaction: frames sent through it take effect together.

    Use it as ``async with client.transaction() as tx``. Entering sends BEGIN.
    Leaving the block normally sends COMMIT and, by default, waits for its
    RECEIPT, so that once the block is left the broker has committed. Leaving
    it by an exception or a cancellation sends ABORT, shielded from the
    cancellation and bounded by the client's ``disconnect_timeout``; when the
    connection has already failed there is nothing to abort (the broker aborts
    open transactions of a lost connection itself).

    A cancellation that arrives while COMMIT is waiting for its receipt leaves
    the outcome unknown to us (the broker may have committed); the
    cancellation propagates as usual.
    """

    def __init__(self, client: Client, transaction_id: str, receipt: bool) -> None:
        self._client = client
        self.id = transaction_id
        self._receipt = receipt
        #: "new", "open", "committed", "aborted" or "failed".
        self.state = "new"
        self._generation = -1  # the client's connection generation at BEGIN

    def __repr__(self) -> str:
        return f"<Transaction {self.id!r} {self.state}>"

    def _check_open(self) -> None:
        if self.state != "open":
            raise TransactionError(f"{self!r} is not open")

    async def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        receipt: bool = False,
    ) -> None:
        """Send a message as part of the transaction (see :meth:`Client.send`)."""
        self._check_open()
        await self._client._send_message(
            destination, body, headers, content_type, receipt, transaction=self
        )

    async def ack(self, message: Message, *, receipt: bool = False) -> None:
        """Acknowledge ``message`` as part of the transaction."""
        self._check_open()
        await self._client._acknowledge(message, "ACK", receipt=receipt, transaction=self)

    async def nack(self, message: Message, *, receipt: bool = False) -> None:
        """Reject ``message`` as part of the transaction."""
        self._check_open()
        await self._client._acknowledge(message, "NACK", receipt=receipt, transaction=self)

    async def __aenter__(self) -> Transaction:
        await self._client._begin(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self._client._commit(self)
        else:
            await self._client._abort(self)
