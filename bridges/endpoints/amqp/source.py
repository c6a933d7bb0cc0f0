"""The ``amqp`` source: one queue, manual acks, ``basic.qos`` = the route's window.

Each delivery is one envelope. The broker sends at most ``prefetch``
unacked deliveries (``basic.qos``), which is the route's in-flight window by
default: the backpressure, and the bound on duplicates after a crash. An
ack marks the delivery tag settled; a background task sends what was settled
since its last turn, as ONE ``basic.ack(multiple=true)`` for the longest run
of settled tags from the oldest open one, and single acks only for tags
settled out of order. A nack (with an error, or a release at shutdown) is
``basic.nack(requeue=true)``: the broker delivers it again, flagged
``redelivered``. Closing the channel returns whatever is still unacked.

A message over ``max_body`` (default 128 MiB, ``MAX_BODY``: a broker whose
``max_message_size`` is larger) is not read: its body frames are dropped as
they come and it is handed out as an :class:`~bridges.UnreadableEnvelope`
with its headers and an empty body. With a dead-letter sink the engine writes
that record there; either way the source settles it with
``basic.reject(requeue=false)``, so a queue with a dead-letter exchange keeps
the whole message there (without one, the broker drops it), logged at ERROR
with the limit and the delivery tag. It never loops: it is not requeued
(unless released at a stop or a failed dead-letter write, as any message).

The id: the ``bridge-id`` header, else ``ROUTE/`` and the ``message_id``
property (namespaced by the route's name: two publishers' ids never meet), both
stable. A message with neither has no stable id: its id is empty (no sink
de-duplicates it), unless ``id_from_content = true`` makes it a digest of
its body and headers (then two identical messages are one to a
de-duplicating sink, which is why it is a choice), or ``id_template`` makes
it from headers the publisher keeps the same and ``{body_hash}`` (see
:mod:`bridges.endpoints._id_template`).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Final, Protocol

import attrs
import trio
from attrs.validators import and_, ge, le, optional
from pamqp import commands

from bridges import Context, Envelope, InvalidSetting, Message, UnreadableEnvelope

from .._id_template import IdTemplate, id_namespace, id_template_setting
from ._channel import Delivery
from ._client import CLOSE_TIMEOUT, MAX_BODY
from ._connection import AmqpConnection, Connector
from ._headers import SHORTSTR, to_headers

#: AMQP's prefetch-count is a 16-bit field.
MAX_PREFETCH: Final = 65535
#: How a settled delivery goes on the wire.
_ACK, _REQUEUE, _DROP = "ack", "requeue", "drop"

log = logging.getLogger("bridges.amqp")


@attrs.frozen
class AmqpSourceConfig(AmqpConnection):
    """Consume an AMQP 0-9-1 queue (manual acks, basic.qos = the route's window).

    Attributes:
      queue: required: the queue to consume (it must exist unless
        ``declare = true``).
      prefetch: the ``basic.qos`` prefetch count; default: the route's
        ``in_flight``.
      declare: true declares the queue (durable) when it is missing.
      bind_exchange: with ``declare``: bind the queue to this exchange.
      bind_key: the routing key of that binding.
      id_from_content: true: a message without ``bridge-id`` or
        ``message_id`` gets an id made from its content (two equal messages
        become one); false: its id is empty.
      id_template: the message id made from its headers and body
        (``{header:NAME}``, ``{body_hash}``, ``{id}``: the id above) for
        messages whose publisher sets no ``message_id``; default: none.
      max_body: the largest message body read, bytes (default 128 MiB,
        ``MAX_BODY``); a larger one is not read but dead-lettered (see the
        module's notes).
    """

    queue: str = ""
    prefetch: int | None = attrs.field(
        default=None, validator=optional(and_(ge(1), le(MAX_PREFETCH)))
    )
    declare: bool = False
    bind_exchange: str | None = None
    bind_key: str = ""
    id_from_content: bool = False
    id_template: str | None = None
    max_body: int = attrs.field(default=MAX_BODY, validator=and_(ge(1), le(MAX_BODY)))


class AmqpSource:
    """Envelopes from one AMQP queue."""

    def __init__(self, config: AmqpSourceConfig, context: Context) -> None:
        if not config.queue:
            raise InvalidSetting("queue", "missing (required)")
        if len(config.queue.encode()) > SHORTSTR:
            raise InvalidSetting("queue", "longer than 255 bytes")
        if config.bind_exchange and not config.declare:
            raise InvalidSetting("bind_exchange", "needs declare = true")
        self._config = config
        self._context = context
        self._connector = Connector(config, context, max_body=config.max_body)
        self._window = min(config.prefetch or context.in_flight, MAX_PREFETCH)
        self._id_template = id_template_setting(config.id_template)

    @classmethod
    def build(cls, config: AmqpSourceConfig, context: Context) -> AmqpSource:
        return cls(config, context)

    def describe(self) -> str:
        return f"amqp queue {self._config.queue} on {self._connector.where}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_AmqpReceiver]:
        connector = self._connector
        config = self._config
        name = config.queue
        async with connector.connect(confirms=False) as channel:
            try:
                with trio.fail_after(config.connect_timeout):
                    await channel.qos(self._window)
                    declare = commands.Queue.Declare(
                        queue=name, passive=not config.declare, durable=True
                    )
                    await channel.rpc(declare, commands.Queue.DeclareOk)
                    if config.declare and config.bind_exchange:
                        bind = commands.Queue.Bind(
                            queue=name, exchange=config.bind_exchange, routing_key=config.bind_key
                        )
                        await channel.rpc(bind, commands.Queue.BindOk)
            except trio.TooSlowError:
                raise connector.error(f"queue {name!r}", TimeoutError("no answer")) from None
            except ConnectionError as exc:
                raise connector.error(f"queue {name!r}", exc) from None
            receiver = _AmqpReceiver(channel, f"amqp {name}")
            receiver.id_from_content = config.id_from_content
            receiver.namespace = id_namespace(self._context.route)
            receiver.id_template = self._id_template
            receiver.max_body = config.max_body
            async with trio.open_nursery() as nursery:
                nursery.start_soon(receiver.run_settler)
                try:
                    with trio.fail_after(config.connect_timeout):
                        await channel.consume(name, self._window)
                except (ConnectionError, trio.TooSlowError) as exc:
                    raise connector.error(f"consuming from {name!r}", exc) from None
                try:
                    yield receiver
                finally:
                    # Settled acks reach the broker before the channel closes
                    # (which would hand those messages out again).
                    with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                        try:
                            await receiver.flush()
                        except ConnectionError:  # the channel is gone: they come again
                            pass
                    nursery.cancel_scope.cancel()


class Settling(Protocol):
    """What the receiver needs of its channel to settle deliveries (:class:`._channel.Channel`)."""

    async def settle(self, ops: Sequence[tuple[str, int, bool]]) -> None: ...

    async def next_delivery(self) -> Delivery: ...


class _AmqpReceiver:
    def __init__(self, channel: Settling, origin: str) -> None:
        self.origin = origin
        self._channel = channel
        #: Delivery tags handed out and not yet settled on the wire, oldest first.
        self._open: collections.deque[int] = collections.deque()
        #: Settled tags not yet sent: tag -> _ACK, _REQUEUE or _DROP.
        self._settled: dict[int, str] = {}
        #: Settled tags recorded by envelopes, not yet taken by a flush.
        self._todo: list[tuple[int, str]] = []
        self._wake = trio.Event()
        self._flush_lock = trio.Lock()
        #: Without bridge-id or message_id: the id from body and headers (else empty).
        self.id_from_content = False
        #: The namespace of the ids this source makes (its route): :func:`id_namespace`.
        self.namespace = ""
        #: Makes each message's id, when the config gives one.
        self.id_template: IdTemplate | None = None
        #: The source's ``max_body`` (named in the error of a message over it).
        self.max_body = MAX_BODY

    async def receive(self) -> Envelope:
        try:
            incoming = await self._channel.next_delivery()
        except ConnectionError as exc:
            raise ConnectionError(f"{self.origin}: {exc}") from exc
        headers, stable = to_headers(
            incoming, id_from_content=self.id_from_content, namespace=self.namespace
        )
        tag = incoming.delivery_tag
        self._open.append(tag)
        message = Message(incoming.body, headers, stable)
        if self.id_template is not None:
            message = self.id_template.apply(message)
        if incoming.oversize:
            error = ValueError(
                f"a message of {incoming.oversize} bytes, over max_body ({self.max_body}); "
                f"its body was not read"
            )
            return _TooBigEnvelope(message, self, tag, error)
        return _AmqpEnvelope(message, self, tag)

    def note_delivered(self, tags: Iterable[int]) -> None:
        """Delivery tags handed out, in order: open until settled."""
        self._open.extend(tags)

    def put(self, tag: int, how: str) -> None:
        """Record a settled delivery, ``_ACK``, ``_REQUEUE`` or ``_DROP`` (never waits:
        an ``ack()`` cannot be cancelled half-way)."""
        self._todo.append((tag, how))
        self._wake.set()

    async def run_settler(self) -> None:
        """Send what was settled, a turn at a time, until cancelled (an error fails the source)."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await self.flush()

    async def flush(self) -> None:
        """Send everything settled so far (after any flush under way), shielded and bounded:
        acks taken off the list must reach the wire even when the source is being cancelled,
        or the broker would hand out again what the sink already holds."""
        async with self._flush_lock:
            todo, self._todo = self._todo, []
            if todo:
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + CLOSE_TIMEOUT
                    await self.send_settled(todo)
                if scope.cancelled_caught:
                    raise ConnectionError(
                        f"{self.origin}: settling {len(todo)} message(s) took over "
                        f"{CLOSE_TIMEOUT:g} s"
                    )

    async def send_settled(self, settled: list[tuple[int, str]]) -> None:
        """Acks, requeues and rejects in as few frames as possible, in one write."""
        self._settled.update(settled)
        pending = self._settled
        opened = self._open
        ops: list[tuple[str, int, bool]] = []
        run_end = 0
        while opened and opened[0] in pending:
            tag = opened.popleft()
            how = pending.pop(tag)
            if how == _ACK:
                run_end = tag
                continue
            if run_end:
                ops.append(("ack", run_end, True))
                run_end = 0
            ops.append(_op(tag, how))
        if run_end:
            ops.append(("ack", run_end, True))
        for tag, how in list(pending.items()):  # settled out of order: one by one
            opened.remove(tag)
            del pending[tag]
            ops.append(("ack", tag, False) if how == _ACK else _op(tag, how))
        if ops:
            await self._channel.settle(ops)


class _AmqpEnvelope(Envelope):
    __slots__ = ("_receiver", "_tag")

    def __init__(self, message: Message, receiver: _AmqpReceiver, tag: int) -> None:
        super().__init__(message, ack=self._ack_now, nack=self._nack_now, origin=receiver.origin)
        self._receiver = receiver
        self._tag = tag

    async def _ack_now(self) -> None:
        self._receiver.put(self._tag, _ACK)

    async def _nack_now(self, error: BaseException | None) -> None:
        self._receiver.put(self._tag, _REQUEUE)


def _op(tag: int, how: str) -> tuple[str, int, bool]:
    """A requeue (``basic.nack(requeue=true)``) or a drop (``basic.reject(requeue=false)``)."""
    return ("nack", tag, True) if how == _REQUEUE else ("reject", tag, False)


class _TooBigEnvelope(UnreadableEnvelope):
    """A delivery over ``max_body``: its headers, no body (see the module's notes).

    Acked (the engine dead-lettered it) or nacked with an error (no
    dead-letter sink): ``basic.reject(requeue=false)``, to the queue's
    dead-letter exchange if it has one. Released (nacked with None):
    requeued, as any message.
    """

    __slots__ = ("_receiver", "_tag")

    def __init__(
        self, message: Message, receiver: _AmqpReceiver, tag: int, error: BaseException
    ) -> None:
        super().__init__(
            message, ack=self._ack_now, nack=self._nack_now, origin=receiver.origin, error=error
        )
        self._receiver = receiver
        self._tag = tag

    async def _ack_now(self) -> None:
        self._drop(
            "dead-lettered, and rejected (requeue=false): the broker's dead-letter "
            "exchange keeps the whole message if the queue has one"
        )

    async def _nack_now(self, error: BaseException | None) -> None:
        if error is None:
            self._receiver.put(self._tag, _REQUEUE)
            return
        self._drop(
            "rejected (requeue=false), no dead-letter sink: the broker's dead-letter "
            "exchange keeps it if the queue has one, else it is dropped"
        )

    def _drop(self, what: str) -> None:
        """Say what became of it (ERROR), and reject it without requeue."""
        log.error(
            "%s: delivery tag %d (id %r): %s; %s",
            self._receiver.origin, self._tag, self.message.id, self.error, what,
        )  # fmt: skip
        self._receiver.put(self._tag, _DROP)
