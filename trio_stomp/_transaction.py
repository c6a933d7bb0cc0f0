"""Transactions: BEGIN on entry, COMMIT on success, ABORT on error or cancellation."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType

from ._errors import ClientClosed, ConnectionLost, LocalProtocolError, TransactionError
from ._message import Message
from ._sender import Sender


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

    def __init__(self, sender: Sender, transaction_id: str, receipt: bool) -> None:
        self._sender = sender
        self.id = transaction_id
        self._receipt = receipt
        #: "new", "open", "committed", "aborted" or "failed".
        self.state = "new"
        self._generation = -1  # the client's connection generation at BEGIN

    def __repr__(self) -> str:
        return f"<Transaction {self.id!r} {self.state}>"

    def check_usable(self, sender: Sender) -> None:
        """Raise unless the transaction is open on ``sender``'s current connection.

        Raises:
          LocalProtocolError: ``sender`` is another client (a message received
            on one connection acknowledged in a transaction of another).
          TransactionError: not open, or its connection was lost (the broker
            rolled it back).
        """
        if sender is not self._sender:
            raise LocalProtocolError(f"{self!r} belongs to another connection")
        if self.state != "open":
            raise TransactionError(f"{self!r} is not open")
        if self._generation != sender.generation:
            self.state = "failed"
            raise TransactionError(
                f"{self!r} was rolled back: the connection was lost while it was open"
            )

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
        self.check_usable(self._sender)
        await self._sender.send_message(destination, body, headers, content_type, receipt, self.id)

    async def ack(self, message: Message, *, receipt: bool = False) -> None:
        """Acknowledge ``message`` as part of the transaction."""
        self.check_usable(self._sender)
        await message.acknowledge("ACK", receipt=receipt, transaction=self)

    async def nack(self, message: Message, *, receipt: bool = False) -> None:
        """Reject ``message`` as part of the transaction."""
        self.check_usable(self._sender)
        await message.acknowledge("NACK", receipt=receipt, transaction=self)

    async def __aenter__(self) -> Transaction:
        if self.state != "new":
            raise TransactionError(f"{self!r} was already used")
        sender = self._sender
        if not sender.connected:
            await sender.wait_connected()
        self._generation = sender.generation
        await sender.send_frame("BEGIN", [("transaction", self.id)], receipt=False)
        self.state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self._commit()
        else:
            await self._abort()

    async def _commit(self) -> None:
        self.check_usable(self._sender)
        self.state = "failed"
        try:
            await self._sender.send_frame(
                "COMMIT", [("transaction", self.id)], receipt=self._receipt
            )
        except (ClientClosed, ConnectionLost) as exc:
            raise TransactionError(f"{self!r} may not have committed: {exc}") from exc
        self.state = "committed"

    async def _abort(self) -> None:
        if self.state != "open":
            return
        self.state = "aborted"
        if self._generation == self._sender.generation:
            await self._sender.send_cleanup("ABORT", [("transaction", self.id)])
