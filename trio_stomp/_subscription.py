"""Subscriptions: SUBSCRIBE on entry, messages in order, UNSUBSCRIBE on exit.

A subscription owns its state and its frames (:class:`SubscriptionState`);
it reaches the connection only through a :class:`~trio_stomp._sender.Sender`.
The client keeps a :class:`SubscriptionTable` of the open ones, to route each
MESSAGE to its buffer and to re-subscribe them after a reconnect.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Sequence
from itertools import islice, repeat
from types import TracebackType
from typing import Final, cast

import trio

from ._errors import ClientClosed, LocalProtocolError, StompError, SubscriptionOverflow
from ._message import AckCommand, Delivery, Message, MessageBatch, TransactionScope
from ._sender import Pairs, Sender
from .frame import ACK_MODES, DEFAULT_PREFETCH, PREFETCH_HEADERS, Frame, Headers

#: Buffer of an auto-ack subscription, where brokers may ignore the window.
DEFAULT_AUTO_BUFFER: Final = 10_000
#: The consumer yields to the scheduler at least this often while messages are buffered.
_YIELD_EVERY: Final = 64
#: The most messages one batch of :meth:`Subscription.batches` holds by default.
DEFAULT_BATCH: Final = 1000


class SubscriptionTable:
    """The client's open subscriptions by id, and the ids it has ended."""

    def __init__(self) -> None:
        self.by_id: dict[str, SubscriptionState] = {}
        #: Ids of subscriptions we unsubscribed (RabbitMQ may still name them).
        self.ended: set[str] = set()

    def find(self, headers: Headers) -> SubscriptionState | None:
        """The subscription a MESSAGE with ``headers`` is for, if it is still open."""
        sub_id = headers.get("subscription")
        if sub_id is not None:
            return self.by_id.get(sub_id)
        # Some 1.0 brokers leave the id out: match by destination.
        destination = headers.get("destination")
        return next((s for s in self.by_id.values() if s.destination == destination), None)


