"""The ``kafka`` sink: each message one record; a batch is durable once Kafka acked every record.

The producer is librdkafka's, with ``acks=all`` and idempotence on by
default: the partition leader acknowledges a record only once every
in-sync replica has it, and a record librdkafka sends again (a lost
acknowledgement, a reconnect) is written once. ``write`` queues the batch
(``produce`` only queues: it runs on the event loop), then waits in the
sink's own worker thread (:func:`bridges.worker_thread`: one handover per
batch, not a thread started per batch), 100 ms at a time, until
librdkafka's queue is empty: every record was then acknowledged or failed.
Every other call of the open sink that waits (``init_transactions``, the
read-back, an abort, the close's flush) runs in that thread too, never in
the shared ones: other routes' calls hung on a dead mount cannot hold up
this sink, nor its abort after a failed write.
librdkafka is asked to report only failures (``delivery.report.only.error``:
no Python call per acknowledged record; confluent-kafka still frees each
record's state), so a record of the batch with no report was acknowledged.
A record Kafka acknowledged is durable as far as the cluster's replication
makes it (on one broker: in its page cache, which survives the broker's
SIGKILL but not a power cut; see the guarantee table).

A record Kafka can never take (over ``max_bytes`` or the topic's
``max.message.bytes``, an invalid topic, a topic the client may not write)
is rejected alone, with Kafka's reason, to the dead-letter sink; any other
failure fails the batch, which the engine writes again (records that had
been acknowledged appear twice with the same ``bridge-id``: at least once).

Each record carries the message's headers (UTF-8; a header that is not
text keeps its bytes through ``surrogateescape``), its stable id in
``bridge-id``, a key (``key``, a template; else the ``kafka-key`` header a
``kafka`` source set) and, when ``partition`` is set, that partition.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final

import attrs
import confluent_kafka
import trio
from attrs.validators import ge, le

from bridges import (
    BatchRefused,
    Context,
    Envelope,
    InvalidSetting,
    Message,
    MessageRejected,
    Template,
    TemplateError,
    Worker,
    prepare_each,
    worker_thread,
)

from ._carry import Carried, carried_offsets, carry_source, settle_written
from ._connection import (
    ID_HEADER,
    KEY_HEADER,
    TOMBSTONE_HEADER,
    KafkaEndpointError,
    check_servers,
    check_topic,
    one_line,
)
from ._record import Record, record_headers
from ._refusals import Refusals
from ._security import KafkaSecurity, security_settings
from ._tail import WrittenIds, read_tail

log = logging.getLogger("bridges.kafka")

#: librdkafka's own default bound on one record (``message.max.bytes``); Kafka's
#: topic default (``max.message.bytes``) is a little larger, 1,048,588.
DEFAULT_MAX_BYTES: Final = 1_000_000
#: How long one wait for acknowledgements in the worker thread lasts, s: the bound on a cancel.
_POLL: Final = 0.1
#: Bound on handing back what is still queued when the sink closes, s.
_CLOSE_TIMEOUT: Final = 5.0
#: Bound on the metadata requests that make an idempotent producer ask for its id at open, s.
_EARLY: Final = 5.0
#: How many valid topic names (rendered or a message's destination) the sink remembers.
_CHECKED: Final = 1000
#: Kafka's errors that writing the same record again can never fix.
_REFUSALS: Final = frozenset(
    {
        confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE,
        confluent_kafka.KafkaError.INVALID_RECORD,
        confluent_kafka.KafkaError.RECORD_LIST_TOO_LARGE,
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED,
        confluent_kafka.KafkaError.TOPIC_EXCEPTION,
        confluent_kafka.KafkaError._INVALID_ARG,  # noqa: SLF001 (librdkafka's local errors)
        # (a partition template's number the topic does not have, by the client's metadata)
        confluent_kafka.KafkaError._UNKNOWN_PARTITION,  # noqa: SLF001
        # (a topic still missing after topic.metadata.propagation.max.ms: auto-creation off,
        # or a name the broker will not create)
        confluent_kafka.KafkaError._UNKNOWN_TOPIC,  # noqa: SLF001
        confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)

#: Refusals of a record as too large: Kafka judges a request's records of one
#: partition together, so records that fit alone may be refused with another.
_TOO_LARGE: Final = frozenset(
    {
        confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE,
        confluent_kafka.KafkaError.RECORD_LIST_TOO_LARGE,
    }
)

#: A transactional producer fenced by a newer one with its ``transactional.id``.
_FENCED: Final = frozenset(
    {
        confluent_kafka.KafkaError._FENCED,  # noqa: SLF001
        confluent_kafka.KafkaError.PRODUCER_FENCED,
        confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH,
    }
)


@attrs.frozen
class KafkaSinkConfig(KafkaSecurity):
    """Write each message as one record of a Kafka topic (acks=all, idempotent).

    Attributes:
      key: the record's key, a template (``{header:customer}``); default: the
        ``kafka-key`` header when the message has one (a ``kafka`` source
        sets it), else no key.
      partition: the partition, a template that renders to a number;
        default: Kafka's partitioner (by key; records without a key spread).
      acks: ``"all"`` (every in-sync replica has the record) or ``"1"`` (the
        leader alone: ``bridges check`` warns, a leader's crash may lose it).
      idempotent: the idempotent producer (a record librdkafka retries is
        written once); needs ``acks = "all"``.
      compression: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``.
      max_bytes: a larger record (body, key and headers) is rejected, bytes;
        keep it at or below the topic's ``max.message.bytes``.
      linger: how long librdkafka waits to fill a request, s (a batch's
        write sends at once: this only groups what arrives meanwhile).
      transactional: each batch in one Kafka transaction, and the ids in the
        topic's committed tail skipped (effectively once with a source whose
        ids are stable); needs a topic without template fields, and a
        message whose ``destination`` names another topic is rejected.
      transactional_id: the producer's ``transactional.id``; default:
        ``bridge-ROUTE``. A second instance with the same id fences the first.
        On Spark each executor task adds its partition (``-spark-pN``).
      dedup_window: transactional: how many of the last records of each
        partition are read back on open to skip ids already written (0: none).
    """

    key: str | None = None
    partition: str | None = None
    acks: str = attrs.field(default="all", validator=attrs.validators.in_(("all", "1")))
    idempotent: bool = True
    compression: str = attrs.field(
        default="none",
        validator=attrs.validators.in_(("none", "gzip", "snappy", "lz4", "zstd")),
    )
    max_bytes: int = attrs.field(default=DEFAULT_MAX_BYTES, validator=[ge(1000), le(1_000_000_000)])
    linger: float = attrs.field(default=0.005, validator=[ge(0.0), le(5.0)])
    transactional: bool = False
    transactional_id: str | None = None
    dedup_window: int = attrs.field(default=10_000, validator=ge(0))


def _template(name: str, text: str | None) -> Template | None:
    if text is None:
        return None
    try:
        return Template.parse(text)
    except TemplateError as exc:
        raise InvalidSetting(name, str(exc)) from None


class KafkaSink:
    """Batches written to Kafka, durable once every record of them was acknowledged."""

    def __init__(self, config: KafkaSinkConfig, context: Context) -> None:
        if not config.topic:
            raise InvalidSetting("topic", "missing (required)")
        self._topic = _template("topic", config.topic)
        self._key = _template("key", config.key)
        self._partition = _template("partition", config.partition)
        if config.idempotent and config.acks != "all":
            raise InvalidSetting("idempotent", 'needs acks = "all" (or set idempotent = false)')
        if config.transactional and not config.idempotent:
            raise InvalidSetting("transactional", "needs idempotent = true")
        if config.transactional and ("{" in config.topic or self._partition is not None):
            # (the read-back on open reads one topic's tail)
            raise InvalidSetting("transactional", "needs a fixed topic and no partition template")
        #: The topic when it is the same for every message (checked once, here).
        self._fixed_topic: str | None = None
        if self._topic is not None and self._topic.constant:
            fixed = self._topic.render(Message(b""))
            try:
                check_topic(fixed)
            except ValueError as exc:
                raise InvalidSetting("topic", str(exc)) from None
            self._fixed_topic = fixed
        #: Topics a message's destination named that were found valid (bounded).
        self._checked: set[str] = set()
        # (one id per copy that writes at once: copies with one id fence each other)
        self._transactional_id = config.transactional_id or f"bridge-{context.route}"
        if context.task is not None:
            self._transactional_id += f"-{context.task}"
        self._config = config
        self._max_bytes = config.max_bytes
        self._servers = check_servers(config.bootstrap_servers)
        #: librdkafka's TLS and SASL settings (checked: every problem at once).
        self._security = security_settings(config, context)
        self._client_id = config.client_id or f"bridge-{context.route}"

    @classmethod
    def build(cls, config: KafkaSinkConfig, context: Context) -> KafkaSink:
        """The registry's constructor (connects to nothing)."""
        return cls(config, context)

    def carries(self, source: object) -> bool:
        """Whether this sink commits ``source``'s offsets in its transactions (asked once
        per route): when transactional and ``source`` is a kafka source on the same
        servers (consume-transform-produce; see ``._carry``)."""
        return self._config.transactional and carry_source(self._servers, source)

    def describe(self) -> str:
        """``kafka TOPIC on SERVERS``."""
        return f"kafka {self._config.topic} on {self._servers}"

    def settings(self) -> dict[str, Any]:
        """librdkafka's producer settings."""
        config = self._config
        timeout_ms = int(config.timeout * 1000)
        return (
            {
                "bootstrap.servers": self._servers,
                "client.id": self._client_id,
                "acks": config.acks,
                "enable.idempotence": config.idempotent,
                "compression.type": config.compression,
                "message.max.bytes": max(config.max_bytes, 1000) + 512,
                "linger.ms": config.linger * 1000,
                "message.timeout.ms": timeout_ms,
                "delivery.report.only.error": True,
                # (a missing topic fails its records with _UNKNOWN_TOPIC, rejected alone,
                # before the batch's timeout fails them all)
                "topic.metadata.propagation.max.ms": timeout_ms // 2,
                "socket.timeout.ms": timeout_ms,
                "logger": log,
            }
            | self._security
            | (
                {"transactional.id": self._transactional_id, "transaction.timeout.ms": 60_000}
                if config.transactional
                else {}
            )
        )

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_KafkaWriter]:
        """A producer; leaving the block drops what is still queued (the engine writes it again).

        Transactional: ``init_transactions`` first (it fences an older producer
        with the same id and aborts its open transaction), then the topic's
        committed tail is read back (:mod:`._tail`).
        """
        config = self._config
        refusals = Refusals()
        producer = confluent_kafka.Producer(self.settings() | {"error_cb": refusals.note})
        async with worker_thread(f"kafka {config.topic}") as waits:
            async with self._opened(producer, refusals, waits) as writer:
                yield writer

    @asynccontextmanager
    async def _opened(
        self, producer: confluent_kafka.Producer, refusals: Refusals, waits: Worker
    ) -> AsyncIterator[_KafkaWriter]:
        """:meth:`open`'s writer on ``producer``, its waits in ``waits``."""
        config = self._config
        writer = _KafkaWriter(self, producer, refusals, waits)
        try:
            partitions = None
            if config.idempotent and self._fixed_topic is not None:
                topic, describe = self._fixed_topic, self.describe()
                partitions = await _ask_early(producer, topic, refusals, describe, waits)
            if config.transactional:
                try:
                    await waits.run(partial(producer.init_transactions, config.timeout))
                except confluent_kafka.KafkaException as exc:
                    refusals.check(self.describe())
                    failed = refusals.explain(exc)
                    raise KafkaEndpointError(f"{self.describe()}: {failed}") from None
                if config.dedup_window:
                    writer.written = await waits.run(
                        partial(
                            read_tail,
                            self._servers,
                            config.topic,
                            config.dedup_window,
                            config.timeout,
                            self._security,
                            partitions,
                        )
                    )
            yield writer
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_TIMEOUT):
                if writer.in_transaction:
                    await writer.abort()
                producer.purge()
                await waits.run(partial(producer.flush, 0))

    def record(self, message: Message) -> Record:
        """The record ``message`` becomes.

        Raises:
          ValueError: it can never be written (why, in one line).
        """
        if message.destination or self._fixed_topic is None:
            topic = self._topic_of(message)
            if self._config.transactional and topic != self._fixed_topic:
                raise ValueError(
                    f"destination {topic!r}: a transactional sink writes only its topic "
                    f"{self._fixed_topic!r} (its read-back on open reads that topic alone, "
                    "so records elsewhere could be written twice)"
                )
        else:
            topic = self._fixed_topic
        partition = -1
        if self._partition is not None:
            text = self._partition.render(message)
            if not text.isdigit() or len(text) > 9:
                raise ValueError(f"partition {text[:20]!r} is not a number")
            partition = int(text)
        fields = message.headers
        key: bytes | None = None
        if self._key is not None:
            key = self._key.render(message).encode("utf-8", "surrogateescape")
        elif fields and KEY_HEADER in fields:
            key = fields[KEY_HEADER].encode("utf-8", "surrogateescape")
        headers, size = record_headers(fields) if fields else ([], 0)
        size += len(message.body) + (len(key) if key else 0)
        if message.id:
            headers.append((ID_HEADER, message.id.encode("utf-8", "surrogateescape")))
        if size > self._max_bytes:
            raise ValueError(f"record of {size} bytes is over max_bytes ({self._max_bytes})")
        if not message.body and fields and TOMBSTONE_HEADER in fields:
            # (a tombstone a kafka source read is written as one: a null value)
            return topic, partition, key, None, headers
        return topic, partition, key, message.body, headers

    def _topic_of(self, message: Message) -> str:
        """The record's topic: the message's destination, else the ``topic`` template's.

        Raises:
          ValueError: not a valid topic name.
        """
        topic = message.destination
        if not topic:
            if self._fixed_topic is not None:
                return self._fixed_topic
            topic = self._topic.render(message)  # type: ignore[union-attr]
        if topic not in self._checked:
            check_topic(topic)
            if len(self._checked) >= _CHECKED:
                self._checked.clear()
            self._checked.add(topic)
        return topic


