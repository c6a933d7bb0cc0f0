"""The ``stomp`` source and sink, on :func:`trio_stomp.connect`.

Source: one subscription with ``client-individual`` acks and a prefetch
window; each MESSAGE is one envelope, acked with ACK once the route's sink
holds it. A nack with an error sends NACK (RabbitMQ requeues it, ActiveMQ
dead-letters it by its redelivery policy); a release (shutdown) sends
nothing: the broker takes unacked messages back when we disconnect.

Sink: per batch, either every SEND but the last without a receipt and the
last with one (``confirm = "receipt"``: the broker handles a connection's
frames in order, so its RECEIPT covers the batch), or the batch in a
transaction whose COMMIT carries the receipt (``confirm = "transaction"``).
Each SEND carries ``bridge-id: <message id>`` so that the id survives the
broker and a ``stomp`` source downstream hands out the same one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final, Literal

import attrs
from attrs.validators import ge, optional

import trio_stomp
from trio_stomp._url import Endpoint

from ._endpoint import Context, InvalidSetting, MessageRejected
from ._message import ACKED, NACKED, OPEN, Envelope, Message, trusted_message
from ._template import Template, TemplateError

#: The header that carries a message's stable id across brokers.
ID_HEADER: Final = "bridge-id"
EMBEDDED: Final = "embedded"
#: MESSAGE headers about this delivery, not the message: not handed on.
#: (``message-id`` is one too; it becomes the id unless ``bridge-id`` is there.)
_DELIVERY_HEADERS: Final = ("subscription", "ack", "content-length")
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


def _heartbeat(
    instance: object, attribute: attrs.Attribute[tuple[int, ...]], value: object
) -> None:
    if not (isinstance(value, tuple) and len(value) == 2 and all(v >= 0 for v in value)):
        raise ValueError(f"expected [send_ms, expect_ms] (each >= 0), got {value!r}")


@attrs.frozen
class StompConnection:
    """The connection settings both stomp endpoints share."""

    url: str | tuple[str, ...] = "stomp://127.0.0.1:61613"
    login: str | None = None
    passcode: str | None = attrs.field(default=None, metadata={"secret": True}, repr=False)
    vhost: str | None = None
    heartbeat: tuple[int, ...] = attrs.field(default=(10_000, 10_000), validator=_heartbeat)
    connect_timeout: float = attrs.field(default=10.0, validator=ge(0.1))


@attrs.frozen
class StompSourceConfig(StompConnection):
    """Subscribe to a STOMP destination (client-individual acks, prefetch window)."""

    destination: str = ""
    prefetch: int | None = attrs.field(default=None, validator=optional(ge(1)))
    subscribe_headers: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class StompSinkConfig(StompConnection):
    """Send to a STOMP destination, confirmed per batch by a receipt or a transaction."""

    destination: str | None = None
    confirm: Literal["receipt", "transaction"] = "receipt"
    persistent: bool = False
    headers: dict[str, str] = attrs.field(factory=dict)


def _urls(config: StompConnection, context: Context) -> tuple[str, ...]:
    """The broker URLs, checked with the client's own parser.

    Several URLs make a failover list: each (re)start of the endpoint
    connects to the first that answers, in order.
    """
    urls = (config.url,) if isinstance(config.url, str) else config.url
    if not urls:
        raise InvalidSetting("url", "give at least one URL")
    if EMBEDDED in urls:
        if len(urls) != 1:
            raise InvalidSetting("url", '"embedded" cannot be part of a failover list')
        if not context.embedded:
            raise InvalidSetting("url", '"embedded" needs [broker] embedded = true')
        return urls
    for url in urls:
        try:
            Endpoint.from_url(url)
        except ValueError as exc:
            raise InvalidSetting("url", str(exc)) from None
    return urls


def _public(url: str) -> str:
    """The URL without credentials, for logs."""
    return Endpoint.from_url(url).url


class _Connector:
    def __init__(self, config: StompConnection, context: Context) -> None:
        self._config = config
        self._context = context
        self._urls = _urls(config, context)

    @property
    def where(self) -> str:
        if self._urls == (EMBEDDED,):
            return "embedded broker"
        return " or ".join(_public(url) for url in self._urls)

    @property
    def embedded(self) -> bool:
        """True when this connects to the config's embedded broker (by name or address)."""
        broker = self._context.broker
        if self._urls == (EMBEDDED,):
            return True
        if broker is None or len(self._urls) != 1:
            return False
        endpoint = Endpoint.from_url(self._urls[0])
        local = {broker.host, "localhost", "127.0.0.1"} if broker.host else {"localhost"}
        return endpoint.port == broker.port and endpoint.host in local

    def connect(self) -> AbstractAsyncContextManager[trio_stomp.Client]:
        urls: list[str] = list(self._urls)
        if urls == [EMBEDDED]:
            if self._context.broker is None:
                raise RuntimeError("the embedded broker is not running")
            urls = [self._context.broker.url]
        config = self._config
        send_ms, expect_ms = config.heartbeat
        return trio_stomp.connect(
            urls,
            login=config.login,
            passcode=config.passcode,
            vhost=config.vhost,
            heartbeat=(send_ms, expect_ms),
            connect_timeout=config.connect_timeout,
        )


