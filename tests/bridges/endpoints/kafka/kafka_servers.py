"""The Kafka broker for the kafka endpoint tests: the project's, started by scripts/brokers.

``scripts/brokers up kafka`` starts it on 127.0.0.1:9092
(``TRIO_STOMP_KAFKA_SERVERS`` points elsewhere), with TLS (a client
certificate required) two ports up and SASL SCRAM over TLS three ports up,
their test CA and certificates in ``TRIO_STOMP_BROKERS_DIR``'s
``kafka-tls`` folder (scripts/brokers's state folder). When it does not answer, tests
skip, or fail under ``STOMP_REQUIRE_BROKERS=1`` (CI never silently skips).
What every family shares is in ``tests/family_kit.py``.
"""

from __future__ import annotations

import os
import socket
import struct
import uuid
from collections.abc import Sequence
from pathlib import Path

import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from family_kit import require_server, unavailable

from bridges.endpoints.kafka._envelope import pairs

SERVERS = os.environ.get("TRIO_STOMP_KAFKA_SERVERS", "127.0.0.1:9092")
#: scripts/brokers's test CA (ca.pem), client certificate (client.pem, client-key.pem).
TLS = Path(os.environ.get("TRIO_STOMP_BROKERS_DIR", "/tmp/trio-stomp-brokers")) / "kafka-tls"


def _probe(host: str, port: int) -> str | None:
    # Metadata v4, as scripts/brokers asks: a live broker lists itself.
    body = struct.pack(">hhih", 3, 4, 1, 5) + b"probe" + struct.pack(">ib", 0, 0)
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            reply = sock.recv(64)
    except OSError as exc:
        return f"kafka is not running on {host}:{port} ({exc}); start it with `scripts/brokers up`"
    if len(reply) >= 16 and struct.unpack(">iiii", reply[:16])[3] >= 1:
        return None
    return f"{host}:{port} gave no Kafka Metadata answer ({reply[:20]!r})"


def require_kafka() -> str:
    """The shared broker's servers; skip (locally) or fail (CI) when it is not up."""
    return require_server(f"kafka://{SERVERS}", 9092, _probe).split("//", 1)[1]


def require_kafka_listeners() -> tuple[str, str, str]:
    """The shared broker's plaintext, TLS and SASL_SSL servers (skip locally, fail in CI)."""
    servers = require_kafka()
    host, _, port = servers.rpartition(":")
    found = [f"{host}:{int(port) + 2}", f"{host}:{int(port) + 3}"]
    for where in found:
        try:
            socket.create_connection((host, int(where.rpartition(":")[2])), timeout=3).close()
        except OSError as exc:
            unavailable(f"kafka has no TLS listener on {where} ({exc}); `scripts/brokers up kafka`")
    if not (TLS / "client-key.pem").is_file():
        unavailable(f"no kafka test certificates in {TLS}; `scripts/brokers up kafka` makes them")
    return servers, found[0], found[1]


def create_topic(servers: str, partitions: int = 1, **config: str) -> str:
    """A new topic (a name no other test uses), once the broker reports it created."""
    name = f"ts-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": servers})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)])
    futures[name].result(30)
    return name


async def produce(
    servers: str, topic: str, records: Sequence[tuple[bytes, dict[str, str]]]
) -> None:
    """Write (body, headers) records, acknowledged, with the bare client."""

    def run() -> None:
        producer = Producer({"bootstrap.servers": servers, "acks": "all"})
        for body, headers in records:
            producer.produce(topic, body, headers=list(headers.items()))
        if producer.flush(30):
            raise RuntimeError("records not acknowledged in 30 s")

    await trio.to_thread.run_sync(run)


async def read_topic(servers: str, topic: str) -> list[tuple[bytes, dict[str, bytes]]]:
    """Every committed record of the topic's partitions, in order (read_committed)."""

    def run() -> list[tuple[bytes, dict[str, bytes]]]:
        consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        try:
            found: list[tuple[bytes, dict[str, bytes]]] = []
            metadata = consumer.list_topics(topic, timeout=10)
            for number in sorted(metadata.topics[topic].partitions):
                tp = TopicPartition(topic, number)
                _low, high = consumer.get_watermark_offsets(tp, timeout=10)
                if high <= 0:
                    continue
                consumer.assign([TopicPartition(topic, number, 0)])
                waited = 0
                while True:
                    record = consumer.poll(0.5)
                    if record is None:
                        # At the end: transaction markers take offsets no record is read for.
                        if (consumer.position([tp])[0].offset or 0) >= high:
                            break
                        waited += 1
                        if waited > 20:
                            raise RuntimeError(f"{topic}[{number}]: nothing more before {high}")
                        continue
                    if record.error():
                        continue
                    try:
                        headers = dict(pairs(record) or ())
                    except (SystemError, UnicodeDecodeError):  # a name that is not UTF-8
                        headers = {}
                    fields = {
                        k: v if isinstance(v, bytes) else (v or "").encode()
                        for k, v in headers.items()
                    }
                    found.append((record.value() or b"", fields))
                    position = consumer.position([tp])[0].offset
                    if position >= high or (record.offset() or 0) + 1 >= high:
                        break
            return found
        finally:
            consumer.close()

    return await trio.to_thread.run_sync(run)