async def _ask_early(
    producer: confluent_kafka.Producer,
    topic: str,
    refusals: Refusals,
    describe: str,
    waits: Worker,
) -> list[int] | None:
    """Make an idempotent producer ask for its producer id now, not 500 ms after it was made.

    librdkafka asks when the producer is made, before any broker is connected,
    and then again 500 ms later, or as soon as a metadata answer comes: until
    then no record is sent. Two metadata requests for the topic are made here
    (one was not enough in 2 of 10 starts, two were in 10 of 10): the first
    batch was acknowledged 55 to 60 ms after the producer was made, instead of
    505 to 510 ms. A transactional producer's ``init_transactions`` after them
    took 57 ms in 12 of 12 starts (without: 505 ms in 1 of 6). A request that
    fails is let be (the writes meet the same brokers), unless the brokers
    refused the connection.

    The requests run in ``waits``, the sink's thread. Returns the topic's
    partitions by the last answer (the transactional sink's read-back needs
    them), or None when there was none.

    Raises:
      KafkaEndpointError: the brokers refused the connection (authentication, TLS).
    """
    partitions = None
    with trio.move_on_after(_EARLY):
        for _ in range(2):
            try:
                metadata = await waits.run(partial(producer.list_topics, topic, _EARLY))
            except confluent_kafka.KafkaException as exc:
                refusals.check(describe)
                log.debug("%s: metadata at open: %s", describe, one_line(exc))
                break
            described = metadata.topics.get(topic)
            if described is not None and described.error is None and described.partitions:
                partitions = sorted(described.partitions)
    return partitions


