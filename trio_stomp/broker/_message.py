"""What the broker holds and reports, sans-IO: messages, deliveries, depths.

A :class:`Message` is made once, when the broker accepts a SEND
(:func:`new_message`), and never changes: a redelivered copy is a new tuple.
It carries the parts of its MESSAGE frames (see :mod:`._wire`). A
:class:`Pending` is one delivery waiting for its ACK; a
:class:`DestinationDepth` is what one destination holds, as
:meth:`Broker.depths <trio_stomp.broker.Broker.depths>` reports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, NamedTuple

import attrs

from ._wire import message_parts

# Header bytes beyond names and values: rough, it only bounds memory.
_FRAME_OVERHEAD: Final = 64


class Message(NamedTuple):
    """One message, as the broker keeps it until it is delivered (immutable: a
    redelivered copy is ``message._replace(redelivered=True)``).

    Attributes:
      message_id: unique within the broker; kept when redelivered.
      destination: where it was sent.
      headers: the SEND's own headers, to forward on the MESSAGE.
      body: the payload.
      size: an estimate of its memory, in bytes.
      redelivered: True once it has been delivered and come back.
      key: its key in the durable store; 0 when it is not stored (a
        negative key marks a durable subscription's message in a broker
        without a store, see :mod:`._durable`).
      head, tail: its MESSAGE frames' parts (see :mod:`._wire`), encoded
        once; ``b""`` when its deliveries are encoded the careful way.
    """

    message_id: str
    destination: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    size: int
    redelivered: bool = False
    key: int = 0
    head: bytes = b""
    tail: bytes = b""


def new_message(
    message_id: str,
    destination: str,
    headers: tuple[tuple[str, str], ...],
    body: bytes,
    key: int = 0,
) -> Message:
    """A message as a SEND makes it: its size estimated, its wire parts encoded."""
    head, tail = message_parts(destination, message_id, headers, len(body))
    size = message_size(destination, headers, body)
    return Message(message_id, destination, headers, body, size, False, key, head, tail)


def message_size(destination: str, headers: Iterable[tuple[str, str]], body: bytes) -> int:
    """An estimate of the memory a message takes, in bytes."""
    size = len(body) + _FRAME_OVERHEAD + len(destination)
    for name, value in headers:
        size += len(name) + len(value) + 2
    return size


@attrs.define(slots=True, eq=False)
class Pending:
    """A delivered message waiting for its ACK or NACK."""

    message: Message
    ack_id: str


@attrs.frozen(slots=True)
class DestinationDepth:
    """What one destination of a broker holds now: see :meth:`Broker.depths
    <trio_stomp.broker.Broker.depths>`.

    A message counts from the moment the broker accepted it until it is
    consumed (acknowledged, or delivered to an ``auto`` subscription): what
    a stop would leave behind. For a topic, the counts add up every current
    subscription's own queue.

    Attributes:
      destination: the queue's or topic's name.
      queued: waiting for a consumer (or, on a topic, for its subscriber to
        take it).
      unacknowledged: delivered to a ``client`` or ``client-individual``
        subscription and not yet acknowledged (it comes back if the
        subscription ends).
      consumers: the subscriptions reading it now.
      durable: True when what it holds is in the broker's store (a queue or a
        durable subscription of a broker with a data dir), delivered again
        after a restart; False when a stop loses it (everything of a volatile
        broker, every plain topic subscription).
      subscription: for a durable topic subscription, ``CLIENT_ID:NAME`` (its
        client-id and ``activemq.subscriptionName``; it has an entry of its
        own, whether a consumer is attached or not); "" for everything else.
    """

    destination: str
    queued: int
    unacknowledged: int
    consumers: int
    durable: bool = False
    subscription: str = ""

    @property
    def held(self) -> int:
        """Messages accepted and not yet consumed: ``queued + unacknowledged``."""
        return self.queued + self.unacknowledged

    @property
    def label(self) -> str:
        """A name for this entry, unique among a broker's: the destination, and
        for a durable subscription ``DESTINATION durable:CLIENT_ID:NAME``."""
        if self.subscription:
            return f"{self.destination} durable:{self.subscription}"
        return self.destination
