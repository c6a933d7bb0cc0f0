"""The ``stomp`` sink: batches sent to a broker, each confirmed by a receipt or a transaction.

Per batch, either every SEND but the last without a receipt and the last
with one (``confirm = "receipt"``: the broker handles a connection's frames
in order, so its RECEIPT covers the batch), or the batch in a transaction
whose COMMIT carries the receipt (``confirm = "transaction"``; a batch
larger than the embedded broker lets one transaction hold is sent as
several, one after the other). Each SEND carries ``bridge-id: <message id>``
so that the id survives the broker and a ``stomp`` source downstream hands
out the same one.

A message whose frame would be larger than ``max_message_bytes`` (its body
plus its headers) is rejected alone, before anything is sent: it goes to the
dead-letter sink with a reason naming its size and the limit, and the rest
of its batch goes through. Without the check, the broker would answer the
oversized frame with an ERROR and close the connection, and the whole batch
would be retried until the route gave up on all of it. The limit defaults
to the embedded broker's frame limit for ``url = "embedded"`` (or a URL that
reaches it), else to :data:`DEFAULT_MAX_MESSAGE_BYTES`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final, Literal

import attrs

import trio_stomp
from trio_stomp.broker import Limits

from ..._endpoint import Context, InvalidSetting, MessageRejected
from ..._message import Message
from ..._template import Template, TemplateError
from ._connection import ID_HEADER, Connector, StompConnection

#: The size limit for a broker other than the embedded one: 16 MiB, the
#: embedded broker's frame limit and RabbitMQ 4's default ``max_message_size``
#: (ActiveMQ's STOMP frames may be larger). Raise it with ``max_message_bytes``.
DEFAULT_MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
#: Bytes of a SEND frame besides the body and the message's own headers
#: (command, destination, content-length, receipt, bridge-id names, separators).
_FRAME_OVERHEAD: Final = 160

#: Headers a SEND must not copy from the message (the client or the broker sets them).
_NOT_SENT: Final = frozenset(
    {
        "destination",
        "receipt",
        "transaction",
        "content-length",
        "subscription",
        "ack",
        "message-id",
        "redelivered",
        ID_HEADER,
    }
)


@attrs.frozen
class StompSinkConfig(StompConnection):
    """Send to a STOMP destination, confirmed per batch by a receipt or a transaction."""

    destination: str | None = None
    confirm: Literal["receipt", "transaction"] = "receipt"
    persistent: bool = False
    headers: dict[str, str] = attrs.field(factory=dict)
    max_message_bytes: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )


class StompSink:
    """Batches sent to a STOMP broker, each confirmed by a receipt or a committed transaction."""

    def __init__(self, config: StompSinkConfig, context: Context) -> None:
        self._config = config
        self._connector = Connector(config, context)
        self._destination: Template | None = None
        if config.destination is not None:
            try:
                self._destination = Template.parse(config.destination)
            except TemplateError as exc:
                raise InvalidSetting("destination", str(exc)) from None
        for name, value in config.headers.items():
            if name in _NOT_SENT or not name or "\0" in name + value:
                raise InvalidSetting(f"headers.{name}", "this header cannot be set here")
        extra = dict(config.headers)
        if config.persistent:
            extra["persistent"] = "true"
        self._extra = extra

    @classmethod
    def build(cls, config: StompSinkConfig, context: Context) -> StompSink:
        return cls(config, context)

    @property
    def confirm(self) -> str:
        """How a batch is confirmed: "receipt" or "transaction"."""
        return self._config.confirm

    @property
    def max_message_bytes(self) -> int:
        """The largest frame (body and headers) this sink sends, bytes."""
        if self._config.max_message_bytes is not None:
            return self._config.max_message_bytes
        if self._connector.embedded:
            broker = self._connector.broker
            return (broker.limits if broker is not None else Limits()).max_frame_size
        return DEFAULT_MAX_MESSAGE_BYTES

    @property
    def max_transaction_bytes(self) -> int | None:
        """The most one transaction may hold (the embedded broker's limit), or None: unknown."""
        if self._connector.embedded:
            broker = self._connector.broker
            return (broker.limits if broker is not None else Limits()).max_transaction_bytes
        return None

    def describe(self) -> str:
        where = self._config.destination or "the message's destination"
        return f"stomp {where} on {self._connector.where}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_StompWriter]:
        async with self._connector.connect() as client:
            yield _StompWriter(client, self)

    def prepare(self, message: Message, limit: int | None = None) -> tuple[str, dict[str, str]]:
        """The destination and SEND headers of ``message``.

        Args:
          limit: the largest frame, bytes (default: :attr:`max_message_bytes`;
            a writer looks it up once, not per message).

        Raises:
          ValueError: no destination, a header STOMP cannot carry, or too big.
        """
        if message.destination:
            destination = message.destination
        elif self._destination is not None:
            destination = self._destination.render(message)
        else:
            raise ValueError("no destination: set the sink's destination or use a transform")
        headers = {}
        for name, value in message.headers.items():
            if name in _NOT_SENT:
                continue
            if not name or "\0" in name or "\0" in value:
                raise ValueError(f"header {name!r} cannot be sent over STOMP (NUL or empty)")
            headers[name] = value
        headers.update(self._extra)
        headers[ID_HEADER] = message.id
        _check_size(
            message.body, destination, headers, self.max_message_bytes if limit is None else limit
        )
        return destination, headers


def _check_size(body: bytes, destination: str, headers: dict[str, str], limit: int) -> None:
    """Raise ValueError if the SEND frame would be larger than ``limit`` bytes."""
    size = len(body) + _FRAME_OVERHEAD
    chars = len(destination) + sum(len(name) + len(value) + 2 for name, value in headers.items())
    if size + 4 * chars > limit:  # (UTF-8: at most 4 bytes a character; else count exactly)
        size += len(destination.encode())
        for name, value in headers.items():
            size += len(name.encode()) + len(value.encode()) + 2
        if size > limit:
            raise ValueError(
                f"the message is {size} bytes (a body of {len(body)} and its headers), "
                f"more than max_message_bytes = {limit}"
            )


class _StompWriter:
    def __init__(self, client: trio_stomp.Client, sink: StompSink) -> None:
        self._client = client
        self._sink = sink
        self._transaction = sink.confirm == "transaction"
        self._limit = sink.max_message_bytes
        self._transaction_limit = sink.max_transaction_bytes

    async def write(self, batch: Sequence[Message]) -> None:
        frames = []
        bad: list[int] = []
        reasons: list[str] = []
        for index, message in enumerate(batch):
            try:
                destination, headers = self._sink.prepare(message, self._limit)
            except ValueError as exc:
                bad.append(index)
                reasons.append(str(exc))
                continue
            frames.append((destination, message.body, headers))
        if bad:
            raise MessageRejected(reasons[0], bad)
        client = self._client
        if self._transaction:
            # A batch larger than the broker lets one transaction hold goes in several,
            # each committed (and durable) before the next; the batch is acked after all.
            for group in _transactions(frames, self._transaction_limit):
                async with client.transaction(receipt=True) as transaction:
                    for destination, body, headers in group:
                        await transaction.send(destination, body, headers=headers)
            return
        last = len(frames) - 1
        for index, (destination, body, headers) in enumerate(frames):
            await client.send(destination, body, headers=headers, receipt=index == last)


_Frame = tuple[str, bytes, dict[str, str]]


def _transactions(frames: list[_Frame], limit: int | None) -> list[list[_Frame]]:
    """``frames`` cut into runs whose size (counted as :func:`_check_size` does) fits ``limit``."""
    if limit is None:
        return [frames]
    groups: list[list[_Frame]] = [[]]
    held = 0
    for frame in frames:
        destination, body, headers = frame
        size = len(body) + _FRAME_OVERHEAD + len(destination.encode())
        size += sum(len(n.encode()) + len(v.encode()) + 2 for n, v in headers.items())
        if groups[-1] and held + size > limit:
            groups.append([])
            held = 0
        groups[-1].append(frame)
        held += size
    return groups
