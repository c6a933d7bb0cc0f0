"""The ``nats`` source: a JetStream durable pull consumer, explicit acks, window-sized fetches.

One pull request at a time asks for at most as many messages as the window has
room for (the messages handed out and not settled count against it), so
JetStream never has more outstanding for us than the engine can hold:
``max_ack_pending`` of the consumer is the window too. Each message is one
envelope:

- ack (the sink holds it durably): ``+ACK``;
- nack with an error (the write failed for good and there is no dead-letter
  sink): ``-NAK`` with ``nak_delay``, so JetStream redelivers it later rather
  than at once;
- release (shutdown, route restart): ``-NAK`` without delay;
- a message held longer than a third of ``ack_wait`` (a write that keeps
  retrying) gets ``+WPI`` (in progress) every third of ``ack_wait``, so the
  server does not redeliver what the route still holds. If the process dies,
  the server redelivers after ``ack_wait``.

Acks, naks and in-progress marks are recorded synchronously and sent in
batches, one asyncio call per batch (:class:`~bridges.endpoints._asyncio.Batcher`);
the route takes what has arrived as many at a time as it has room for
(``receive_some``), with no asyncio call at all.

Each pull request asks for what the window has room for and waits on the
server at most its expiry: 20 ms after a request that brought messages,
doubling while nothing comes, up to ``FETCH_WAIT``. Closing waits for the
request under way to end (that is why the expiry starts short: a route that
stops after its last message waits a few ms, not half a second). (Not
``no_wait`` requests, which end as soon as they have delivered what there
was: nats-server 2.9 now and then leaves one unanswered, no message and no
408, and the source waited for it until its fallback.) It never withdraws a
request by dropping the inbox's subscription: nats-server 2.9 then loses a
message that is naked or redelivered while the dropped request is still
queued (it is handed out again only after ``ack_wait``) and delivers another
twice (docs/performance/queues.md shows it).
"""

from __future__ import annotations

import collections
import datetime
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import nats.errors
import nats.js.api
import nats.js.errors
import trio
from attrs.validators import ge, optional

from bridges import Context, Envelope, InvalidSetting

from ..._guarantee import Guarantee
from ..._message import ACKED, NACKED, OPEN, trusted_message
from .._asyncio import AsyncioLoop, Batcher
from .._asyncio_client import CLOSE_TIMEOUT
from .._id_template import id_namespace
from ._connection import (
    ID_HEADER,
    MSG_ID,
    SUBJECT_HEADER,
    Connector,
    NatsConnection,
    check_subject,
)
from ._probe import ask_storage

#: Most messages one fetch asks for.
MAX_FETCH: Final = 256
#: Longest a pull request waits on the server when there is nothing to get, s;
#: also the longest a close waits for the request under way.
FETCH_WAIT: Final = 0.5
#: How long the first request after a delivery waits when there is nothing to get,
#: s (each one that gets nothing waits twice as long as the last, up to FETCH_WAIT).
FIRST_WAIT: Final = 0.02
#: The stream sequence's token in a JetStream ack subject: ``$JS.ACK.<stream>.
#: <consumer>.<delivered>.<stream seq>...`` (9 tokens), or with a domain and an
#: account hash after ``ACK`` (12 tokens; nats-py's ``Msg.Ack.StreamSeq``).
_V1_TOKENS: Final = 9
_V1_STREAM_SEQ: Final = 5
_V2_STREAM_SEQ: Final = 7

#: JetStream's error code for "consumer not found" (vs. 10059, "stream not found").
CONSUMER_NOT_FOUND: Final = 10014

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

#: What a settled message needs: "ack", "nak" (with the delay) or "wpi".
_Op = tuple[Any, str, float]


@attrs.frozen
class NatsSourceConfig(NatsConnection):
    """Pull from a JetStream durable consumer (explicit acks, fetches bounded by the window).

    Attributes:
      stream: required: the JetStream stream.
      subject: the consumer's filter subject (default: the whole stream).
      durable: required: the durable consumer's name (created when missing).
      ack_wait: for a consumer this source creates: how long JetStream waits
        for an ack before it delivers the message again, s.
      nak_delay: how long before a nacked message comes again, s.
      fetch: the most messages per fetch; default (and at most): the route's
        ``in_flight``.
      create_stream: true creates the stream (on ``subject``, file storage)
        when it is missing.
    """

    stream: str = ""
    subject: str = ""
    durable: str = ""
    ack_wait: float = attrs.field(default=30.0, validator=ge(1.0))
    nak_delay: float = attrs.field(default=5.0, validator=ge(0.0))
    fetch: int | None = attrs.field(default=None, validator=optional(ge(1)))
    create_stream: bool = False


