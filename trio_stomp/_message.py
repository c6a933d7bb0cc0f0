"""Messages received from a subscription, and how they are acknowledged."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._errors import ClientClosed, LocalProtocolError
from .frame import Frame, Headers

if TYPE_CHECKING:
    from ._subscription import Subscription
    from ._transaction import Transaction


class Message:
    """A MESSAGE frame delivered to a subscription.

    ``body`` is the raw bytes; ``text`` decodes it (UTF-8 unless the
    ``content-type`` names another charset). When the subscription's ack mode
    is ``client`` or ``client-individual``, call :meth:`ack` or :meth:`nack`
    once the message is dealt with (or acknowledge it in a transaction with
    :meth:`Transaction.ack`).
    """

    __slots__ = ("_generation", "_subscription", "frame")

    def __init__(self, frame: Frame, subscription: Subscription, generation: int = 0) -> None:
        self.frame = frame
        self._subscription = subscription
        # Which connection of the client it came on: acks are per connection.
        self._generation = generation

    @property
    def body(self) -> bytes:
        """The message body."""
        return self.frame.body

    @property
    def headers(self) -> Headers:
        """Every header of the MESSAGE frame, in order."""
        return self.frame.headers

    @property
    def text(self) -> str:
        """The body decoded with the charset of ``content-type`` (UTF-8 by default)."""
        charset = "utf-8"
        for param in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = param.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip('"')
        return self.frame.body.decode(charset)

    @property
    def destination(self) -> str:
        """Where the message was sent."""
        return self.headers.get("destination", "")

    @property
    def message_id(self) -> str:
        """The broker's id for the message."""
        return self.headers.get("message-id", "")

    @property
    def subscription(self) -> str:
        """The id of the subscription that received it."""
        return self.headers.get("subscription", self._subscription.id)

    @property
    def redelivered(self) -> bool:
        """True when the broker says it delivered this message before."""
        return self.headers.get("redelivered", "false").lower() == "true"

    def __repr__(self) -> str:
        return f"<Message {self.message_id!r} from {self.destination!r} ({len(self.body)} bytes)>"

    async def ack(self, *, receipt: bool = False) -> None:
        """Acknowledge the message (and, in ``client`` mode, every earlier one).

        Raises:
          ClientClosed: the subscription or its connection has gone; the
            broker will redeliver the message, so it must not be acked now.
          LocalProtocolError: the subscription's ack mode is ``auto``.
        """
        await self._subscription._client._acknowledge(self, "ACK", receipt=receipt)

    async def nack(self, *, receipt: bool = False) -> None:
        """Reject the message: the broker redelivers it or dead-letters it.

        Raises:
          ClientClosed: as for :meth:`ack`.
          LocalProtocolError: the ack mode is ``auto``, or the session
            speaks STOMP 1.0, which has no NACK.
        """
        await self._subscription._client._acknowledge(self, "NACK", receipt=receipt)


def ack_headers(
    message: Message, command: str, version: str, transaction: Transaction | None
) -> list[tuple[str, str]]:
    """The headers of an ACK or NACK for ``message`` under ``version``.

    1.2 names the MESSAGE's ``ack`` header in ``id``; 1.1 uses
    ``message-id`` and ``subscription``; 1.0 has only ``message-id``.
    """
    subscription = message._subscription
    if subscription.ack == "auto":
        raise LocalProtocolError(
            f"{message!r} came from an ack='auto' subscription and needs no {command}"
        )
    if not subscription.active:
        raise ClientClosed(
            f"cannot {command} {message!r}: its subscription or connection has gone; "
            "the broker will redeliver it"
        )
    if command == "NACK" and version == "1.0":
        raise LocalProtocolError("STOMP 1.0 has no NACK")
    headers = message.headers
    if version == "1.2":
        ack_id = headers.get("ack")
        if ack_id is None:
            raise LocalProtocolError(f"{message!r} has no 'ack' header to acknowledge it by")
        pairs = [("id", ack_id)]
    elif version == "1.1":
        pairs = [("message-id", message.message_id), ("subscription", message.subscription)]
    else:
        pairs = [("message-id", message.message_id)]
    if transaction is not None:
        pairs.append(("transaction", transaction.id))
    return pairs
