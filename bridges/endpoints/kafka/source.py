"""The ``kafka`` source: a topic read by a consumer group, committed once the sink holds it.

A reader task (in the receiver's own nursery) calls librdkafka's
``consume`` in a worker thread, 100 ms at a time (10 ms while records come),
for at most as many records as the route's window has room for;
:meth:`receive_some` hands out what it read, so a cancelled receive takes
nothing.

Offsets are committed by the source, never by librdkafka (auto commit is
off): a partition's commit is the lowest offset handed out and not yet
acked (:mod:`._offsets`), sent asynchronously after each burst of acks and
synchronously when a partition is let go in a rebalance. When the source
closes (shielded, bounded), leaving the group revokes every partition:
what the last asynchronous commit does not hold yet is committed then, and
librdkafka's ``close`` waits for the commits in flight. The offsets acked
above it travel in the commit's metadata, so an ack stays final across a
restart. A nack with an error offers the record again at once; a release
(``nack(None)``, a shutdown) leaves it uncommitted: the group's next owner
of the partition reads it again.

A rebalance calls back inside ``consume``, in the worker thread. When
partitions are revoked, the source stops handing out their records (those
read and not handed out are dropped: they are not committed), waits up to
``revoke_timeout`` for the ones in flight to be settled, and commits, before
librdkafka lets the partitions go. Records still in flight after that are
read again by the new owner (at least once); their late acks are ignored.

Ids: the ``bridge-id`` header when the record has one (a bridge wrote it),
else ``TOPIC#TOPIC_ID:PARTITION:OFFSET``: the topic id (Kafka's UUID of the
topic, base64) changes when a topic is deleted and created again, so a new
topic's records never take ids a sink's de-duplication window still holds.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, Literal

import attrs
import confluent_kafka
import trio
from attrs.validators import ge
from confluent_kafka.admin import AdminClient

from bridges import Context, Envelope, InvalidSetting
from bridges._message import trusted_message

from ._connection import (
    ID_HEADER,
    KEY_HEADER,
    OFFSET_HEADER,
    PARTITION_HEADER,
    TIMESTAMP_HEADER,
    TOMBSTONE_HEADER,
    TOPIC_HEADER,
    KafkaEndpointError,
    check_servers,
    check_topic,
    in_thread,
    one_line,
)
from ._envelope import KafkaEnvelope as _KafkaEnvelope
from ._envelope import envelope as _envelope
from ._envelope import pairs as _pairs
from ._envelope import unreadable as _unreadable
from ._group import KafkaMembership, check_instance_id, commit_ahead, explain, group_settings, stops
from ._offsets import Partition, WentBack
from ._refusals import Refusals
from ._retention import lost_to_retention
from ._security import security_settings
from ._topic_id import read_topic_id

log = logging.getLogger("bridges.kafka")

#: How long one ``consume`` call in the worker thread may wait, s: the bound on a cancel.
_POLL: Final = 0.1
#: The same after a call that returned records: ``consume`` waits until it has as many
#: as asked or this long, so a stream that slows down (or ends, or a route that stops)
#: waits this, not ``_POLL``; an idle one goes back to ``_POLL`` after one empty call.
_BUSY_POLL: Final = 0.01
#: How often the consumer refreshes the topic's metadata (new partitions), ms.
_METADATA_REFRESH_MS: Final = 10_000
#: Bound on the last commit and the group leave when the source closes, s.
_CLOSE_TIMEOUT: Final = 5.0


@attrs.frozen
class KafkaSourceConfig(KafkaMembership):
    """Read a Kafka topic as a member of a consumer group; commit offsets after the sink.

    Attributes:
      group: the consumer group (``group.id``); default: ``bridge-ROUTE``.
      auto_offset_reset: where a group with no committed offset starts:
        ``"earliest"`` (the whole topic) or ``"latest"`` (new records).
      revoke_timeout: in a rebalance, how long the records in flight of a
        revoked partition may take to be settled before its offset is
        committed and it is let go, s.
    """

    group: str | None = None
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    revoke_timeout: float = attrs.field(default=5.0, validator=ge(0.0))


class KafkaSource:
    """Envelopes from one Kafka topic, read by a consumer group."""

    def __init__(self, config: KafkaSourceConfig, context: Context) -> None:
        if not config.topic:
            raise InvalidSetting("topic", "missing (required)")
        try:
            check_topic(config.topic)
        except ValueError as exc:
            raise InvalidSetting("topic", str(exc)) from None
        if config.group == "":
            raise InvalidSetting("group", "must not be empty")
        check_instance_id(config.instance_id)
        self._membership = group_settings(config.session_timeout, config.instance_id)
        self._config = config
        self._servers = check_servers(config.bootstrap_servers)
        #: librdkafka's TLS and SASL settings (checked: every problem at once).
        self._security = security_settings(config, context)
        self._group = config.group or f"bridge-{context.route}"
        self._client_id = config.client_id or f"bridge-{context.route}"
        self._window = context.in_flight
        #: Set by a transactional kafka sink of the route on the same cluster, which
        #: commits the offsets inside its transactions: the source then commits none.
        self.offsets_carried = False
        #: Records deleted (retention) before the group read them, skipped: see ``._retention``.
        self.lost = 0

    def count_lost(self, count: int) -> None:
        """``count`` more records were lost to retention (on the loop's thread)."""
        self.lost += count

    @property
    def servers(self) -> str:
        """The bootstrap servers, checked (``HOST:PORT,...``)."""
        return self._servers

    @classmethod
    def build(cls, config: KafkaSourceConfig, context: Context) -> KafkaSource:
        """The registry's constructor (connects to nothing)."""
        return cls(config, context)

    def describe(self) -> str:
        """``kafka TOPIC (group G) on SERVERS``."""
        return f"kafka {self._config.topic} (group {self._group}) on {self._servers}"

    def settings(self) -> dict[str, Any]:
        """librdkafka's consumer settings (``logger``: librdkafka's lines go to our log)."""
        timeout_ms = int(self._config.timeout * 1000)
        return {
            "bootstrap.servers": self._servers,
            "client.id": self._client_id,
            "group.id": self._group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": self._config.auto_offset_reset,
            "isolation.level": "read_committed",
            "allow.auto.create.topics": True,
            # (a partition added to the topic is assigned within 10 s, not librdkafka's 5 min)
            "topic.metadata.refresh.interval.ms": _METADATA_REFRESH_MS,
            "socket.timeout.ms": timeout_ms,
            "logger": log,
            **self._membership,  # (session, static membership, eager rebalancing: ._group)
        } | self._security

    async def topic_id(self, consumer: confluent_kafka.Consumer, refusals: Refusals) -> str:
        """The topic's id (Kafka's UUID of it): :func:`._topic_id.read_topic_id`.

        Raises:
          KafkaEndpointError: no broker answered, the brokers refused the
            connection (``refusals``: at once) or the client may not see it.
        """
        settings: dict[str, Any] = {
            "bootstrap.servers": self._servers,
            "client.id": self._client_id,
            "logger": log,
            "error_cb": refusals.note,
        } | self._security
        return await read_topic_id(
            AdminClient(settings), consumer, self._config.topic, self._config.timeout,
            refusals, self.describe(),
        )  # fmt: skip

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_KafkaReceiver]:
        """Join the group and read in the receiver's own task; leaving commits and leaves."""
        receiver = _KafkaReceiver(self)
        consumer = confluent_kafka.Consumer(
            self.settings() | {"on_commit": receiver.answered, "error_cb": receiver.refusals.note}
        )
        receiver.consumer = consumer
        try:
            # (subscribing first: where the broker allows it, that creates a missing topic)
            consumer.subscribe(
                [self._config.topic], on_assign=receiver.assigned, on_revoke=receiver.revoked
            )
            receiver.set_topic_id(await self.topic_id(consumer, receiver.refusals))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(receiver.read)
                try:
                    yield receiver
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_TIMEOUT):
                await receiver.close()