class NatsSource:
    """Envelopes from one JetStream durable consumer."""

    def __init__(self, config: NatsSourceConfig, context: Context) -> None:
        for key in ("stream", "durable"):
            value = getattr(config, key)
            if not value:
                raise InvalidSetting(key, "missing (required)")
            if any(c in value for c in " \t\r\n.*>"):
                raise InvalidSetting(key, f"{value[:60]!r}: no spaces, dots or wildcards")
        if config.subject:
            try:
                check_subject(config.subject, wildcards=True)
            except ValueError as exc:
                raise InvalidSetting("subject", str(exc)) from None
        self._config = config
        self._context = context
        self._connector = Connector(config, context)
        self._window = context.in_flight
        self._fetch = min(config.fetch or MAX_FETCH, self._window)

    @classmethod
    def build(cls, config: NatsSourceConfig, context: Context) -> NatsSource:
        return cls(config, context)

    def describe(self) -> str:
        config = self._config
        return f"nats stream {config.stream} consumer {config.durable} on {self._connector.where}"

    async def probe(self) -> Guarantee:
        """Connect and ask the stream's storage (``bridges check --probe``)."""
        async with self._connector.connect() as (aio, client, _closed):
            return await ask_storage(aio, client, stream=self._config.stream)

    def consumer_config(self) -> nats.js.api.ConsumerConfig:
        """The durable consumer this source creates when it does not exist yet."""
        config = self._config
        return nats.js.api.ConsumerConfig(
            durable_name=config.durable,
            ack_policy=nats.js.api.AckPolicy.EXPLICIT,
            ack_wait=config.ack_wait,
            max_ack_pending=self._window,
            filter_subject=config.subject or None,
        )

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_NatsReceiver]:
        config = self._config
        connector = self._connector
        async with connector.connect() as (aio, client, closed):
            receiver = _NatsReceiver(aio, client, config, self._window, self._fetch)
            receiver.namespace = id_namespace(self._context.route)
            try:
                js = await aio.call(client.jetstream)
                if config.create_stream:
                    await aio.run(_ensure_stream, js, config.stream, config.subject)
                await aio.run(_bind_consumer, js, config.stream, self.consumer_config())
                incarnation = await aio.run(stream_incarnation, js, config.stream)
                receiver.id_prefix = receiver.namespace + incarnation
                await aio.run(client.subscribe, receiver.inbox, cb=receiver.on_message)
            except (nats.errors.Error, TimeoutError) as exc:
                raise connector.error(
                    f"stream {config.stream!r} consumer {config.durable!r}", exc
                ) from None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(receiver.pull_forever)
                nursery.start_soon(receiver.settler.run)
                nursery.start_soon(receiver.keep_in_progress, config.ack_wait / 3)
                nursery.start_soon(_fail_when_set, closed, connector.where)
                try:
                    yield receiver
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(FETCH_WAIT + 1):
                        # A pull request still open on the server would take the
                        # messages we nak now, and they would come back only after
                        # ack_wait: let the last one end (within its expiry).
                        await receiver.stop_fetching()
                    receiver.give_back()
                    with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                        try:
                            await receiver.settler.flush()
                            await aio.run(client.flush, CLOSE_TIMEOUT)
                        except Exception:  # gone: the server redelivers after ack_wait
                            pass
                    nursery.cancel_scope.cancel()


async def _ensure_stream(js: Any, name: str, subject: str) -> None:
    """Runs in asyncio: create stream ``name`` (file storage, capturing ``subject``) if missing."""
    try:
        await js.stream_info(name)
    except nats.js.errors.NotFoundError:
        await js.add_stream(name=name, subjects=[subject or f"{name}.>"])


async def stream_incarnation(js: Any, stream: str) -> str:
    """Runs in asyncio: ``STREAM#CREATED``, the prefix of the ids of this stream's messages.

    CREATED is the stream's creation time (from its info), in microseconds
    since the epoch, hexadecimal. A stream deleted and created again under
    the same name starts its sequences at 1 again: the creation time keeps
    the new messages from taking ids a de-duplicating sink has already seen.
    It never changes for one stream (nats-server keeps it with the stream,
    across its restarts and updates). Just ``STREAM`` when the server
    reports none.
    """
    info = await js.stream_info(stream)
    created = info.created
    if created is None:
        return stream
    micros = (created - _EPOCH) // datetime.timedelta(microseconds=1)
    return f"{stream}#{micros:x}"