class _KafkaWriter:
    def __init__(
        self, sink: KafkaSink, producer: confluent_kafka.Producer, refusals: Refusals, waits: Worker
    ) -> None:
        self._sink = sink
        self._producer = producer
        #: The sink's thread: each batch's wait for acknowledgements (and commit), an abort.
        self._waits = waits
        #: The producer's ``error_cb``: a refused connection fails a write at once.
        self._refusals = refusals
        self._describe = sink.describe()
        self._transactional = sink._config.transactional  # noqa: SLF001 (part of its sink)
        self._timeout = sink._config.timeout  # noqa: SLF001
        self._transactional_id = sink._transactional_id  # noqa: SLF001
        #: Transactional: the ids in the topic's committed tail, and those written since.
        self.written = WrittenIds(max(1, sink._config.dedup_window))  # noqa: SLF001
        self.in_transaction = False
        #: Messages the last write found already written (their ids in the tail).
        self.skipped = 0
        #: During a write_carrying: the source's offsets its transaction commits.
        self._carry: Carried | None = None

    async def abort(self) -> None:
        """Abort the open transaction (in the sink's thread, under the sink's timeout)."""
        self.in_transaction = False
        try:
            await self._waits.run(partial(self._producer.abort_transaction, self._timeout))
        except confluent_kafka.KafkaException as exc:
            log.warning("%s: aborting the transaction failed: %s", self._describe, one_line(exc))

    async def write(self, batch: Sequence[Message]) -> None:
        records = prepare_each(batch, self._sink.record)  # (TemplateError is a ValueError)
        if not self._transactional:
            await self._write(records)
            return
        fresh = [i for i, message in enumerate(batch) if message.id not in self.written]
        self.skipped = len(batch) - len(fresh)
        if not fresh and not (self._carry and self._carry.offsets):
            return
        if not self.in_transaction:  # (else the last commit began this one)
            try:
                await self._waits.run(self._producer.begin_transaction)
            except confluent_kafka.KafkaException as exc:  # (fenced: fatal, every write after)
                raise KafkaEndpointError(self._failed(exc)) from None
            self.in_transaction = True
        try:
            if not await self._write([records[i] for i in fresh], fresh, commit=True):
                await self._waits.run(self._commit)
        except BaseException as exc:
            if self.in_transaction and not isinstance(exc, trio.Cancelled):
                with trio.CancelScope(shield=True):
                    await self.abort()
            if isinstance(exc, confluent_kafka.KafkaException):
                raise KafkaEndpointError(self._failed(exc)) from None
            raise
        for index in fresh:
            self.written.add(batch[index].id)

    def _failed(self, exc: confluent_kafka.KafkaException) -> str:
        """A transaction's failure in one line; fenced: by whom, and what follows."""
        text = f"{self._describe}: {one_line(exc)}"
        error = exc.args[0] if exc.args else None
        if isinstance(error, confluent_kafka.KafkaError) and error.code() in _FENCED:
            text += (
                f"; another producer with transactional_id {self._transactional_id!r} "
                "took over (a second bridge or replica of this route?): each reopen "
                "fences the other"
            )
        return text

    async def _write(
        self, records: Sequence[Record], positions: Sequence[int] = (), commit: bool = False
    ) -> bool:
        """Produce ``records`` and wait until each is acknowledged; ``positions``: their
        indices in the batch (default: the same as in ``records``).

        With ``commit``, the transaction is committed in the same worker-thread
        call as the last wait when every record was acknowledged (one thread
        hop per batch less); returns whether it was.
        """
        failed: dict[int, confluent_kafka.KafkaError] = {}
        refused: dict[int, str] = {}
        producer = self._producer
        where = positions or range(len(records))
        for index, (topic, partition, key, value, headers) in zip(where, records, strict=True):

            def report(error: Any, _record: Any, index: int = index) -> None:
                failed[index] = error

            try:
                producer.produce(topic, value, key, partition, on_delivery=report, headers=headers)
            except BufferError:
                await self._waits.run(partial(producer.flush, _POLL))
                producer.produce(topic, value, key, partition, on_delivery=report, headers=headers)
            except confluent_kafka.KafkaException as exc:
                if exc.args[0].code() not in _REFUSALS:
                    raise KafkaEndpointError(f"{self._describe}: {one_line(exc)}") from None
                refused[index] = f"kafka {topic!r}: {one_line(exc)}"
        commit = commit and not refused
        committed: bool | None = None if len(refused) < len(records) else False
        self._refusals.refused = None  # (each write meets the brokers' answer anew)
        while committed is None:
            committed = await self._waits.run(partial(self._wait, failed, commit))
            if committed is None:
                self._refusals.check(self._describe)
        if failed:
            self._check_refused(failed)
            topics = dict(zip(where, (record[0] for record in records), strict=True))
            refused |= {i: f"kafka {topics[i]!r}: {one_line(e)}" for i, e in failed.items()}
        if refused:
            raise MessageRejected.each(refused)
        return committed

    def _check_refused(self, failed: Mapping[int, confluent_kafka.KafkaError]) -> None:
        """Raise unless each failure is a refusal of its own record.

        Raises:
          KafkaEndpointError: a failure writing again may fix (the batch fails).
          BatchRefused: records refused together as too large: Kafka judges a
            request's records of one partition together, so each may fit alone
            (the engine halves the batch until each is).
        """
        for error in failed.values():
            if error.code() not in _REFUSALS:
                raise KafkaEndpointError(f"{self._describe}: {self._refusals.explain(error)}")
        too_large = [error for error in failed.values() if error.code() in _TOO_LARGE]
        if len(too_large) > 1:
            raise BatchRefused(
                f"{self._describe}: {len(too_large)} records refused together as too large: "
                f"{one_line(too_large[0])}"
            )

    def _wait(self, failed: Mapping[int, object], commit: bool) -> bool | None:
        """In a worker thread: wait up to ``_POLL`` for Kafka's reports; None while
        some record has none yet. Then, with ``commit`` and no record failed, commit
        the transaction (returns True)."""
        if self._producer.flush(_POLL):
            return None
        if commit and not failed:
            self._commit()
            return True
        return False

    def _commit(self) -> None:
        """In the worker thread: commit the transaction, with the source's offsets if
        carried; then begin the next one.

        ``begin_transaction`` changes only the client's state, but waits for
        librdkafka's own thread to answer (50 µs at the median, 170 on average,
        on a 2-CPU machine): begun here, it is off the event loop and out of
        the next write's way. A failure to begin is left for the next write,
        which begins again and fails with its reason; this batch is committed.
        """
        carry = self._carry
        if carry is not None and carry.offsets:
            self._producer.send_offsets_to_transaction(carry.offsets, carry.group, self._timeout)
        self._producer.commit_transaction(self._timeout)
        self.in_transaction = False
        try:
            self._producer.begin_transaction()
        except confluent_kafka.KafkaException:
            return
        self.in_transaction = True

    async def write_carrying(self, batch: Sequence[Message], envelopes: Sequence[Envelope]) -> None:
        """:meth:`write`, its transaction committing the source's offsets too (see ``._carry``);
        messages of partitions the source no longer holds are not written."""
        carry = carried_offsets(envelopes)
        keep = carry.keep
        if len(keep) < len(batch):
            log.info(
                "%s: %d message(s) of revoked partitions not written (their next reader will)",
                self._describe, len(batch) - len(keep),
            )  # fmt: skip
        self._carry = carry
        try:
            await self.write(batch if len(keep) == len(batch) else [batch[i] for i in keep])
        except MessageRejected as exc:
            if len(keep) == len(batch):
                raise
            named = range(len(keep)) if exc.indices is None else exc.indices
            raise MessageRejected.each({keep[i]: exc.reason_for(i) for i in named}) from None
        finally:
            self._carry = None
        # (no checkpoint since the commit: a cancel cannot come between the two)
        settle_written(envelopes, keep)
