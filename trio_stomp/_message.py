"""Messages received from a subscription, and how they are acknowledged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal, Protocol, overload

from .frame import Frame, Headers

if TYPE_CHECKING:
    from ._sender import Sender

AckCommand = Literal["ACK", "NACK"]


class TransactionScope(Protocol):
    """What acknowledging inside a transaction needs of it (a :class:`~trio_stomp.Transaction`)."""

    @property
    def id(self) -> str:
        """The transaction's id, sent in the ``transaction`` header."""

    def check_usable(self, sender: Sender) -> None:
        """Raise unless the transaction is open on ``sender``'s current connection."""


#: How a message is acknowledged: its subscription's ``acknowledge``, given the
#: message, ACK or NACK, whether to await a receipt, the transaction (or None)
#: and the connection generation the message came on.
AckCallback = Callable[
    ["Message", AckCommand, bool, "TransactionScope | None", int], Awaitable[None]
]
#: How a batch is acknowledged: its subscription's ``acknowledge_batch``, given
#: the messages, ACK or NACK, whether to await a receipt and the generation.
BatchAckCallback = Callable[[Sequence["Message"], AckCommand, bool, int], Awaitable[None]]


class Delivery:
    """What the messages of one subscription on one connection share: how to
    acknowledge them, the subscription's id and the connection generation.

    One per subscription and connection, so that a :class:`Message` carries
    a single reference (no per-message closure or bound method).
    """

    __slots__ = ("ack", "ack_batch", "generation", "subscription_id")

    def __init__(
        self,
        ack: AckCallback,
        ack_batch: BatchAckCallback,
        subscription_id: str,
        generation: int = 0,
    ) -> None:
        # The subscription's acknowledge: a message holds no reference to its
        # subscription or client, only what acknowledging it takes.
        self.ack = ack
        self.ack_batch = ack_batch
        self.subscription_id = subscription_id
        # Which connection of the client it came on: acks are per connection.
        self.generation = generation


class Message:
    """A MESSAGE frame delivered to a subscription.

    ``body`` is the raw bytes; ``text`` decodes it (UTF-8 unless the
    ``content-type`` names another charset). When the subscription's ack mode
    is ``client`` or ``client-individual``, call :meth:`ack` or :meth:`nack`
    once the message is dealt with (or acknowledge it in a transaction with
    :meth:`Transaction.ack`).

    A message is two references (its frame and what it shares with the other
    messages of its subscription): it is made once per received frame.
    """

    __slots__ = ("_delivery", "frame")

    def __init__(self, frame: Frame, delivery: Delivery) -> None:
        self.frame = frame
        self._delivery = delivery

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
        return self.headers.get("subscription", self._delivery.subscription_id)

    @property
    def ack_group(self) -> object:
        """An opaque token, the same object for every message of one subscription
        received on one connection: messages sharing it can be acknowledged
        together, with :meth:`MessageBatch.of`."""
        return self._delivery

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
        delivery = self._delivery
        await delivery.ack(self, "ACK", receipt, None, delivery.generation)

    async def nack(self, *, receipt: bool = False) -> None:
        """Reject the message: the broker redelivers it or dead-letters it.

        Raises:
          ClientClosed: as for :meth:`ack`.
          LocalProtocolError: the ack mode is ``auto``, or the session
            speaks STOMP 1.0, which has no NACK.
        """
        delivery = self._delivery
        await delivery.ack(self, "NACK", receipt, None, delivery.generation)

    async def acknowledge(
        self,
        command: AckCommand,
        *,
        receipt: bool = False,
        transaction: TransactionScope | None = None,
    ) -> None:
        """ACK or NACK the message, inside ``transaction`` when given: the general form
        of :meth:`ack`, :meth:`nack` and :meth:`Transaction.ack`.

        Raises:
          ClientClosed, LocalProtocolError: as for :meth:`ack` and :meth:`nack`.
          TransactionError: ``transaction`` is not open on this message's connection.
        """
        delivery = self._delivery
        await delivery.ack(self, command, receipt, transaction, delivery.generation)


class MessageBatch(Sequence[Message]):
    """Messages handed out together by :meth:`Subscription.batches`, in order.

    A sequence of :class:`Message` (index it, iterate it, take its ``len``);
    each message can still be acknowledged on its own, or the whole batch at
    once with :meth:`ack` and :meth:`nack`.
    """

    __slots__ = ("_delivery", "_messages")

    def __init__(self, messages: list[Message], delivery: Delivery) -> None:
        self._messages = messages
        self._delivery = delivery

    @classmethod
    def of(cls, messages: Sequence[Message]) -> MessageBatch:
        """A batch of ``messages`` to acknowledge together: messages of one
        subscription from one connection (one :attr:`Message.ack_group`), in the
        order received, for example some of several batches.

        Raises:
          ValueError: ``messages`` is empty, or not all of one ack group.
        """
        if not messages:
            raise ValueError("a MessageBatch needs at least one message")
        delivery = messages[0].ack_group
        for message in messages:
            if message.ack_group is not delivery:
                raise ValueError(
                    f"{message!r} is not of the same subscription and connection as "
                    f"{messages[0]!r}: they cannot be acknowledged together"
                )
        assert isinstance(delivery, Delivery)
        return cls(list(messages), delivery)

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        return self._messages[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages)

    def __repr__(self) -> str:
        return f"<MessageBatch of {len(self._messages)} messages>"

    async def ack(self, *, receipt: bool = False) -> None:
        """Acknowledge every message of the batch, in one write.

        With ``client-individual`` acks, one ACK per message; with ``client``
        acks, one ACK, of the last message, which the broker applies to it and
        every earlier one (cumulative). With ``receipt``, returns once the
        broker confirmed the last ACK (and so, in order, all of them).

        Raises:
          ClientClosed, LocalProtocolError: as :meth:`Message.ack`.
        """
        delivery = self._delivery
        await delivery.ack_batch(self._messages, "ACK", receipt, delivery.generation)

    async def nack(self, *, receipt: bool = False) -> None:
        """Reject every message of the batch: one NACK each, in one write.

        Raises:
          ClientClosed, LocalProtocolError: as :meth:`Message.nack`.
        """
        delivery = self._delivery
        await delivery.ack_batch(self._messages, "NACK", receipt, delivery.generation)