class _KafkaReceiver:
    """Records read ahead by :meth:`read`, handed out by :meth:`receive_some`."""

    def __init__(self, source: KafkaSource) -> None:
        config = source._config  # noqa: SLF001 (the receiver is part of its source)
        self.consumer: confluent_kafka.Consumer | None = None
        self.origin = f"kafka {config.topic}"
        self._topic = config.topic
        self._prefix = config.topic
        self._window = source._window  # noqa: SLF001
        self._revoke_timeout = config.revoke_timeout
        self._reset = config.auto_offset_reset
        self._source = source
        self._describe = source.describe()
        #: Assigned partitions by number (only those: a revoked one is removed).
        self._partitions: dict[int, Partition] = {}
        #: Envelopes read and not handed out yet, oldest first.
        self._ready: collections.deque[_KafkaEnvelope] = collections.deque()
        self._more = trio.Event()
        self._room = trio.Event()
        self._dirty = False
        self._closing = False
        #: Set by the commit callback; read by close().
        self._commit_error: str | None = None
        #: The consumer's ``error_cb``: a refused connection fails the source at once.
        self.refusals = Refusals()
        #: Offsets committed by the sink's transactions, never here (see ``._carry``).
        self._carried = source.offsets_carried
        #: The group's metadata at the last assignment (what a transaction's offsets carry).
        self.group_metadata: Any = None
        #: An asynchronous commit was sent and librdkafka has not reported its answer yet.
        self._committing = False
        #: Per partition, the (offset, metadata) last sent in an asynchronous commit.
        self._sent: dict[int, tuple[int, str]] = {}

    def set_topic_id(self, topic_id: str) -> None:
        """The topic's id, before anything is read: ids are ``TOPIC#TOPIC_ID:PARTITION:OFFSET``."""
        self._prefix = f"{self._topic}#{topic_id}"

    # -- the engine's side ------------------------------------------------------

    async def receive(self) -> Envelope:
        """The next record; cancel-safe (nothing is taken until it is returned)."""
        return (await self.receive_some(1))[0]

    async def receive_some(self, most: int) -> Sequence[Envelope]:
        """Up to ``most`` records (at least one); cancel-safe."""
        while not self._ready:
            if self._more.is_set():
                self._more = trio.Event()
            await self._more.wait()
        ready = self._ready
        if len(ready) <= most:
            out: list[Envelope] = list(ready)
            ready.clear()
            return out
        return [ready.popleft() for _ in range(most)]

    def holds(self, number: int, partition: Partition) -> bool:
        """Whether ``partition`` is still the one assigned as ``number`` (not revoked since)."""
        return self._partitions.get(number) is partition

    def acked(self, partition: Partition, number: int, offset: int) -> None:
        """A record was acked: its partition's commit may move (see :meth:`commit_soon`)."""
        if self._partitions.get(number) is not partition:
            return  # revoked meanwhile: the new owner reads it again
        partition.ack(offset)
        self.commit_soon()

    def offer_again(self, envelope: _KafkaEnvelope) -> None:
        """A record was nacked with an error: hand it out again, in a new envelope."""
        partition, number = envelope._partition, envelope._number  # noqa: SLF001
        if self._partitions.get(number) is partition:
            again = _envelope(envelope.message, self, partition, number, envelope._offset)  # noqa: SLF001
            self._ready.append(again)
            self._more.set()

    # -- reading -----------------------------------------------------------------

    async def read(self) -> None:
        """Consume for ever, as the window has room; commit after each burst of acks."""
        consumer = self.consumer
        assert consumer is not None
        wait = _POLL
        while True:
            room = await self._wait_for_room()
            records = await in_thread(consumer.consume, room, wait)
            if not records:
                self.refusals.check(self._describe)
            wait = _BUSY_POLL if records else _POLL
            rest = self._take(records)
            while rest:  # (a partition's log went back: see _went_back)
                await self._went_back(consumer, rest[0])
                rest = self._take(rest)
            if self._dirty:
                self._commit()

    async def _wait_for_room(self) -> int:
        while True:
            held = sum(p.outstanding for p in self._partitions.values())
            room = self._window - held
            if room > 0 and (room >= self._window // 4 or not held):
                return room
            if self._dirty:
                self._commit()
            if self._room.is_set():
                self._room = trio.Event()
            await self._room.wait()

    async def _went_back(self, consumer: confluent_kafka.Consumer, record: Any) -> None:
        """``record``'s partition went back to an offset read before: its topic was
        deleted and created again (librdkafka reset the offset, out of range), or its
        log truncated. The topic's id is read again, so that the new topic's records
        get new ids, and the partition is read from ``record`` on."""
        number, offset = record.partition(), record.offset()
        topic_id = await self._source.topic_id(consumer, self.refusals)
        if f"{self._topic}#{topic_id}" != self._prefix:
            log.warning(
                "%s: the topic was deleted and created again (partition %d back to offset "
                "%d; its id is now %s): its records get new ids",
                self._describe, number, offset, topic_id,
            )  # fmt: skip
            self.set_topic_id(topic_id)
        else:
            log.warning(
                "%s: partition %d went back to offset %d (its log was truncated?): read "
                "again from there, with the ids it had",
                self._describe, number, offset,
            )  # fmt: skip
        if number in self._partitions:
            # (what is still in flight of the old log is acked to nothing: see acked)
            self._partitions[number] = Partition(offset)
            self._sent.pop(number, None)
            self._room.set()

    def _take(self, records: Sequence[Any]) -> Sequence[Any]:  # noqa: C901 (the hot loop, one body)
        """Envelopes for ``records`` (one ``consume``'s), on the loop's thread: per record,
        only what its message needs. Returns the records from one whose partition went
        back (:exc:`WentBack`) on, not taken; else none."""
        prefix = self._prefix
        topic = self._topic
        partitions = self._partitions
        ready = self._ready
        no_stamp = confluent_kafka.TIMESTAMP_NOT_AVAILABLE
        #: The last record's partition: (number, its state, the number as text).
        last: tuple[int, Partition | None, str] = (-1, None, "")
        taken = 0
        rest: Sequence[Any] = ()
        for index, record in enumerate(records):
            error = record.error()
            if error is not None:
                if stops(error):  # (fatal, or a group refusal: see ._group)
                    raise KafkaEndpointError(f"{self._describe}: {explain(error)}")
                log.warning("%s: %s", self._describe, one_line(error))
                continue
            number = record.partition()
            if number != last[0]:
                last = (number, partitions.get(number), str(number))
            partition = last[1]
            offset = record.offset()
            try:
                if partition is None or not partition.take(offset):
                    self._dirty = True
                    continue  # not ours (revoked meanwhile) or acked before a restart
            except WentBack:
                rest = records[index:]
                break
            headers: dict[str, str] = {}
            stable = ""
            try:
                raw = _pairs(record)
            except (SystemError, UnicodeDecodeError):  # a header name that is not UTF-8
                ready.append(self._unreadable(record, partition, number, offset))
                taken += 1
                continue
            if raw:
                for name, value in raw:
                    headers[name] = value.decode("utf-8", "surrogateescape") if value else ""
                stable = headers.pop(ID_HEADER, "")
            key = record.key()
            if key is not None:
                headers[KEY_HEADER] = key.decode("utf-8", "surrogateescape")
            headers[TOPIC_HEADER] = topic
            headers[PARTITION_HEADER] = last[2]
            headers[OFFSET_HEADER] = text = str(offset)
            kind, stamp = record.timestamp()
            if kind != no_stamp:
                headers[TIMESTAMP_HEADER] = str(stamp)
            value = record.value()
            if value is None:  # a tombstone: said, so that a kafka sink writes one again
                headers[TOMBSTONE_HEADER] = "true"
                value = b""
            message = trusted_message(value, headers, stable or f"{prefix}:{last[2]}:{text}")
            ready.append(_envelope(message, self, partition, number, offset))
            taken += 1
        if taken:
            self._more.set()
        return rest

    def _unreadable(
        self, record: Any, partition: Partition, number: int, offset: int
    ) -> _KafkaEnvelope:
        at = {TOPIC_HEADER: self._topic, PARTITION_HEADER: str(number), OFFSET_HEADER: str(offset)}
        stable = f"{self._prefix}:{number}:{offset}"
        message = trusted_message(record.value() or b"", at, stable)
        return _unreadable(message, self, partition, number, offset)

    # -- committing --------------------------------------------------------------

    def _commits(self) -> list[confluent_kafka.TopicPartition]:
        offsets = []
        for number, partition in self._partitions.items():
            offset, metadata = partition.commit()
            if offset < 0:
                continue  # nothing read yet
            offsets.append(confluent_kafka.TopicPartition(self._topic, number, offset, metadata))
        return offsets

    def _commit(self) -> None:
        """Commit every assigned partition's watermark (see :mod:`._offsets`), asynchronously.

        ``commit`` only queues the request: librdkafka sends it from its own thread.
        One at a time: while one is unanswered, acks only mark the watermarks
        dirty, and the next commit carries them all once it is answered. (A
        commit after every burst queued dozens of them at the group's
        coordinator, which writes each in turn; leaving the group waited for
        all of them: 0.3 s of a 20,000-record run.)
        """
        if self._committing:
            return
        consumer = self.consumer
        self._dirty = False
        if self._carried:
            return
        offsets = self._commits()
        if consumer is None or not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except confluent_kafka.KafkaException as exc:
            # Delivered again after a restart (at least once); the next burst retries.
            log.warning("%s: commit failed: %s", self._describe, one_line(exc))
            self._dirty = True
            return
        self._committing = True
        for tp in offsets:
            self._sent[tp.partition] = (tp.offset, tp.metadata or "")

    def answered(self, error: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """librdkafka's answer to a commit (``on_commit``; in the worker thread, inside
        ``consume`` or ``close``): the next one may go; a failed one is sent again."""
        self._committing = False
        failed = [tp.partition for tp in partitions if error is not None or tp.error is not None]
        if failed:
            log.warning(
                "%s: commit failed: %s",
                self._describe,
                one_line(error) if error is not None else "refused for a partition",
            )
            for number in failed:
                self._sent.pop(number, None)
            self._dirty = True  # (the reader commits again after its consume)

    def carried_commits(self, batch: dict[int, set[int]]) -> list[confluent_kafka.TopicPartition]:
        """Each held partition's commit once ``batch`` (offsets by partition) is acked."""
        topic = self._topic
        offsets = []
        for number, partition in self._partitions.items():
            offset, metadata = partition.commit_with(batch.get(number, ()))
            if offset >= 0:
                offsets.append(confluent_kafka.TopicPartition(topic, number, offset, metadata))
        return offsets

    def commit_soon(self) -> None:
        """Acks came: the reader commits between two consumes."""
        self._dirty = True
        # (each time: the acks made room, and with a commit unanswered, dirty stays set)
        self._room.set()  # wakes the reader, which commits between two consumes

    async def close(self) -> None:
        """Leave the group, which commits what is acked (in a worker thread; the caller bounds it).

        Leaving revokes every assigned partition: :meth:`revoked` (called
        inside ``close``) commits each one's watermark once, unless the last
        asynchronous commit already holds it; ``close`` returns once the
        commits in flight are answered. (Committing synchronously here first
        and again in the callback was two round trips for the same offsets.)
        """
        consumer = self.consumer
        if consumer is None:
            return
        self._closing = True
        try:
            if self._carried:  # (what was settled after the sink's last transaction)
                await in_thread(commit_ahead, consumer, self._commits(), self._describe)
            await in_thread(consumer.close)
        finally:
            self.consumer = None
            if self._partitions:  # (not revoked: librdkafka lost them; the next owner reads again)
                log.warning(
                    "%s: partitions %s left without a last commit",
                    self._describe,
                    sorted(self._partitions),
                )

    # -- rebalance callbacks (in the worker thread, inside consume) --------------------

    def assigned(self, consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """Partitions assigned: read their committed offsets and metadata first."""
        committed = consumer.committed(partitions, timeout=30)
        if lost := lost_to_retention(consumer, committed, self._reset, self._describe, 30):
            trio.from_thread.run_sync(self._source.count_lost, lost)
        fresh: dict[int, Partition] = {}
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else -1
            fresh[tp.partition] = Partition(offset, tp.metadata)
        # (the generation these partitions were assigned in: see ._carry)
        metadata = consumer.consumer_group_metadata() if self._carried else None
        trio.from_thread.run_sync(self._assign, fresh, metadata)

    def _assign(self, fresh: dict[int, Partition], metadata: Any) -> None:
        self._partitions.update(fresh)
        self.group_metadata = metadata
        for number in fresh:
            self._sent.pop(number, None)
        log.info("%s: assigned partitions %s", self._describe, sorted(fresh))

    def revoked(self, consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """Partitions revoked: stop, wait (bounded) for what is in flight, commit, let go."""
        numbers = {tp.partition for tp in partitions}
        deadline = time.monotonic() + self._revoke_timeout
        while True:
            settled = trio.from_thread.run_sync(self._revoking, numbers)
            if settled or self._closing or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        offsets = trio.from_thread.run_sync(self._let_go, numbers)
        if offsets and not self._carried:
            try:
                # Leaving the group (close): librdkafka's close waits for the commits in
                # flight, so this one need not be waited for here (it is sent right behind
                # the last asynchronous one instead of one round trip after it).
                consumer.commit(offsets=offsets, asynchronous=self._closing)
            except confluent_kafka.KafkaException as exc:
                log.warning("%s: commit at revoke failed: %s", self._describe, one_line(exc))

    def _revoking(self, numbers: set[int]) -> bool:
        """Drop what was read and not handed out of ``numbers``; True once none is in flight."""
        self._ready = collections.deque(
            e
            for e in self._ready
            if e._number not in numbers  # noqa: SLF001
        )
        return all(self._partitions[n].outstanding == 0 for n in numbers if n in self._partitions)

    def _let_go(self, numbers: set[int]) -> list[confluent_kafka.TopicPartition]:
        """Forget ``numbers``; their commits (when closing, only those that differ
        from the last asynchronous commit, which close waits for)."""
        offsets = []
        for number in numbers:
            partition = self._partitions.pop(number, None)
            if partition is not None and partition.watermark >= 0:
                offset, metadata = partition.commit()
                if self._closing and self._sent.get(number) == (offset, metadata):
                    continue
                offsets.append(
                    confluent_kafka.TopicPartition(self._topic, number, offset, metadata)
                )
        log.info("%s: revoked partitions %s", self._describe, sorted(numbers))
        self._room.set()
        return offsets
