"""Subscriptions: an async context manager and an async iterator of messages."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Final

import trio

from ._errors import LocalProtocolError, StompError, SubscriptionOverflow
from ._message import Message
from .frame import ACK_MODES, DEFAULT_PREFETCH, PREFETCH_HEADERS, Frame

if TYPE_CHECKING:
    from ._client import Client

#: Buffer of an auto-ack subscription, where brokers may ignore the window.
DEFAULT_AUTO_BUFFER: Final = 10_000
#: The consumer yields to the scheduler at least this often while messages are buffered.
_YIELD_EVERY: Final = 64


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

    def __init__(
        self,
        client: Client,
        subscription_id: str,
        destination: str,
        ack: str,
        headers: list[tuple[str, str]],
        buffer_size: int | None,
        receipt: bool,
    ) -> None:
        if ack not in ACK_MODES:
            raise LocalProtocolError(f"unknown ack mode {ack!r}; expected one of {ACK_MODES}")
        self._client = client
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
        self._headers = headers
        self._receipt = receipt
        self._buffer: deque[Message] = deque()
        self._lot = trio.lowlevel.ParkingLot()
        self._since_yield = 0
        self._error: StompError | None = None
        self._dropped = 0
        #: True between a successful SUBSCRIBE and the UNSUBSCRIBE.
        self.active = False

    def __repr__(self) -> str:
        return f"<Subscription {self.id!r} to {self.destination!r} ack={self.ack!r}>"

    async def __aenter__(self) -> Subscription:
        await self._client._start_subscription(self, self._receipt)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._client._end_subscription(self)

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
        buffer = self._buffer
        while not buffer:
            if self._error is not None:
                raise self._error
            if not self.active:
                raise StopAsyncIteration
            await self._lot.park()
        self._since_yield += 1
        # Yield at least every _YIELD_EVERY messages, but less often while a
        # backlog is waiting: the reader adds a whole read (hundreds of
        # messages) per turn, and a consumer that yielded every 64 would fall
        # ever further behind a fast broker.
        if self._since_yield >= _YIELD_EVERY and self._since_yield >= len(buffer) >> 2:
            self._since_yield = 0
            await trio.lowlevel.cancel_shielded_checkpoint()
        return buffer.popleft()

    # What the client's reader task calls: never blocks.

    def _deliver(self, frame: Frame) -> None:
        if self._error is not None or not self.active:
            return
        if len(self._buffer) >= self.buffer_size:
            self._dropped += 1
            self._error = SubscriptionOverflow(
                f"{self!r} buffer of {self.buffer_size} messages is full; the consumer is "
                "slower than the broker and the broker does not respect the prefetch window"
            )
            self._client._overflowed(self)
        else:
            self._buffer.append(Message(frame, self, self._client._generation))
        if self._lot:
            self._lot.unpark()

    def _connection_lost(self) -> None:
        """The connection dropped and a new one is coming: drop what can no longer be acked."""
        if self.ack != "auto":
            self._buffer.clear()

    def _close(self, error: StompError | None = None) -> None:
        """Stop delivering; wake the consumer. Buffered messages are still handed out."""
        self.active = False
        if error is not None and self._error is None:
            self._error = error
        if error is not None and self.ack != "auto":
            # The connection failed: buffered messages can no longer be acked.
            self._buffer.clear()
        self._lot.unpark_all()