class SubscriptionState:
    """One subscription's buffer, flags and frames; what the client's reader and
    supervisor act on (they never wait on it)."""

    def __init__(
        self,
        sender: Sender,
        table: SubscriptionTable,
        subscription_id: str,
        destination: str,
        ack: str,
        headers: Pairs,
        buffer_size: int | None,
    ) -> None:
        if ack not in ACK_MODES:
            raise LocalProtocolError(f"unknown ack mode {ack!r}; expected one of {ACK_MODES}")
        self.sender = sender
        self.table = table
        self.id = subscription_id
        self.destination = destination
        self.ack = ack
        window = next((int(v) for k, v in headers if k in PREFETCH_HEADERS and v.isdigit()), None)
        if window is None:
            window = DEFAULT_PREFETCH
            headers = [*headers, *((name, str(window)) for name in PREFETCH_HEADERS)]
        if buffer_size is None:
            buffer_size = window if ack != "auto" else max(window, DEFAULT_AUTO_BUFFER)
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be at least 1, got {buffer_size}")
        self.buffer_size = buffer_size
        self.headers = headers
        self.buffer: deque[Message] = deque()
        #: What the messages of the current connection share (made once per connection).
        self.delivery = Delivery(self.acknowledge, self.acknowledge_batch, subscription_id, 0)
        #: Whether this connection's messages take the ACK hot path (STOMP 1.2, acked).
        self.quick_acks = self._quick_acks()
        self.lot = trio.lowlevel.ParkingLot()
        self.since_yield = 0
        self.error: StompError | None = None
        self.dropped = 0
        #: True between a successful SUBSCRIBE and the UNSUBSCRIBE.
        self.active = False

    def __repr__(self) -> str:
        return f"<Subscription {self.id!r} to {self.destination!r} ack={self.ack!r}>"

    # -- frames -------------------------------------------------------------

    def subscribe_pairs(self) -> Pairs:
        return [
            ("id", self.id),
            ("destination", self.destination),
            ("ack", self.ack),
            *self.headers,
        ]

    def unsubscribe_pairs(self) -> Pairs:
        pairs = [("id", self.id)]
        if self.sender.version == "1.0":
            pairs.append(("destination", self.destination))
        return pairs

    async def start(self, receipt: bool) -> None:
        """SUBSCRIBE (awaiting its receipt when asked); registered from the moment it
        is queued, so that no MESSAGE is missed."""
        sender = self.sender
        if not sender.connected:
            await sender.wait_connected()
        self.table.by_id[self.id] = self
        self.active = True
        try:
            waiter = await sender.queue_frame("SUBSCRIBE", self.subscribe_pairs(), b"", receipt)
        except BaseException:
            self.close()
            del self.table.by_id[self.id]
            raise
        try:
            await sender.await_receipt(waiter)
        except BaseException:
            await self.end()
            raise

    async def end(self) -> None:
        """UNSUBSCRIBE (shielded, bounded; skipped when the connection is down)."""
        self.close()
        if self.table.by_id.pop(self.id, None) is None:
            return
        self.table.ended.add(self.id)
        await self.sender.send_cleanup("UNSUBSCRIBE", self.unsubscribe_pairs())

    # -- what the reader task and the supervisor call: never blocks ------------

    def deliver(self, frames: list[Frame], generation: int) -> None:
        """Buffer the MESSAGE frames of one read for this subscription, in one step."""
        if self.error is not None or not self.active:
            return
        delivery = self.delivery
        if delivery.generation != generation:
            delivery = self.delivery = Delivery(
                self.acknowledge, self.acknowledge_batch, self.id, generation
            )
            self.quick_acks = self._quick_acks()
        buffer = self.buffer
        room = self.buffer_size - len(buffer)
        if len(frames) <= room:
            buffer.extend(map(Message, frames, repeat(delivery)))
        else:
            buffer.extend(map(Message, islice(frames, max(room, 0)), repeat(delivery)))
            self._overflow(len(frames) - room)
        if self.lot:
            self.lot.unpark(count=len(frames))

    def _overflow(self, dropped: int) -> None:
        self.dropped += dropped
        self.error = SubscriptionOverflow(
            f"{self!r} buffer of {self.buffer_size} messages is full; the consumer is "
            "slower than the broker and the broker does not respect the prefetch window"
        )
        # The reader cannot wait, so the UNSUBSCRIBE skips the queue bound.
        self.table.by_id.pop(self.id, None)
        self.close()
        self.sender.send_now("UNSUBSCRIBE", self.unsubscribe_pairs())

    def connection_lost(self) -> None:
        """The connection dropped and a new one is coming: drop what can no longer be acked."""
        if self.ack != "auto":
            self.buffer.clear()

    def close(self, error: StompError | None = None) -> None:
        """Stop delivering; wake the consumer. Buffered messages are still handed out."""
        self.active = False
        if error is not None and self.error is None:
            self.error = error
        if error is not None and self.ack != "auto":
            # The connection failed: buffered messages can no longer be acked.
            self.buffer.clear()
        self.lot.unpark_all()

    # -- acknowledging ------------------------------------------------------

    def acknowledge(
        self,
        message: Message,
        command: AckCommand,
        receipt: bool,
        transaction: TransactionScope | None,
        generation: int,
    ) -> Awaitable[None]:
        """ACK or NACK ``message`` (each :class:`Message` holds this as its callback).

        Not a coroutine: it checks and builds the frame's headers at once (and
        raises at once) and returns what sends it, so that the caller awaits
        the sender's coroutine directly, one frame fewer on every ACK.
        """
        sender = self.sender
        if generation != sender.generation:
            raise ClientClosed(
                f"cannot {command} {message!r}: the connection it came on was lost; "
                "the broker will redeliver it"
            )
        if transaction is None:
            if self.quick_acks and not receipt and self.active:
                # The hot path of client-individual consumers: one header, no receipt.
                # (The message is of this connection: its delivery set quick_acks.)
                ack_id = message.frame.headers.get("ack")
                if ack_id is not None:
                    return sender.send_ack_id(command, ack_id, message=message)
        else:
            transaction.check_usable(sender)
        pairs = self._ack_pairs(message, command, sender.version)
        if transaction is not None:
            pairs.append(("transaction", transaction.id))
        return sender.send_ack(command, pairs, receipt=receipt, message=message)

    async def acknowledge_batch(
        self, messages: Sequence[Message], command: AckCommand, receipt: bool, generation: int
    ) -> None:
        """ACK or NACK a :class:`MessageBatch` in one write; ``client`` mode ACKs the
        last message only (the broker applies it to every earlier one)."""
        sender = self.sender
        if generation != sender.generation:
            raise ClientClosed(
                f"cannot {command} a batch of {len(messages)} messages: the connection it "
                "came on was lost; the broker will redeliver them"
            )
        if command == "ACK" and self.ack == "client":
            messages = messages[-1:]
        if not messages:
            await trio.lowlevel.checkpoint()
            return
        version = sender.version
        if version == "1.2" and not receipt:
            # The hot path of a batch: one ``id`` header each, no receipt.
            ack_ids = self._ack_ids(messages, command)
            await sender.send_ack_ids(command, ack_ids, message=messages[-1])
            return
        acks = [self._ack_pairs(message, command, version) for message in messages]
        await sender.send_acks(command, acks, receipt=receipt, message=messages[-1])

    def _quick_acks(self) -> bool:
        return self.ack != "auto" and self.sender.version == "1.2"

    def _ack_ids(self, messages: Sequence[Message], command: str) -> list[str]:
        """The ``ack`` header of each of ``messages`` (1.2), checked as :meth:`_ack_pairs` does."""
        self._check_ackable(messages[0], command, "1.2")
        ack_ids = [message.frame.headers.get("ack") for message in messages]
        if None in ack_ids:
            missing = messages[ack_ids.index(None)]
            raise LocalProtocolError(f"{missing!r} has no 'ack' header to acknowledge it by")
        return cast("list[str]", ack_ids)  # (no None in it)

    def _check_ackable(self, message: Message, command: str, version: str) -> None:
        """Raise when ``message`` (of this subscription) cannot take ``command`` now."""
        if self.ack == "auto":
            raise LocalProtocolError(
                f"{message!r} came from an ack='auto' subscription and needs no {command}"
            )
        if not self.active:
            raise ClientClosed(
                f"cannot {command} {message!r}: its subscription or connection has gone; "
                "the broker will redeliver it"
            )
        if command == "NACK" and version == "1.0":
            raise LocalProtocolError("STOMP 1.0 has no NACK")

    def _ack_pairs(self, message: Message, command: str, version: str) -> Pairs:
        """The headers of an ACK or NACK for ``message`` under ``version``.

        1.2 names the MESSAGE's ``ack`` header in ``id``; 1.1 uses
        ``message-id`` and ``subscription``; 1.0 has only ``message-id``.
        """
        self._check_ackable(message, command, version)
        headers = message.headers
        if version == "1.2":
            ack_id = headers.get("ack")
            if ack_id is None:
                raise LocalProtocolError(f"{message!r} has no 'ack' header to acknowledge it by")
            return [("id", ack_id)]
        if version == "1.1":
            return [("message-id", message.message_id), ("subscription", message.subscription)]
        return [("message-id", message.message_id)]


