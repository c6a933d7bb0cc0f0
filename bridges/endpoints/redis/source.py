"""The ``redis`` source: a Redis stream read by a consumer group, XACK once the sink holds it.

On every open the source reads, in this order:

1. the entries still pending for *this* consumer (delivered before a crash or
   a restart and never acked): ``XREADGROUP ... STREAMS key 0``, page by page;
2. entries of *other* consumers idle longer than ``claim_idle`` (``XAUTOCLAIM``),
   so that a dead consumer's messages are not stranded; this is repeated every
   ``claim_idle`` seconds while running;
3. new entries: ``XREADGROUP ... BLOCK ... STREAMS key >``.

A reader task (in the receiver's own nursery) does the reading, so that
:meth:`receive` is cancel-safe: a cancelled ``XREADGROUP`` may already have
moved entries into our pending list, and those must not be dropped on the
floor. The reader asks for at most as many entries as the route's window has
room for, so the entries pending for this consumer never exceed ``in_flight``:
that is the bound on duplicates after a crash. Acks are collected and sent
as one ``XACK`` per burst by an acker task; the last ones are flushed
(shielded, bounded) when the source closes, and any that a crash lost are
simply delivered again (at least once).
"""

from __future__ import annotations

import collections
import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final, Literal

import attrs
import coredis
import trio
from attrs.validators import ge
from coredis.response.types import StreamEntry

from bridges import Context, Envelope, InvalidSetting, Message
from bridges._guarantee import Guarantee
from bridges._readfile import checked_cafile

from .._id_template import id_namespace
from ._connection import ID_FIELD, RedisConnection, Server, open_client, tls_context
from ._probe import ask_persistence

log = logging.getLogger("bridges.redis")

#: Entries per XAUTOCLAIM call.
_CLAIM_PAGE: Final = 100
#: Bound on the last XACK when the source closes, s.
_FLUSH_TIMEOUT: Final = 2.0


@attrs.frozen
class RedisSourceConfig(RedisConnection):
    """Read a Redis stream through a consumer group (XREADGROUP, XACK after the sink).

    Attributes:
      stream: required: the stream's key.
      group: the consumer group (created when missing).
      consumer: this consumer's name in the group; default: ``bridge-ROUTE``.
        Keep it stable: its pending entries are read again at a restart.
      start: where a new group starts: ``"$"`` (new entries) or ``"0"`` (the
        whole stream).
      body_field: the entry's field that is the message body; every other
        field is a header.
      count: the most entries per XREADGROUP; default (and at most): the
        route's ``in_flight``.
      block: how long one XREADGROUP waits for new entries, s.
      claim_idle: how long another consumer's pending entry must be idle
        before this one claims it, s (0: never claim).
    """

    stream: str = ""
    group: str = "bridge"
    consumer: str | None = None
    start: Literal["$", "0"] = "$"
    body_field: str = "body"
    count: int | None = attrs.field(default=None, validator=attrs.validators.optional(ge(1)))
    block: float = attrs.field(default=1.0, validator=ge(0.01))
    claim_idle: float = attrs.field(default=60.0, validator=ge(0.0))


def _text(value: str | bytes) -> str:
    if isinstance(value, str):
        return value
    # surrogateescape: a field that is not UTF-8 survives a redis -> redis route unchanged.
    return value.decode("utf-8", "surrogateescape")