async def _bind_consumer(js: Any, stream: str, config: nats.js.api.ConsumerConfig) -> None:
    """Runs in asyncio: create the durable consumer unless it exists (then it is used as is)."""
    try:
        await js.consumer_info(stream, config.durable_name)
    except nats.js.errors.NotFoundError as exc:
        if exc.err_code != CONSUMER_NOT_FOUND:
            raise  # (the stream is missing)
        await js.add_consumer(stream, config=config)


async def _fail_when_set(closed: trio.Event, where: str) -> None:
    await closed.wait()
    raise ConnectionError(f"nats {where}: the connection closed")


class _NatsReceiver:
    """Pulls with JetStream's own pull requests, delivered to one inbox subscription.

    Not nats-py's ``fetch()``: it waits for each message with a task and a
    timer of its own, which on a trio-asyncio loop cost more than the rest of
    the route together. Here the client calls :meth:`on_message` for each
    delivery, which only queues it; the route takes the queue a run at a time
    (:meth:`receive_some`) without a single asyncio task or Trio checkpoint
    per message.
    """

    def __init__(
        self, aio: AsyncioLoop, client: Any, config: NatsSourceConfig, window: int, fetch: int
    ) -> None:
        self._aio = aio
        self._client = client
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{config.stream}.{config.durable}"
        self.inbox = client.new_inbox()
        self._nak_delay = config.nak_delay
        self._window = window
        self._fetch = fetch
        self.origin = f"nats {config.stream}/{config.durable}"
        #: What a message's id starts with when it has no id of its own:
        #: ``STREAM#CREATED`` (:func:`stream_incarnation`), set on open.
        self.id_prefix = config.stream
        #: The namespace of the ids this source makes (its route): :func:`id_namespace`.
        self.namespace = ""
        #: Delivered and not yet handed out, oldest first (the window bounds it).
        self._ready: collections.deque[Any] = collections.deque()
        self._arrived = trio.lowlevel.ParkingLot()
        #: Messages delivered and not settled: id -> (msg, last sign of life).
        self.held: dict[int, tuple[Any, float]] = {}
        self._room = trio.Event()
        self._stopping = False
        #: The pull request under way: how many messages it may still bring, and
        #: how many it has brought.
        self._expected = 0
        self._brought = 0
        self._request_done = trio.Event()
        self._request_done.set()
        self.failure: str | None = None
        self.settler: Batcher[_Op] = Batcher(aio, _send_ops)

    async def on_message(self, msg: Any) -> None:
        """Runs in asyncio (inside Trio's thread): one delivery or status of our pull requests."""
        headers = msg.headers
        status = headers.get("Status") if headers else None
        if status is None:
            self.held[id(msg)] = (msg, trio.current_time())
            self._ready.append(msg)  # (the window bounds what is queued)
            if self._arrived:
                self._arrived.unpark_all()
            self._brought += 1
            self._expected -= 1
            if self._expected <= 0:
                self._request_done.set()
        elif status != "100":  # 404 none, 408 expired, 409 (e.g. consumer deleted)
            if status == "409" and "Deleted" in str(headers.get("Description", "")):
                self.failure = f"the consumer was deleted ({headers.get('Description')})"
            self._request_done.set()

    async def pull_forever(self) -> None:
        """One pull request at a time, for as many messages as the window has room for."""
        held = self.held
        wait = FIRST_WAIT
        while not self._stopping:
            if self.failure:
                raise ConnectionError(f"{self.origin}: {self.failure}")
            room = min(self._window - len(held), self._fetch)
            if room <= 0:
                self._room = trio.Event()
                await self._room.wait()
                continue
            request = json.dumps({"batch": room, "expires": int(wait * 1e9)}).encode()
            self._expected = room
            self._brought = 0
            self._request_done = trio.Event()
            await self._aio.run(self._client.publish, self._next, request, reply=self.inbox)
            with trio.move_on_after(wait + 5):  # (a lost request: ask again)
                await self._request_done.wait()
            wait = FIRST_WAIT if self._brought else min(wait * 2, FETCH_WAIT)

    async def stop_fetching(self) -> None:
        """Ask for no more, and wait for the request under way to end (within its expiry)."""
        self._stopping = True
        self._room.set()
        await self._request_done.wait()

    async def keep_in_progress(self, every: float) -> None:
        """Mark messages held for longer than ``every`` as in progress, every ``every`` s."""
        while True:
            await trio.sleep(every)
            now = trio.current_time()
            for key, (msg, since) in list(self.held.items()):
                if now - since >= every:
                    self.held[key] = (msg, now)
                    self.settler.put((msg, "wpi", 0.0))

    async def receive(self) -> Envelope:
        return (await self.receive_some(1))[0]

    async def receive_some(self, most: int) -> list[Envelope]:
        """What has arrived, oldest first: at least one (waits for it), at most ``most``.

        Cancel-safe: a cancelled wait takes nothing.
        """
        ready = self._ready
        while not ready:
            await self._arrived.park()
        popleft = ready.popleft
        prefix = self.id_prefix
        return [_NatsEnvelope(popleft(), self, prefix) for _ in range(min(most, len(ready)))]

    def give_back(self) -> None:
        """Nak (no delay) every message not settled, handed out or not: it comes back at once."""
        for msg, _ in list(self.held.values()):
            self.settle(msg, "nak", 0.0)

    def settle(self, msg: Any, op: str, delay: float) -> None:
        if self.held.pop(id(msg), None) is not None:
            self.settler.put((msg, op, delay))
            self._room.set()

    @property
    def nak_delay(self) -> float:
        return self._nak_delay