class Subscription:
    """Messages from one destination, delivered in order.

    Use it as ``async with client.subscribe(...) as sub: async for msg in sub``.
    Entering sends SUBSCRIBE; leaving sends UNSUBSCRIBE (shielded, bounded)
    and ends iteration. Unacked messages go back to the broker then.

    Flow control: the connection's one reader task never waits for the
    consumer. It puts messages in this subscription's buffer, sized to the
    prefetch window the broker was asked for (``prefetch-count`` for RabbitMQ,
    ``activemq.prefetchSize`` for ActiveMQ; both default to
    ``DEFAULT_PREFETCH``). With ``client`` and ``client-individual`` acks the
    broker stops sending when the window is full of unacked messages, so the
    buffer cannot overflow: a slow consumer slows the broker, not the socket,
    and heart-beats and receipts keep flowing.

    When a buffer is full anyway (an ``auto`` subscription on a broker that
    ignores the window, or a broker that breaks it), the subscription stops
    taking messages: it drops the excess, asks the broker to UNSUBSCRIBE, and
    its ``async for`` raises :class:`SubscriptionOverflow` after the messages
    it did buffer. Size the buffer with ``buffer_size`` when that matters.
    """

    def __init__(self, state: SubscriptionState, receipt: bool) -> None:
        self._state = state
        self._receipt = receipt

    @property
    def id(self) -> str:
        """The subscription's id on the connection."""
        return self._state.id

    @property
    def destination(self) -> str:
        """Where the messages come from."""
        return self._state.destination

    @property
    def ack(self) -> str:
        """The ack mode: "auto", "client" or "client-individual"."""
        return self._state.ack

    @property
    def buffer_size(self) -> int:
        """How many received messages may wait for the consumer."""
        return self._state.buffer_size

    @property
    def active(self) -> bool:
        """True between a successful SUBSCRIBE and the UNSUBSCRIBE."""
        return self._state.active

    def __repr__(self) -> str:
        return repr(self._state)

    async def __aenter__(self) -> Subscription:
        await self._state.start(self._receipt)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._state.end()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        """The next message; waits for one to arrive.

        Raises:
          StopAsyncIteration: the subscription was closed.
          SubscriptionOverflow: messages were dropped (see the class docs).
          StompError: the connection failed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        state = self._state
        buffer = state.buffer
        while not buffer:
            if state.error is not None:
                raise state.error
            if not state.active:
                raise StopAsyncIteration
            await state.lot.park()
        state.since_yield += 1
        # Yield at least every _YIELD_EVERY messages, but less often while a
        # backlog is waiting: the reader adds a whole read (hundreds of
        # messages) per turn, and a consumer that yielded every 64 would fall
        # ever further behind a fast broker.
        if state.since_yield >= _YIELD_EVERY and state.since_yield >= len(buffer) >> 2:
            state.since_yield = 0
            await trio.lowlevel.cancel_shielded_checkpoint()
        return buffer.popleft()

    def batches(self, max_messages: int = DEFAULT_BATCH) -> AsyncIterator[MessageBatch]:
        """Iterate over the messages in batches: ``async for batch in sub.batches():``.

        Each batch holds every message that has arrived and not been handed
        out yet, up to ``max_messages`` (at least one: it waits for one), in
        order. For high-volume consumers: one wake-up and one cancellation
        point per batch instead of per message, and :meth:`MessageBatch.ack`
        acknowledges a batch in one write (one cumulative ACK in ``client``
        mode). Ends, and raises, as iterating the subscription does; the two
        may be mixed, each message is handed out once.

        Raises:
          ValueError: ``max_messages`` is less than 1.
        """
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        return _Batches(self._state, max_messages)


class _Batches:
    """The iterator of :meth:`Subscription.batches`."""

    def __init__(self, state: SubscriptionState, max_messages: int) -> None:
        self._state = state
        self._max = max_messages

    def __aiter__(self) -> AsyncIterator[MessageBatch]:
        return self

    async def __anext__(self) -> MessageBatch:
        await trio.lowlevel.checkpoint_if_cancelled()
        state = self._state
        buffer = state.buffer
        waited = False
        while not buffer:
            if state.error is not None:
                raise state.error
            if not state.active:
                raise StopAsyncIteration
            await state.lot.park()
            waited = True
        if len(buffer) <= self._max:
            messages = list(buffer)
            buffer.clear()
        else:
            messages = [buffer.popleft() for _ in range(self._max)]
        # The messages are ours from here: a cancellation now must not lose them.
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return MessageBatch(messages, state.delivery)