# -- source ---------------------------------------------------------------------------


class StompSource:
    """Envelopes from one STOMP subscription."""

    def __init__(self, config: StompSourceConfig, context: Context) -> None:
        if not config.destination:
            raise InvalidSetting("destination", "missing (required)")
        self._config = config
        self._context = context
        self._connector = _Connector(config, context)

    @classmethod
    def build(cls, config: StompSourceConfig, context: Context) -> StompSource:
        return cls(config, context)

    def describe(self) -> str:
        return f"stomp {self._config.destination} on {self._connector.where}"

    def volatile_backlog(self) -> int | None:
        """Messages waiting for us in the embedded broker (lost if it stops), else None."""
        broker = self._context.broker
        if broker is None or not self._connector.embedded:
            return None
        return broker.queue_depth(self._config.destination)

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_StompReceiver]:
        config = self._config
        window = str(config.prefetch or self._context.in_flight)
        headers = {"prefetch-count": window, "activemq.prefetchSize": window}
        headers.update(config.subscribe_headers)
        async with self._connector.connect() as client:
            subscription = client.subscribe(
                config.destination, ack="client-individual", headers=headers
            )
            async with subscription:
                yield _StompReceiver(subscription, f"stomp {config.destination}")


class _StompReceiver:
    def __init__(self, subscription: trio_stomp.Subscription, origin: str) -> None:
        self._next = subscription.__anext__
        self._origin = origin

    async def receive(self) -> Envelope:
        try:
            received = await self._next()
        except StopAsyncIteration:
            raise trio_stomp.ConnectionLost("the subscription ended") from None
        pairs = received.headers.items()
        headers = dict(pairs)
        if len(headers) != len(pairs):  # a repeated header: the first one wins
            headers = {}
            for name, value in pairs:
                headers.setdefault(name, value)
        message_id = headers.pop("message-id", "")
        for name in _DELIVERY_HEADERS:
            headers.pop(name, None)
        message_id = headers.pop(ID_HEADER, "") or message_id
        message = trusted_message(received.body, headers, message_id)
        return _StompEnvelope(message, received, self._origin)


class _StompEnvelope(Envelope):
    """An envelope settled through the MESSAGE it came in.

    The same as ``Envelope(message, ack=received.ack, nack=...)``, without
    the two callables per message that would only forward to ``received``.
    """

    __slots__ = ("_received",)

    def __init__(self, message: Message, received: trio_stomp.Message, origin: str) -> None:
        self.message = message
        self.origin = origin
        self.state = OPEN
        self._received = received

    async def ack(self) -> None:
        if self.state is OPEN:
            self.state = ACKED
            await self._received.ack()

    async def nack(self, error: BaseException | None = None) -> None:
        if self.state is OPEN:
            self.state = NACKED
            if error is not None:
                await self._received.nack()
            # A release: the broker gets the message back when we unsubscribe.


# -- sink ---------------------------------------------------------------------------


class StompSink:
    """Batches sent to a STOMP broker, each confirmed by a receipt or a committed transaction."""

    def __init__(self, config: StompSinkConfig, context: Context) -> None:
        self._config = config
        self._connector = _Connector(config, context)
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
        self._transaction = sink._config.confirm == "transaction"

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
