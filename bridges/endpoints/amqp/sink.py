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

A returned message is matched to its publish by ``message-id`` (a return
carries no delivery tag), so two messages with the same id are never in
flight at once: a batch that holds one id twice is published in rounds. A
message without an id gets a random ``message-id``, as aiormq gave it.

A round goes out in as few writes as its size allows (the frames of many
messages in one ``send_all``), and its confirms are then awaited together:
the reader marks each delivery tag as the broker's ``basic.ack`` (usually
``multiple``) arrives (:mod:`._channel`).

A message over ``max_message_size`` is rejected alone before it is sent. A
broker whose own ``max_message_size`` is smaller closes the channel at such a
publish (``PRECONDITION_FAILED - message size N is larger than configured max
size M``): the write fails (the engine reopens and retries), and from then on
the sink rejects every message over M alone, with that reason, so the batch
does not fail in a loop.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

import attrs
import trio
from attrs.validators import ge
from pamqp import commands

from bridges import Context, InvalidSetting, Message, MessageRejected, Template, TemplateError

from ._channel import Channel, Nacked, Publish, ServerClosed
from ._connection import AmqpConnection, Connector, one_line
from ._headers import SHORTSTR, max_head, to_amqp

#: RabbitMQ's default ``frame_max`` (128 KiB), used until a connection says its own.
DEFAULT_FRAME_MAX: Final = 131072
#: RabbitMQ 4's default ``max_message_size`` (16 MiB); a bigger publish closes the channel.
DEFAULT_MAX_MESSAGE: Final = 16 * 1024 * 1024
#: RabbitMQ's reply text when a publish is over its ``max_message_size``.
_BROKER_TOO_BIG: Final = re.compile(
    r"message size \d+ is larger than (?:configured )?max size (\d+)"
)


@attrs.frozen
class AmqpSinkConfig(AmqpConnection):
    """Publish to an AMQP exchange: publisher confirms, persistent, mandatory.

    Attributes:
      exchange: the exchange to publish to (it must exist); ``""`` is the
        default exchange.
      routing_key: the routing key, a template; a ``destination`` transform
        overrides it.
      persistent: true publishes with delivery mode 2 (kept on disk).
      confirm_timeout: how long the batch's publisher confirms may take before
        the write fails (and is retried), s.
      max_message_size: a larger message is rejected, bytes (RabbitMQ 4's
        default; 3.x allows 128 MiB).
    """

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
        #: The broker's ``max_message_size``, once a publish over it closed the channel.
        self.broker_max: int | None = None

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
        async with connector.connect(confirms=True) as channel:
            if name:
                try:
                    with trio.fail_after(self._config.connect_timeout):
                        await channel.rpc(
                            commands.Exchange.Declare(exchange=name, passive=True),
                            commands.Exchange.DeclareOk,
                        )
                except trio.TooSlowError:
                    raise connector.error(f"exchange {name!r}", TimeoutError("no answer")) from None
                except ConnectionError as exc:
                    raise connector.error(f"exchange {name!r}", exc) from None
            yield _AmqpWriter(channel, self, self._config.confirm_timeout)

    def prepare(self, message: Message, frame_max: int = DEFAULT_FRAME_MAX) -> Publish:
        """The ``basic.publish`` for ``message``.

        Args:
          frame_max: the connection's largest frame (the headers must fit one).

        Raises:
          ValueError: it can never be published (too big, a bad header, no key).
        """
        size = len(message.body)
        if size > self._config.max_message_size:
            raise ValueError(
                f"{size} bytes is over max_message_size ({self._config.max_message_size})"
            )
        if self.broker_max is not None and size > self.broker_max:
            raise ValueError(
                f"{size} bytes is over the broker's max_message_size ({self.broker_max}, "
                f"as it said when it closed the channel at a larger publish)"
            )
        key = message.destination or self._routing_key.render(message)
        if len(key.encode()) > SHORTSTR:
            raise ValueError(f"routing key {key[:40]!r}... is longer than 255 bytes")
        properties = to_amqp(
            message, persistent=self._config.persistent, max_head=max_head(frame_max)
        )
        return Publish(self._config.exchange, key, message.body, properties)


class _AmqpWriter:
    def __init__(self, channel: Channel, sink: AmqpSink, timeout: float) -> None:
        self._channel = channel
        self._sink = sink
        self._timeout = timeout
        #: Messages the broker confirmed in a write that ended in MessageRejected.
        self._confirmed: dict[int, Message] = {}
        self._frame_max = channel.client.frame_max or DEFAULT_FRAME_MAX

    async def write(self, batch: Sequence[Message]) -> None:
        already, self._confirmed = self._confirmed, {}
        todo: list[tuple[int, Publish]] = []
        bad: dict[int, str] = {}
        frame_max = self._frame_max
        for index, message in enumerate(batch):
            if already.get(id(message)) is message:
                continue
            try:
                todo.append((index, self._sink.prepare(message, frame_max)))
            except (ValueError, TemplateError) as exc:
                bad[index] = str(exc)
        confirmed: list[int] = []
        for round_ in _rounds(todo):
            publishes = [publish for _, publish in round_]
            try:
                with trio.fail_after(self._timeout):
                    results = await self._channel.publish(publishes)
            except trio.TooSlowError:
                blocked = self._channel.client.blocked
                why = f" (it blocked publishing: {blocked})" if blocked else ""
                raise TimeoutError(
                    f"the broker did not confirm {len(round_)} message(s) in "
                    f"{self._timeout:g} s{why}"
                ) from None
            except (Nacked, ServerClosed) as exc:
                too_big = _BROKER_TOO_BIG.search(str(exc))
                if too_big:  # (rejected alone from the retry on)
                    self._sink.broker_max = int(too_big.group(1))
                raise ConnectionError(f"publishing failed: {one_line(exc)}") from exc
            for (index, publish), returned in zip(round_, results, strict=True):
                if returned is None:
                    confirmed.append(index)
                else:
                    bad[index] = _unroutable(returned, publish)
        if bad:
            self._confirmed = {id(batch[i]): batch[i] for i in confirmed}
            raise MessageRejected.each(bad)


def _unroutable(text: str, publish: Publish) -> str:
    exchange, key = publish.exchange or "(default)", publish.routing_key
    return f"unroutable: {text} (exchange {exchange!r}, routing key {key!r})"


def _rounds(todo: list[tuple[int, Publish]]) -> list[list[tuple[int, Publish]]]:
    """``todo`` split so that no message id appears twice in one round (usually one round)."""
    rounds: list[list[tuple[int, Publish]]] = []
    seen: list[set[str]] = []
    for item in todo:
        message_id = item[1].properties.message_id or ""
        for ids, round_ in zip(seen, rounds, strict=True):
            if not message_id or message_id not in ids:
                ids.add(message_id)
                round_.append(item)
                break
        else:
            seen.append({message_id})
            rounds.append([item])
    return rounds
