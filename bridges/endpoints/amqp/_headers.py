"""AMQP 0-9-1 message properties <-> bridge message headers (the table in docs/howto/amqp.md).

A property becomes a header of the same meaning (``content-type``,
``correlation-id``...), the headers table becomes headers one for one, and
where the message came from (exchange, routing key, redelivered) becomes
``amqp-*`` headers a transform or a routing template can use. The sink maps
them back, so amqp -> amqp keeps every property it knows; delivery headers
(``amqp-exchange``, ``amqp-routing-key``, ``amqp-redelivered``) describe one
delivery and are not copied onward.

The stable id travels twice: as the AMQP ``message-id`` property and as the
``bridge-id`` entry of the headers table. The second one survives RabbitMQ's
STOMP plugin (which hands table entries to STOMP consumers as headers, as a
``stomp`` source expects), the first one is what AMQP tools show.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Final

from pamqp import commands

from bridges import Message

from ._channel import Delivery
from ._connection import ID_HEADER

#: property attribute -> header name (both directions).
PROPERTIES: Final = (
    ("content_type", "content-type"),
    ("content_encoding", "content-encoding"),
    ("correlation_id", "correlation-id"),
    ("reply_to", "reply-to"),
    ("type", "amqp-type"),
    ("app_id", "amqp-app-id"),
)
#: Headers about one delivery: set by the source, never sent on.
DELIVERY: Final = ("amqp-exchange", "amqp-routing-key", "amqp-redelivered")
PRIORITY: Final = "amqp-priority"
#: Headers the sink never copies into the headers table.
NOT_IN_TABLE: Final = frozenset(
    [name for _, name in PROPERTIES] + [*DELIVERY, PRIORITY, ID_HEADER, "message-id"]
)
#: AMQP short strings (table keys, routing keys) are at most this many bytes.
SHORTSTR: Final = 255


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


#: The same properties as pamqp names them.
DELIVERED: Final = tuple(
    ("message_type" if attribute == "type" else attribute, name) for attribute, name in PROPERTIES
)


def to_headers(
    incoming: Delivery, *, id_from_content: bool = False, namespace: str = ""
) -> tuple[dict[str, str], str]:
    """The headers and the stable id of a delivered message.

    The id: ``bridge-id`` from the headers table, else ``namespace`` and the
    ``message_id`` property; else, with ``id_from_content``, ``namespace`` and
    a digest of the body and the headers (less ``amqp-redelivered``, which a
    redelivery adds), else empty.
    """
    properties = incoming.properties
    headers: dict[str, str] = {}
    for name, value in (properties.headers or {}).items():
        if value is not None:
            headers[name] = _text(value)
    for attribute, name in DELIVERED:
        value = getattr(properties, attribute)
        if value:
            headers[name] = str(value)
    if properties.priority:
        headers[PRIORITY] = str(properties.priority)
    headers["amqp-exchange"] = incoming.exchange or ""
    headers["amqp-routing-key"] = incoming.routing_key or ""
    # A bridge-id was namespaced by the bridge that set it; a publisher's message_id or
    # the digest are unique at this source only: under ``namespace`` (ROUTE/).
    stable = headers.pop(ID_HEADER, "")
    if not stable and properties.message_id:
        stable = namespace + properties.message_id
    if not stable and id_from_content:
        # Nothing upstream named it: the content is what stays the same when it
        # is delivered again (so the digest is taken before amqp-redelivered).
        digest = hashlib.sha256(incoming.body)
        digest.update(repr(sorted(headers.items())).encode())
        stable = namespace + "sha256:" + digest.hexdigest()[:32]
    if incoming.redelivered:
        headers["amqp-redelivered"] = "true"
    return headers, stable


def max_head(frame_max: int) -> int:
    """The most bytes a message's headers table may take in a content header frame.

    AMQP 0-9-1 sends the properties in one frame, never split: ``frame_max``
    less the frame's own 8 bytes, the header's fixed 14 (class, weight, body
    size, property flags), the table's length (4) and the two one-byte
    properties (delivery mode, priority). :func:`to_amqp` counts the rest as
    it builds them: the table's entries and each short string (1 + its bytes).
    (Until 2026-11 it kept room for 16 short strings of 255 bytes whatever the
    message held, which left nothing at the protocol's smallest ``frame_max``,
    4096: every message was refused.)
    """
    return frame_max - 8 - 14 - 4 - 2


def _utf8(name: str, text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"header {name[:40]!r}: not UTF-8 text ({exc.reason} at position {exc.start}), "
            "which AMQP cannot carry"
        ) from None


def to_amqp(
    message: Message, *, persistent: bool, max_head: int | None = None
) -> commands.Basic.Properties:
    """The AMQP properties for ``message`` (its body goes as it is).

    Args:
      max_head: the most bytes its properties may take (see :func:`max_head`).

    Raises:
      ValueError: a header AMQP cannot carry (a table key over 255 bytes, a
        priority that is not 0..255, not UTF-8 text), or more of them than
        ``max_head``.
    """
    headers = message.headers
    table: dict[str, Any] = {}
    size = 0
    for name, value in headers.items():
        if name in NOT_IN_TABLE:
            continue
        key = len(_utf8(name, name))
        if not key or key > SHORTSTR:
            raise ValueError(f"header {name[:40]!r}... is not a valid AMQP table key (1-255 bytes)")
        # key (a short string), then the value as a long string: type, length, bytes
        size += key + 6 + (len(value) if value.isascii() else len(_utf8(name, value)))
        table[name] = value
    message_id = message.id or uuid.uuid4().hex
    if message.id:
        table[ID_HEADER] = message.id
        size += len(ID_HEADER) + 6 + len(_utf8(ID_HEADER, message.id))
    properties: dict[str, Any] = {
        attribute: headers[name] for attribute, name in PROPERTIES if headers.get(name)
    }
    for name, value in (("message-id", message_id), *properties.items()):
        length = len(_utf8(name, value))
        if length > SHORTSTR:  # (the id goes as a short string too)
            raise ValueError(f"{name} {value[:40]!r}... is longer than 255 bytes")
        size += 1 + length
    if max_head is not None and size > max_head:
        raise ValueError(
            f"headers and properties of {size} bytes: over the {max_head} that one AMQP "
            "frame leaves for them (the connection's frame_max)"
        )
    priority = headers.get(PRIORITY)
    if priority:
        if not (priority.isdigit() and int(priority) <= 255):
            raise ValueError(f"header {PRIORITY} must be 0..255, got {priority[:20]!r}")
        properties["priority"] = int(priority)
    if "type" in properties:
        properties["message_type"] = properties.pop("type")
    return commands.Basic.Properties(
        headers=table,
        # (as aiormq did: a confirmed publish always has an id, which a return is matched by)
        message_id=message_id,
        delivery_mode=2 if persistent else 1,
        **properties,
    )
