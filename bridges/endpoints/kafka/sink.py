"""The ``kafka`` sink: each message one record; a batch is durable once Kafka acked every record.

The producer is librdkafka's, with ``acks=all`` and idempotence on by
default: the partition leader acknowledges a record only once every
in-sync replica has it, and a record librdkafka sends again (a lost
acknowledgement, a reconnect) is written once. ``write`` queues the batch
(``produce`` only queues: it runs on the event loop), then waits in a
worker thread, 100 ms at a time, until librdkafka reported every record's
fate. A record Kafka acknowledged is durable as far as the cluster's
replication makes it (on one broker: in its page cache, which survives the
broker's SIGKILL but not a power cut; see the guarantee table).

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
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import confluent_kafka
import trio
from attrs.validators import ge, le

from bridges import (
    Context,
    InvalidSetting,
    Message,
    MessageRejected,
    Template,
    TemplateError,
    prepare_each,
)

from ._connection import (
    DELIVERY_HEADERS,
    ID_HEADER,
    KEY_HEADER,
    KafkaConnection,
    KafkaEndpointError,
    check_servers,
    check_topic,
    in_thread,
    one_line,
)

log = logging.getLogger("bridges.kafka")

#: librdkafka's own default bound on one record (``message.max.bytes``); Kafka's
#: topic default (``max.message.bytes``) is a little larger, 1,048,588.
DEFAULT_MAX_BYTES: Final = 1_000_000
#: How long one wait for acknowledgements in the worker thread lasts, s: the bound on a cancel.
_POLL: Final = 0.1
#: Bound on handing back what is still queued when the sink closes, s.
_CLOSE_TIMEOUT: Final = 5.0
#: Kafka's errors that writing the same record again can never fix.
_REFUSALS: Final = frozenset(
    {
        confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE,
        confluent_kafka.KafkaError.INVALID_RECORD,
        confluent_kafka.KafkaError.RECORD_LIST_TOO_LARGE,
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED,
        confluent_kafka.KafkaError.TOPIC_EXCEPTION,
        confluent_kafka.KafkaError._INVALID_ARG,  # noqa: SLF001 (librdkafka's local errors)
    }
)


@attrs.frozen
class KafkaSinkConfig(KafkaConnection):
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


#: What one message becomes: topic, partition (-1: the partitioner's), key, value, headers.
_Record = tuple[str, int, bytes | None, bytes, list[tuple[str, str | bytes | None]]]


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
        self._config = config
        self._servers = check_servers(config.bootstrap_servers)
        self._client_id = config.client_id or f"bridge-{context.route}"

    @classmethod
    def build(cls, config: KafkaSinkConfig, context: Context) -> KafkaSink:
        """The registry's constructor (connects to nothing)."""
        return cls(config, context)

    def describe(self) -> str:
        """``kafka TOPIC on SERVERS``."""
        return f"kafka {self._config.topic} on {self._servers}"

    def settings(self) -> dict[str, Any]:
        """librdkafka's producer settings."""
        config = self._config
        timeout_ms = int(config.timeout * 1000)
        return {
            "bootstrap.servers": self._servers,
            "client.id": self._client_id,
            "acks": config.acks,
            "enable.idempotence": config.idempotent,
            "compression.type": config.compression,
            "message.max.bytes": max(config.max_bytes, 1000) + 512,
            "linger.ms": config.linger * 1000,
            "message.timeout.ms": timeout_ms,
            "socket.timeout.ms": timeout_ms,
            "logger": log,
        }

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_KafkaWriter]:
        """A producer; leaving the block drops what is still queued (the engine writes it again)."""
        producer = confluent_kafka.Producer(self.settings())
        writer = _KafkaWriter(self, producer)
        try:
            yield writer
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_TIMEOUT):
                producer.purge()
                await in_thread(producer.flush, 0)

    def record(self, message: Message) -> _Record:
        """The record ``message`` becomes.

        Raises:
          ValueError: it can never be written (why, in one line).
        """
        topic = message.destination or self._topic.render(message)  # type: ignore[union-attr]
        check_topic(topic)
        partition = -1
        if self._partition is not None:
            text = self._partition.render(message)
            if not text.isdigit() or len(text) > 9:
                raise ValueError(f"partition {text[:20]!r} is not a number")
            partition = int(text)
        if self._key is not None:
            key: bytes | None = self._key.render(message).encode("utf-8", "surrogateescape")
        elif KEY_HEADER in message.headers:
            key = message.headers[KEY_HEADER].encode("utf-8", "surrogateescape")
        else:
            key = None
        size = len(message.body) + len(key or b"")
        headers: list[tuple[str, str | bytes | None]] = []
        for name, value in message.headers.items():
            if name in DELIVERY_HEADERS or name == ID_HEADER:
                continue
            if (not name.isascii() and not _is_text(name)) or "\0" in name:
                # (a Kafka header name is a string; librdkafka takes it as a C string)
                raise ValueError(f"header name {name[:40]!r} is not UTF-8 text without NUL")
            encoded = value.encode("utf-8", "surrogateescape")
            headers.append((name, encoded))
            size += len(name) + len(encoded)
        if message.id:
            headers.append((ID_HEADER, message.id.encode("utf-8", "surrogateescape")))
        if size > self._config.max_bytes:
            raise ValueError(f"record of {size} bytes is over max_bytes ({self._config.max_bytes})")
        return topic, partition, key, message.body, headers


def _is_text(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


class _KafkaWriter:
    def __init__(self, sink: KafkaSink, producer: confluent_kafka.Producer) -> None:
        self._sink = sink
        self._producer = producer
        self._describe = sink.describe()

    async def write(self, batch: Sequence[Message]) -> None:
        records = prepare_each(batch, self._sink.record)  # (TemplateError is a ValueError)
        results: dict[int, confluent_kafka.KafkaError | None] = {}
        refused: dict[int, str] = {}
        producer = self._producer
        for index, (topic, partition, key, value, headers) in enumerate(records):

            def report(error: Any, _record: Any, index: int = index) -> None:
                results[index] = error

            try:
                producer.produce(topic, value, key, partition, on_delivery=report, headers=headers)
            except BufferError:
                await in_thread(producer.flush, _POLL)
                producer.produce(topic, value, key, partition, on_delivery=report, headers=headers)
            except confluent_kafka.KafkaException as exc:
                if exc.args[0].code() not in _REFUSALS:
                    raise KafkaEndpointError(f"{self._describe}: {one_line(exc)}") from None
                refused[index] = f"kafka {topic!r}: {one_line(exc)}"
        wanted = len(records) - len(refused)
        while len(results) < wanted:
            await in_thread(producer.flush, _POLL)
        for index, error in sorted(results.items()):
            if error is None:
                continue
            if error.code() in _REFUSALS:
                refused[index] = f"kafka {records[index][0]!r}: {one_line(error)}"
            else:
                raise KafkaEndpointError(f"{self._describe}: {one_line(error)}")
        if refused:
            raise MessageRejected.each(refused)