class RedisSource:
    """Envelopes from one Redis stream, read through a consumer group."""

    def __init__(self, config: RedisSourceConfig, context: Context) -> None:
        if not config.stream:
            raise InvalidSetting("stream", "missing (required)")
        if not config.group:
            raise InvalidSetting("group", "must not be empty")
        if not config.body_field:
            raise InvalidSetting("body_field", "must not be empty")
        self._config = config
        self._context = context
        self._server = Server.from_config(config)
        checked_cafile("ca_file", config.ca_file, context)
        self._consumer = config.consumer or f"bridge-{context.route}"
        self._window = context.in_flight
        self._count = min(config.count or context.in_flight, context.in_flight)

    @classmethod
    def build(cls, config: RedisSourceConfig, context: Context) -> RedisSource:
        """The registry's constructor (connects to nothing)."""
        return cls(config, context)

    def describe(self) -> str:
        """``redis STREAM (group G) on URL``."""
        return f"redis {self._config.stream} (group {self._config.group}) on {self._server.where}"

    async def probe(self) -> Guarantee:
        """Connect and ask the server whether it keeps its streams (``bridges check --probe``)."""
        ssl_context = await tls_context(self._config, self._server, self._context)
        async with open_client(self._config, self._server, ssl_context) as client:
            return await ask_persistence(client)

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_RedisReceiver]:
        """Connect, create the group when missing, and read in the receiver's own tasks."""
        config = self._config
        ssl_context = await tls_context(config, self._server, self._context)
        receiver: _RedisReceiver | None = None
        try:
            async with open_client(config, self._server, ssl_context) as client:
                await self._ensure_group(client)
                receiver = _RedisReceiver(self, client)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(receiver.read)
                    nursery.start_soon(receiver.send_acks)
                    try:
                        yield receiver
                    finally:
                        nursery.cancel_scope.cancel()
        finally:
            if receiver is not None and receiver.acks_pending:
                # On a connection of its own: when the route is cancelled, the tasks of
                # the client above are too, and an ack must not be lost to that.
                with trio.CancelScope(shield=True), trio.move_on_after(_FLUSH_TIMEOUT):
                    await self._last_acks(receiver, ssl_context)

    async def _last_acks(
        self, receiver: _RedisReceiver, ssl_context: ssl.SSLContext | None
    ) -> None:
        try:
            async with open_client(self._config, self._server, ssl_context) as client:
                await receiver.flush_acks(client)
        except Exception as exc:  # the entries stay pending: delivered again (at least once)
            log.warning("%s: the last acks were not sent: %s", self.describe(), exc)

    async def _ensure_group(self, client: coredis.Redis[bytes]) -> None:
        try:
            await client.xgroup_create(
                self._config.stream, self._config.group, self._config.start, mkstream=True
            )
        except coredis.exceptions.StreamDuplicateConsumerGroupError:
            pass  # BUSYGROUP: it exists
        else:
            log.info("%s: created the consumer group from %r", self.describe(), self._config.start)


async def _unused_ack() -> None:
    raise AssertionError("a _RedisEnvelope settles through its receiver")


async def _unused_nack(error: BaseException | None) -> None:
    raise AssertionError("a _RedisEnvelope settles through its receiver")


class _RedisEnvelope(Envelope):
    """An envelope settled through its receiver: no closures per message (a window of
    them in flight is work for the garbage collector)."""

    __slots__ = ("_receiver",)

    def __init__(self, message: Message, receiver: _RedisReceiver, origin: str) -> None:
        super().__init__(message, ack=_unused_ack, nack=_unused_nack, origin=origin)
        self._receiver = receiver

    async def ack(self) -> None:
        if self.state == "open":
            self.state = "acked"
            self._receiver.acked(self.message)

    async def nack(self, error: BaseException | None = None) -> None:
        if self.state == "open":
            self.state = "nacked"
            self._receiver.nacked(self.message, error)


