"""The ``stomp`` source: one subscription, client-individual acks, a prefetch window.

Messages come from the subscription in batches (``Subscription.batches``)
and go out one envelope each, handed to the route many at a time
(``receive_some``); an envelope is acked with ACK once the
route's sink holds it (the engine hands a run of them to ``ack_all``: one
write). A nack with an error sends NACK (RabbitMQ requeues it, ActiveMQ
dead-letters it by its redelivery policy); a release (shutdown) sends
nothing: the broker takes unacked messages back when we disconnect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

import attrs
import trio
from attrs.validators import ge, optional

import trio_stomp

from ..._endpoint import Context, InvalidSetting
from ..._guarantee import NOT_ASKED, PROBE_TIMEOUT, Guarantee
from ..._message import ACKED, NACKED, OPEN, Envelope, trusted_message
from .._id_template import IdTemplate, id_namespace, id_template_setting
from ._connection import ID_HEADER, Connector, StompConnection

#: The header RabbitMQ carries a publisher's AMQP ``message_id`` in: stable, where its
#: own ``message-id`` is not.
AMQP_MESSAGE_ID: Final = "amqp-message-id"


@attrs.frozen
class StompSourceConfig(StompConnection):
    """Subscribe to a STOMP destination (client-individual acks, prefetch window).

    Attributes:
      destination: required: the destination to subscribe to
        (``/queue/in``, ``/topic/orders``).
      prefetch: the broker's window (``prefetch-count``,
        ``activemq.prefetchSize``); default: the route's ``in_flight``.
      subscribe_headers: extra SUBSCRIBE headers (a ``selector``, a durable
        subscription's name).
      id_template: the message id made from its headers and body
        (``{header:NAME}``, ``{body_hash}``...) for messages without a
        stable id; default: ``bridge-id``, else ``ROUTE/`` and
        ``amqp-message-id``, else ``ROUTE/`` and the broker's ``message-id``.
    """

    destination: str = ""
    prefetch: int | None = attrs.field(default=None, validator=optional(ge(1)))
    subscribe_headers: dict[str, str] = attrs.field(factory=dict)
    id_template: str | None = None


class StompSource:
    """Envelopes from one STOMP subscription."""

    def __init__(self, config: StompSourceConfig, context: Context) -> None:
        if not config.destination:
            raise InvalidSetting("destination", "missing (required)")
        self._config = config
        self._context = context
        self._connector = Connector(config, context)
        self._id_template = id_template_setting(config.id_template)

    @classmethod
    def build(cls, config: StompSourceConfig, context: Context) -> StompSource:
        return cls(config, context)

    def describe(self) -> str:
        return f"stomp {self._config.destination} on {self._connector.where}"

    async def probe(self) -> Guarantee:
        """Connect (``bridges check --probe``): what the broker keeps is the producers' choice."""
        if self._connector.embedded:
            return Guarantee(NOT_ASKED, "the embedded broker: durable with [broker] data_dir")
        with trio.fail_after(PROBE_TIMEOUT + self._config.connect_timeout):
            async with self._connector.connect() as client:
                server = client.server or "the broker"
        return Guarantee(
            NOT_ASKED, f"{server} answered; it keeps what its producers sent persistent:true"
        )

    def volatile_backlog(self) -> int | None:
        """Messages waiting for us in the embedded broker (lost if it stops), else None."""
        broker = self._connector.broker
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
                receiver = _StompReceiver(
                    subscription, f"stomp {config.destination}", id_namespace(self._context.route)
                )
                receiver.id_template = self._id_template
                yield receiver


class _StompReceiver:
    """Takes the subscription's messages a batch at a time (one wake-up per read
    of the socket, not per message) and hands them out as many at a time as
    the route has room for. What it holds when the route closes is unacked:
    the broker takes it back."""

    def __init__(self, subscription: trio_stomp.Subscription, origin: str, namespace: str) -> None:
        self._next_batch = subscription.batches().__anext__
        self._pending: list[trio_stomp.Message] = []
        self._origin = origin
        self._namespace = namespace
        #: Makes each message's id, when the config gives one.
        self.id_template: IdTemplate | None = None

    async def receive(self) -> Envelope:
        return (await self.receive_some(1))[0]

    async def receive_some(self, most: int) -> list[Envelope]:
        pending = self._pending
        if not pending:
            try:
                # (cancel-safe: a cancelled wait takes nothing from the subscription)
                pending = self._pending = list(await self._next_batch())
            except StopAsyncIteration:
                raise trio_stomp.ConnectionLost("the subscription ended") from None
        if len(pending) <= most:
            chunk, self._pending = pending, []
        else:
            chunk = pending[:most]
            del pending[:most]
        origin, namespace = self._origin, self._namespace
        envelopes: list[Envelope] = [
            _StompEnvelope(received, origin, namespace) for received in chunk
        ]
        template = self.id_template
        if template is not None:
            for envelope in envelopes:
                envelope.message = template.apply(envelope.message)
        return envelopes


class _StompEnvelope(Envelope):
    """An envelope settled through the MESSAGE it came in.

    The same as ``Envelope(message, ack=received.ack, nack=...)``, without
    the two callables per message that would only forward to ``received``.
    """

    __slots__ = ("received", "settle_key")

    def __init__(self, received: trio_stomp.Message, origin: str, namespace: str) -> None:
        # The message to hand on: the MESSAGE's body and headers, less those about
        # its delivery; its id is ``bridge-id`` when there is one, else ROUTE/ and the
        # publisher's ``amqp-message-id`` (RabbitMQ), else ``message-id`` (stable on the embedded
        # broker and ActiveMQ, new on each delivery on RabbitMQ: tests/.../test_stomp_ids.py).
        # (Here, not in a function of its own: this runs for every message.)
        headers = received.headers.as_dict()  # (a repeated header: the first one wins)
        pop = headers.pop
        message_id = pop("message-id", "")
        pop("subscription", None)
        pop("ack", None)
        pop("receipt", None)  # the sender's SEND receipt: RabbitMQ passes it on
        pop("content-length", None)
        # (A bridge-id was namespaced by the bridge that set it; the others are the
        # broker's or a publisher's, unique only on that broker: under the route's name.)
        stable = pop(ID_HEADER, "")
        if not stable:
            upstream = headers.get(AMQP_MESSAGE_ID, "") or message_id
            stable = namespace + upstream if upstream else ""
        self.message = trusted_message(received.body, headers, stable)
        self.origin = origin
        self.state = OPEN
        self.received = received
        # Envelopes of one subscription and connection: acked together, in one write.
        self.settle_key = received.ack_group

    async def ack(self) -> None:
        if self.state is OPEN:
            self.state = ACKED
            await self.received.ack()

    async def ack_all(self, envelopes: Sequence[Envelope]) -> None:
        """One ACK each, in one write (``MessageBatch.ack``)."""
        received = []
        for envelope in envelopes:
            if isinstance(envelope, _StompEnvelope) and envelope.state is OPEN:
                envelope.state = ACKED
                received.append(envelope.received)
        if received:
            await trio_stomp.MessageBatch.of(received).ack()

    async def nack(self, error: BaseException | None = None) -> None:
        if self.state is OPEN:
            self.state = NACKED
            if error is not None:
                await self.received.nack()
            # A release: the broker gets the message back when we unsubscribe.
