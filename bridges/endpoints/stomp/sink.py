"""The ``stomp`` sink: batches sent to a broker, each confirmed by a receipt or a transaction.

Per batch, either every SEND but the last without a receipt and the last
with one (``confirm = "receipt"``: the broker handles a connection's frames
in order, so its RECEIPT covers the batch), or the batch in a transaction
whose COMMIT carries the receipt (``confirm = "transaction"``). Each SEND
carries ``bridge-id: <message id>`` so that the id survives the broker and a
``stomp`` source downstream hands out the same one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final, Literal

import attrs

import trio_stomp

from ..._endpoint import Context, InvalidSetting, MessageRejected
from ..._message import Message
from ..._template import Template, TemplateError
from ._connection import ID_HEADER, Connector, StompConnection

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

    def describe(self) -> str:
        where = self._config.destination or "the message's destination"
        return f"stomp {where} on {self._connector.where}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_StompWriter]:
        async with self._connector.connect() as client:
            yield _StompWriter(client, self)

    def prepare(self, message: Message) -> tuple[str, dict[str, str]]:
        """The destination and SEND headers of ``message``.

        Raises:
          ValueError: no destination, or a header STOMP cannot carry.
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
        return destination, headers


class _StompWriter:
    def __init__(self, client: trio_stomp.Client, sink: StompSink) -> None:
        self._client = client
        self._sink = sink
        self._transaction = sink.confirm == "transaction"

    async def write(self, batch: Sequence[Message]) -> None:
        frames = []
        bad: list[int] = []
        reasons: list[str] = []
        for index, message in enumerate(batch):
            try:
                destination, headers = self._sink.prepare(message)
            except ValueError as exc:
                bad.append(index)
                reasons.append(str(exc))
                continue
            frames.append((destination, message.body, headers))
        if bad:
            raise MessageRejected(reasons[0], bad)
        client = self._client
        if self._transaction:
            async with client.transaction(receipt=True) as transaction:
                for destination, body, headers in frames:
                    await transaction.send(destination, body, headers=headers)
            return
        last = len(frames) - 1
        for index, (destination, body, headers) in enumerate(frames):
            await client.send(destination, body, headers=headers, receipt=index == last)