async def _send_ops(ops: list[_Op]) -> None:
    """Runs in asyncio: each op is a small publish; the client buffers and flushes them together."""
    for msg, op, delay in ops:
        try:
            if op == "ack":
                await msg.ack()
            elif op == "nak":
                await msg.nak(delay=delay or None)
            else:
                await msg.in_progress()
        except nats.errors.MsgAlreadyAckdError:
            pass


class _NatsEnvelope(Envelope):
    """An envelope settled through the JetStream message it came in (no callables per message).

    Its id: ``bridge-id`` when there is one (a bridge set it), else
    ``ROUTE/`` and ``Nats-Msg-Id`` when the publisher gave one, else
    ``ROUTE/STREAM#CREATED:SEQUENCE`` (the stream's creation time, see
    :func:`stream_incarnation`, and the stream sequence: the same on each
    redelivery, never that of a message of an earlier stream of that name).
    """

    __slots__ = ("msg", "receiver", "settle_key")

    def __init__(self, msg: Any, receiver: _NatsReceiver, prefix: str) -> None:
        headers = dict(msg.headers) if msg.headers else {}
        stable = headers.pop(ID_HEADER, "")
        given = headers.pop(MSG_ID, "")
        if not stable:
            if given:  # (a publisher's, unique in its stream only)
                stable = receiver.namespace + given
            else:
                stable = f"{prefix}:{_stream_sequence(msg.reply)}"
        headers[SUBJECT_HEADER] = msg.subject
        self.message = trusted_message(msg.data, headers, stable)
        self.origin = receiver.origin
        self.state = OPEN
        self.receiver = receiver
        self.msg = msg
        # Acks of one receiver: the engine hands a run of them to ack_all in one call.
        self.settle_key = receiver

    async def ack(self) -> None:
        if self.state is OPEN:
            self.state = ACKED
            self.receiver.settle(self.msg, "ack", 0.0)

    async def ack_all(self, envelopes: Sequence[Envelope]) -> None:
        for envelope in envelopes:
            if isinstance(envelope, _NatsEnvelope) and envelope.state is OPEN:
                envelope.state = ACKED
                envelope.receiver.settle(envelope.msg, "ack", 0.0)

    async def nack(self, error: BaseException | None = None) -> None:
        if self.state is OPEN:
            self.state = NACKED
            receiver = self.receiver
            receiver.settle(self.msg, "nak", 0.0 if error is None else receiver.nak_delay)


def _stream_sequence(reply: str) -> int:
    """The stream sequence in a JetStream ack subject (cheaper than nats-py's ``metadata``)."""
    tokens = reply.split(".")
    return int(tokens[_V1_STREAM_SEQ if len(tokens) == _V1_TOKENS else _V2_STREAM_SEQ])
