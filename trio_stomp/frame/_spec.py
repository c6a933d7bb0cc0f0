"""Names the STOMP specification (and the brokers' common extensions) fix.

The client, the broker, the command line and bridges all need these; they are
defined once, here in the sans-IO layer.
"""

from __future__ import annotations

from typing import Final, Literal

#: A subscription's ``ack`` header: the broker forgets a message when it is sent
#: ("auto"), or on an ACK of it or of a later one ("client", cumulative), or
#: of it alone ("client-individual").
AckMode = Literal["auto", "client", "client-individual"]
ACK_MODES: Final[tuple[AckMode, ...]] = ("auto", "client", "client-individual")

#: SUBSCRIBE headers that bound the messages in flight: RabbitMQ's and ActiveMQ's.
#: Each broker ignores the other's, so a client sends both.
PREFETCH_HEADERS: Final = ("prefetch-count", "activemq.prefetchSize")
#: The prefetch window asked for when the caller names none.
DEFAULT_PREFETCH: Final = 1000

#: SEND headers that come from the frame's own arguments (where it goes, its
#: receipt, its transaction, its length), never from a caller's extra headers.
SEND_RESERVED_HEADERS: Final = frozenset(
    {"destination", "receipt", "transaction", "content-length"}
)
#: CONNECT headers that come from connect()'s own arguments (the versions, the
#: virtual host, the credentials, the heart-beats), never from its extra headers.
CONNECT_RESERVED_HEADERS: Final = frozenset(
    {"accept-version", "host", "login", "passcode", "heart-beat"}
)
#: SUBSCRIBE headers that come from the subscription's own arguments.
SUBSCRIBE_RESERVED_HEADERS: Final = frozenset({"id", "destination", "ack", "receipt"})
#: MESSAGE headers the broker sets about one delivery, not part of the message.
DELIVERY_HEADERS: Final = frozenset({"message-id", "subscription", "ack", "redelivered"})
#: Headers a message handed on (to another SEND) must not carry: the SEND's own
#: plus the delivery's. The embedded broker drops them from a SEND's extras.
RESERVED_HEADERS: Final = SEND_RESERVED_HEADERS | DELIVERY_HEADERS
