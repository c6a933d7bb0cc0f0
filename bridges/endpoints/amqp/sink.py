"""The ``amqp`` sink: publisher confirms, persistent, mandatory: nothing vanishes unrouted.

A batch is published in one go on a channel in confirm mode, then every
confirmation is awaited: the write returns when the broker has taken
responsibility for each message (``basic.ack``; for a persistent message to
a durable queue that means written to disk). Every publish is ``mandatory``:
a message no queue is bound for comes back (``basic.return``) and is a
:class:`bridges.MessageRejected`, so it goes to the dead-letter sink instead
of being confirmed into nowhere. (RabbitMQ Shovel acks exactly these at
the source and loses them; this sink does not.)

The engine writes the rest of a batch again after a rejection; the messages
of that batch that the broker had already confirmed are not published a
second time (the writer remembers them for the next write).

aiormq matches a returned message to its publish by ``message-id``, so two
messages with the same id are never in flight at once: a batch that holds
one id twice is published in rounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import aio_pika
import aiormq
import attrs
import trio
from attrs.validators import ge

from bridges import Context, InvalidSetting, Message, MessageRejected, Template, TemplateError

from .._asyncio import AsyncioLoop
from ._connection import AmqpConnection, Connector, one_line
from ._headers import SHORTSTR, to_amqp

#: RabbitMQ 4's default ``max_message_size`` (16 MiB); a bigger publish closes the channel.
DEFAULT_MAX_MESSAGE: Final = 16 * 1024 * 1024


@attrs.frozen
class AmqpSinkConfig(AmqpConnection):
    """Publish to an AMQP exchange: publisher confirms, persistent, mandatory."""

    exchange: str = ""
    routing_key: str = ""
    persistent: bool = True
    confirm_timeout: float = attrs.field(default=30.0, validator=ge(0.1))
    max_message_size: int = attrs.field(default=DEFAULT_MAX_MESSAGE, validator=ge(1))


class AmqpSink:
    """Batches published to an AMQP exchange, each message confirmed by the broker."""

    def __init__(self, config: AmqpSinkConfig, context: Context) -> None:
        if len(config.exchange.encode()) > SHORTSTR:
            raise InvalidSetting("exchange", "longer than 255 bytes")
        try:
            self._routing_key = Template.parse(config.routing_key)
        except TemplateError as exc:
            raise InvalidSetting("routing_key", str(exc)) from None
        self._config = config
        self._connector = Connector(config, context)

    @classmethod
    def build(cls, config: AmqpSinkConfig, context: Context) -> AmqpSink:
        return cls(config, context)

    def describe(self) -> str:
        exchange = self._config.exchange or "(default exchange)"
        key = self._config.routing_key or "the message's destination"
        return f"amqp {exchange} key {key} on {self._connector.where}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_AmqpWriter]:
        connector = self._connector
        name = self._config.exchange
        async with connector.connect(confirms=True) as (aio, channel):
            try:
                if name:
                    exchange = await aio.run(channel.get_exchange, name, ensure=True)
                else:
                    exchange = channel.default_exchange
            except aiormq.exceptions.AMQPError as exc:
                raise connector.error(f"exchange {name!r}", exc) from None
            yield _AmqpWriter(aio, exchange, self, self._config.confirm_timeout)

    def prepare(self, message: Message) -> tuple[str, aio_pika.Message]:
        """The routing key and the AMQP message for ``message``.

        Raises:
          ValueError: it can never be published (too big, a bad header, no key).
        """
        size = len(message.body)
        if size > self._config.max_message_size:
            raise ValueError(
                f"{size} bytes is over max_message_size ({self._config.max_message_size})"
            )
        key = message.destination or self._routing_key.render(message)
        if len(key.encode()) > SHORTSTR:
            raise ValueError(f"routing key {key[:40]!r}... is longer than 255 bytes")
        return key, to_amqp(message, persistent=self._config.persistent)


class _AmqpWriter:
    def __init__(self, aio: AsyncioLoop, exchange: Any, sink: AmqpSink, timeout: float) -> None:
        self._aio = aio
        self._exchange = exchange
        self._sink = sink
        self._timeout = timeout
        #: Messages the broker confirmed in a write that ended in MessageRejected.
        self._confirmed: dict[int, Message] = {}

    async def write(self, batch: Sequence[Message]) -> None:
        already, self._confirmed = self._confirmed, {}
        todo: list[tuple[int, str, aio_pika.Message]] = []
        bad: dict[int, str] = {}
        for index, message in enumerate(batch):
            if already.get(id(message)) is message:
                continue
            try:
                key, outgoing = self._sink.prepare(message)
            except (ValueError, TemplateError) as exc:
                bad[index] = str(exc)
                continue
            todo.append((index, key, outgoing))
        confirmed: list[int] = []
        for round_ in _rounds(todo):
            try:
                with trio.fail_after(self._timeout):
                    results = await self._aio.run(self._publish, round_)
            except trio.TooSlowError:
                raise TimeoutError(
                    f"the broker did not confirm {len(round_)} message(s) in {self._timeout:g} s"
                ) from None
            for (index, key, _), result in zip(round_, results, strict=True):
                if isinstance(result, aiormq.exceptions.PublishError):
                    bad[index] = _unroutable(result, self._exchange.name, key)
                elif isinstance(result, BaseException):
                    raise ConnectionError(f"publishing failed: {one_line(result)}") from result
                else:
                    confirmed.append(index)
        if bad:
            self._confirmed = {id(batch[i]): batch[i] for i in confirmed}
            indices = sorted(bad)
            raise MessageRejected(bad[indices[0]], indices)

    async def _publish(self, round_: list[tuple[int, str, aio_pika.Message]]) -> list[Any]:
        publish = self._exchange.publish
        return await asyncio.gather(
            *(publish(outgoing, key, mandatory=True) for _, key, outgoing in round_),
            return_exceptions=True,
        )


def _unroutable(error: aiormq.exceptions.PublishError, exchange: str, key: str) -> str:
    frame = error.frame
    text = getattr(frame, "reply_text", None) or "returned"
    return f"unroutable: {text} (exchange {exchange or '(default)'!r}, routing key {key!r})"


def _rounds(
    todo: list[tuple[int, str, aio_pika.Message]],
) -> list[list[tuple[int, str, aio_pika.Message]]]:
    """``todo`` split so that no message id appears twice in one round (usually one round)."""
    rounds: list[list[tuple[int, str, aio_pika.Message]]] = []
    seen: list[set[str]] = []
    for item in todo:
        message_id = item[2].message_id or ""
        for ids, round_ in zip(seen, rounds, strict=True):
            if not message_id or message_id not in ids:
                ids.add(message_id)
                round_.append(item)
                break
        else:
            seen.append({message_id})
            rounds.append([item])
    return rounds