class _RedisReceiver:
    """Entries read ahead by :meth:`read`, handed out by :meth:`receive`."""

    def __init__(self, source: RedisSource, client: coredis.Redis[bytes]) -> None:
        config = source._config  # noqa: SLF001 (the receiver is part of its source)
        self._client = client
        self._stream = config.stream
        self._group = config.group
        self._consumer = source._consumer  # noqa: SLF001
        self._body_field = config.body_field.encode()
        self._block_ms = max(10, int(config.block * 1000))
        self._claim_idle = config.claim_idle
        self._window = source._window  # noqa: SLF001
        self._count = source._count  # noqa: SLF001
        self._origin = f"redis {config.stream}"
        # An entry id is unique in its stream only: ROUTE/STREAM:ENTRY-ID.
        self._id_prefix = f"{id_namespace(source._context.route)}{config.stream}:"  # noqa: SLF001
        self._ready: collections.deque[Message] = collections.deque()
        #: Entry ids read and not yet acked: at most the window.
        self._held: set[str] = set()
        self._more = trio.Event()
        self._room = trio.Event()
        self._acks: list[str] = []
        self._acks_waiting = trio.Event()

    # -- the engine's side ------------------------------------------------------

    async def receive(self) -> Envelope:
        """The next entry; cancel-safe (nothing is taken until it is returned)."""
        while not self._ready:
            if self._more.is_set():
                self._more = trio.Event()
            await self._more.wait()
        return _RedisEnvelope(self._ready.popleft(), self, self._origin)

    def acked(self, message: Message) -> None:
        """An envelope was acked: XACK its entry soon (see :meth:`send_acks`)."""
        entry_id = message.headers["redis-id"]
        self._held.discard(entry_id)
        self._acks.append(entry_id)
        self._acks_waiting.set()
        self._room.set()

    def nacked(self, message: Message, error: BaseException | None) -> None:
        """An envelope was nacked: offer it again (an error) or leave it pending (a release)."""
        if error is not None:
            # Still pending for us: offer it again at once (it keeps its slot).
            self._ready.append(message)
            self._more.set()
        # A release (shutdown, restart): it stays pending, and the next open reads it first.

    # -- reading -----------------------------------------------------------------

    async def read(self) -> None:
        """Own pending entries, then idle ones of others, then new ones, for ever."""
        await self._read_pending()
        await self._claim()
        next_claim = trio.current_time() + self._claim_idle
        while True:
            room = await self._wait_for_room()
            reply = await self._client.xreadgroup(
                self._group,
                self._consumer,
                {self._stream: ">"},
                count=min(room, self._count),
                block=self._block_ms,
            )
            if reply:
                self._take(reply.get(self._stream.encode(), ()))
            if self._claim_idle and trio.current_time() >= next_claim:
                await self._claim()
                next_claim = trio.current_time() + self._claim_idle

    async def _wait_for_room(self) -> int:
        # Wait until a quarter of the window is free (or all of it is): reading a few
        # entries at a time, as acks trickle in, would cost a round trip for each few.
        wanted = max(1, min(self._window // 4, self._window - len(self._ready)))
        while self._window - len(self._held) < wanted:
            if self._room.is_set():
                self._room = trio.Event()
            await self._room.wait()
        return self._window - len(self._held)

    async def _read_pending(self) -> None:
        last = "0-0"
        while True:
            room = await self._wait_for_room()
            reply = await self._client.xreadgroup(
                self._group, self._consumer, {self._stream: last}, count=min(room, self._count)
            )
            entries = reply.get(self._stream.encode(), ()) if reply else ()
            if not entries:
                return
            last = _text(entries[-1].identifier)
            await self._take_or_drop(entries)

    async def _claim(self) -> None:
        if not self._claim_idle:
            return
        cursor = "0-0"
        while True:
            room = await self._wait_for_room()
            reply = await self._client.xautoclaim(
                self._stream,
                self._group,
                self._consumer,
                int(self._claim_idle * 1000),
                cursor,
                count=min(room, _CLAIM_PAGE),
            )
            cursor = _text(reply[0])
            entries = [e for e in reply[1] if _text(e.identifier) not in self._held]
            if entries:
                log.info("%s: claimed %d idle entries", self._origin, len(entries))
                await self._take_or_drop(entries)
            if cursor == "0-0":
                return

    async def _take_or_drop(self, entries: Sequence[StreamEntry]) -> None:
        """Take entries; ack at once the ones deleted from the stream (trimmed) meanwhile."""
        gone = [_text(e.identifier) for e in entries if not e.field_values]
        if gone:
            log.warning("%s: %d pending entries were deleted meanwhile", self._origin, len(gone))
            await self._client.xack(self._stream, self._group, gone)
        self._take([e for e in entries if e.field_values])

    def _take(self, entries: Sequence[StreamEntry]) -> None:
        body_field = self._body_field
        for entry in entries:
            entry_id = _text(entry.identifier)
            body: str | bytes = b""
            headers: dict[str, str] = {}
            for name, value in (entry.field_values or {}).items():
                if name == body_field:
                    body = value
                else:
                    headers[_text(name)] = _text(value)
            message_id = headers.pop(ID_FIELD, "") or self._id_prefix + entry_id
            headers["redis-id"] = entry_id
            headers["redis-stream"] = self._stream
            self._held.add(entry_id)
            if isinstance(body, str):
                body = body.encode()
            self._ready.append(Message(body, headers, message_id))
        if entries:
            self._more.set()

    # -- acking ------------------------------------------------------------------

    async def send_acks(self) -> None:
        """One XACK per burst of acks, for as long as the source is open."""
        while True:
            await self._acks_waiting.wait()
            self._acks_waiting = trio.Event()
            await self.flush_acks()

    @property
    def acks_pending(self) -> bool:
        """True when acks were collected and not yet sent."""
        return bool(self._acks)

    async def flush_acks(self, client: coredis.Redis[bytes] | None = None) -> None:
        """XACK every ack collected so far (on ``client``, else the receiver's own)."""
        client = client or self._client
        while self._acks:
            ids, self._acks = self._acks, []
            try:
                await client.xack(self._stream, self._group, ids)
            except BaseException:
                self._acks[:0] = ids  # for the final flush; else delivered again (at least once)
                raise
