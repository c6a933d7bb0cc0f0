"""Crash test for the kafka endpoints: ``bridges run`` killed with SIGKILL again and again.

    .venv/bin/python bench/crash/kafka_crash.py [--count 10000] [--kills 5]
        [--only kafka-sink,kafka-once,kafka-once-3p,kafka-source,kafka-chain,kafka-broker,
        kafka-stomp,webhook-kafka] [--restart [--restarts 3]] [--seed N] [--json] [--report PATH]

In the first three scenarios the other side is a JSON-lines file (fsynced per
batch) so that only the endpoint under test talks to Kafka; the next two are
two routes in one bridge, de-duplicating at each step:

    kafka-sink:    file events.jsonl (one id per line)  ->  kafka (acks=all, idempotent)
    kafka-once:    the same into the transactional sink: 0 duplicates (its tail read back)
    kafka-once-3p: the same on a topic of 3 partitions (records spread by librdkafka's
                   partitioner): every partition's tail read back
    kafka-source:  topic of ``count`` records (a consumer group)  ->  file outbox/
    kafka-chain:   file events.jsonl  ->  kafka (transactional)  ->  kafka source  ->  file
                   outbox/ (JSON lines, read back): 0 duplicates end to end
    kafka-broker:  topic of ``count`` records  ->  stomp sink into the bridge's own embedded
                   broker (data dir, duplicate window)  ->  stomp source  ->  file outbox/:
                   0 duplicates (once_crash.py's file-to-broker-to-jsonl, a kafka source)
    kafka-stomp:   topic of ``count`` records  ->  stomp on RabbitMQ (a durable queue, persistent)
    webhook-kafka: webhooks (an http source, 32 senders posting until a 2xx)  ->  kafka;
                   every webhook that got its 2xx must be in the topic

Kafka is the one of ``scripts/brokers up kafka`` (``TRIO_STOMP_KAFKA_SERVERS``),
with a fresh topic per run. ``bridges run`` is started and killed with SIGKILL
once the far side holds a random share of the messages (plus 0-50 ms),
``--kills`` times, then runs until everything arrived and is stopped with
SIGTERM (a clean exit is required). With ``--restart`` Kafka itself is also
killed with SIGKILL, under the running bridge, ``--restarts`` times (3 unless
told) and started again on its data (``scripts/brokers kill kafka``, then
``start kafka``, about 20 s: it disturbs everything else using that Kafka;
not in CI): just before 3 of the bridge's kills, or for webhook-kafka once
the topic holds a random share of the webhooks.

Figures: arrived (must be all), duplicates and the most copies of one id,
against the bound at-least-once promises (``kills * in_flight`` per route), 0
for kafka-once, kafka-chain and kafka-broker. The harness is
``bench/crash/_crash.py``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import confluent_kafka
import trio
from _crash import BenchError, Direct, Factory, Scenario, free_port, main
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from http_crash import IN_FLIGHT, Bridge, post_until_stored
from once_crash import chain, through_broker
from queues_crash import FILE_SINK, JSONL_SOURCE, amqp_depth, amqp_drain, amqp_fill, outbox_bodies

SERVERS = os.environ.get("TRIO_STOMP_KAFKA_SERVERS", "127.0.0.1:9092")
#: RabbitMQ's STOMP port (``scripts/brokers up``), for kafka-stomp.
STOMP_PORT: Final = int(os.environ.get("TRIO_STOMP_RABBITMQ_STOMP_PORT", "61613"))
ROOT = Path(__file__).resolve().parents[2]


def create_topic(partitions: int = 1) -> str:
    name = f"crash-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": SERVERS})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def ends(topic: str) -> dict[int, int]:
    """Each partition's high watermark now; retried while Kafka restarts (--restart)."""
    for attempt in range(60):
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": SERVERS, "group.id": "crash-watch"}
        )
        try:
            described = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if described is None or described.error is not None or not described.partitions:
                # (a broker just restarted may answer without the topic's partitions yet)
                raise confluent_kafka.KafkaException(getattr(described, "error", None))
            numbers = described.partitions
            return {
                number: int(
                    consumer.get_watermark_offsets(
                        confluent_kafka.TopicPartition(topic, number), timeout=10
                    )[1]
                )
                for number in numbers
            }
        except confluent_kafka.KafkaException:
            if attempt == 59:
                raise
            time.sleep(1)
        finally:
            consumer.close()
    raise AssertionError("unreachable")


def stored(topic: str) -> int:
    """Records in the topic now (the sum of its partitions' high watermarks)."""
    return sum(ends(topic).values())


def bodies(topic: str) -> Counter[str]:
    """Copies of each body in the topic (every partition)."""
    copies: Counter[str] = Counter()
    left = {number: high for number, high in ends(topic).items() if high > 0}
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": SERVERS, "group.id": f"crash-read-{uuid.uuid4().hex[:8]}"}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, number, 0) for number in left])
        idle = 0
        while left:
            record = consumer.poll(0.5)
            if record is None:
                # Transaction markers take offsets no record is read for (read_committed).
                asked = [confluent_kafka.TopicPartition(topic, number) for number in left]
                for position in consumer.position(asked):
                    if position.offset >= left[position.partition]:
                        del left[position.partition]
                idle += 1
                if idle > 40 and left:
                    raise RuntimeError(f"{topic}: partitions {sorted(left)} not read to the end")
                continue
            if record.error():
                continue
            copies[(record.value() or b"").decode()] += 1
            number = record.partition()
            if number in left and (record.offset() or 0) + 1 >= left[number]:
                del left[number]
    finally:
        consumer.close()
    return copies


def fill(topic: str, ids: list[str]) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": SERVERS, "acks": "all", "enable.idempotence": True}
    )
    for i in ids:
        while True:
            try:
                producer.produce(topic, i.encode())
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(60):
        raise RuntimeError("fill: records not acknowledged")


def restart_kafka() -> None:
    """SIGKILL Kafka, then start it again on its data (what it acknowledged must be there)."""
    brokers = str(ROOT / "scripts" / "brokers")
    # (its lines to stderr: --json's stdout is one object per line)
    subprocess.run([brokers, "kill", "kafka"], check=True, stdout=sys.stderr)
    time.sleep(1)
    subprocess.run([brokers, "start", "kafka"], check=True, stdout=sys.stderr)


def kafka_sink(work: Path, ids: list[str]) -> Scenario:
    topic = create_topic()
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    sink = f'{{ type = "kafka", bootstrap_servers = "{SERVERS}", topic = "{topic}" }}'
    return Scenario(
        JSONL_SOURCE,
        sink,
        lambda: stored(topic),
        lambda: bodies(topic),
        lambda: len(bodies(topic)) >= len(ids),
        restart_kafka,
    )


def kafka_once(work: Path, ids: list[str], partitions: int = 1) -> Scenario:
    topic = create_topic(partitions)
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    sink = (
        f'{{ type = "kafka", bootstrap_servers = "{SERVERS}", topic = "{topic}", '
        "transactional = true }"
    )
    return Scenario(
        JSONL_SOURCE,
        sink,
        lambda: stored(topic),
        lambda: bodies(topic),
        lambda: len(bodies(topic)) >= len(ids),
        restart_kafka,
        once=True,
    )


def kafka_chain(work: Path, ids: list[str]) -> Scenario:
    """file -> kafka (transactional) -> kafka source -> jsonl, two routes in one bridge: the
    sink's read-back and the jsonl sink's make 0 duplicates end to end."""
    topic = create_topic()
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    sink = (
        f'{{ type = "kafka", bootstrap_servers = "{SERVERS}", topic = "{topic}", '
        "transactional = true }"
    )
    return chain(work, ids, (JSONL_SOURCE, sink), group_source(topic), restart_kafka)


def group_source(topic: str) -> str:
    """The kafka source on TOPIC, a consumer group of its own."""
    return (
        f'{{ type = "kafka", bootstrap_servers = "{SERVERS}", topic = "{topic}", '
        f'group = "crash-{topic}" }}'
    )


def kafka_source(work: Path, ids: list[str]) -> Scenario:
    topic = create_topic()
    fill(topic, ids)
    source = group_source(topic)
    outbox = work / "outbox"
    return Scenario(
        source,
        FILE_SINK,
        lambda: sum(outbox_bodies(outbox).values()),
        lambda: outbox_bodies(outbox),
        lambda: len(outbox_bodies(outbox)) >= len(ids),
        restart_kafka,
    )


def kafka_stomp(work: Path, ids: list[str]) -> Scenario:
    """kafka -> stomp on the RabbitMQ of ``scripts/brokers`` (its queue read over AMQP)."""
    del work
    topic = create_topic()
    fill(topic, ids)
    queue = f"kafka-crash-{uuid.uuid4().hex[:10]}"
    amqp_fill(queue, [])  # (the durable queue RabbitMQ's STOMP ``/queue/NAME`` sends to)
    source = group_source(topic)
    sink = (
        f'{{ type = "stomp", url = "stomp://127.0.0.1:{STOMP_PORT}", login = "guest", '
        f'passcode = "guest", destination = "/queue/{queue}", persistent = true }}'
    )

    def final() -> Counter[str]:
        found = amqp_drain(queue)  # (deletes the queue)
        return found

    return Scenario(
        source,
        sink,
        lambda: amqp_depth(queue),
        final,
        lambda: amqp_depth(queue) >= len(ids),
        restart_kafka,
    )


def kafka_broker(work: Path, ids: list[str]) -> Scenario:
    """kafka -> the bridge's own embedded broker -> jsonl: both de-duplications on, 0
    duplicates (once_crash.py's file-to-broker-to-jsonl with a kafka source)."""
    topic = create_topic()
    fill(topic, ids)
    return through_broker(work, ids, group_source(topic), restart_kafka)


def webhook_config(port: int, topic: str) -> str:
    return f"""
[bridge]
shutdown_timeout = 20
log_level = "warning"

[routes.in]
in_flight = {IN_FLIGHT}
batch = {{ count = 100, time = 0.005 }}
retry = {{ attempts = 3, initial = 0.05, max = 1.0 }}
source = {{ type = "http", listen = "127.0.0.1:{port}", path = "/hooks", retry_after = 1 }}
sink = {{ type = "kafka", bootstrap_servers = "{SERVERS}", topic = "{topic}" }}
"""


async def restart_kafka_at(topic: str, goals: list[int]) -> None:
    """Kafka SIGKILLed and started again (under the running bridge) each time the topic
    passed one of GOALS, in turn."""
    for goal in goals:
        while True:  # (Kafka is polled: nothing here could set an Event)
            if await trio.to_thread.run_sync(stored, topic) >= goal:
                break
            await trio.sleep(0.2)
        await trio.to_thread.run_sync(restart_kafka)


async def post_webhooks(
    work: Path, topic: str, count: int, kills: int, restarts: int, rng: random.Random
) -> dict[str, Any]:
    """Webhooks posted until each got a 2xx while the bridge is SIGKILLed ``kills`` times
    (and Kafka ``restarts`` times, at random moments of its own)."""
    port = free_port()
    bridge = Bridge(work, webhook_config(port, topic))
    if restarts:  # (no webhook is stored while Kafka is away, 16 to 25 s, nor just after)
        bridge.step_limit = 180.0
    url = f"http://127.0.0.1:{port}/hooks"
    goals = sorted(int(rng.uniform(0.1, 0.8) * count) for _ in range(restarts))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(restart_kafka_at, topic, goals)
        stored, _answers, _moments, at_kill = await post_until_stored(
            bridge, url, count, kills, rng
        )
    status = await bridge.stop()
    return {
        "stored": stored,
        "held_at_kills": at_kill,
        "exit_status": status,
        "log_tail": bridge.tail() if status != 0 else "",
    }


def webhook_kafka(count: int, kills: int, rng: random.Random, restarts: int = 0) -> dict[str, Any]:
    """webhook -> kafka: every webhook answered 2xx is in the topic (read by its ``id``)."""
    topic = create_topic()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="crash-webhook-kafka-") as tmp:
        try:
            posted = trio.run(post_webhooks, Path(tmp), topic, count, kills, restarts, rng)
        except* BenchError as group:  # (from the nursery: the harness reports it as an error)
            first: BaseException = group
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
    copies: Counter[str] = Counter()
    for body, n in bodies(topic).items():
        copies[json.loads(body)["id"]] += n
    stored: set[str] = posted["stored"]
    total = sum(copies.values())
    return {
        "messages": count,
        "kills": kills,
        "server_restarts": restarts,
        "held_at_kills": posted["held_at_kills"],
        "arrived": len(stored & set(copies)),
        # (a webhook that got its 2xx and is not in the topic is lost)
        "missing": len(stored - set(copies)) + count - len(stored),
        "duplicates": total - len(copies),
        "max_copies": max(copies.values(), default=0),
        "bound": kills * IN_FLIGHT,
        "exit_status": posted["exit_status"],
        "seconds": round(time.monotonic() - started, 1),
        "log_tail": posted["log_tail"],
    }


SCENARIOS: Final = [
    "kafka-sink",
    "kafka-once",
    "kafka-once-3p",
    "kafka-source",
    "kafka-chain",
    "kafka-broker",
    "kafka-stomp",
    "webhook-kafka",
]


@contextmanager
def setup(names: list[str]) -> Iterator[dict[str, Factory]]:
    """A factory per scenario (the project's Kafka serves them all)."""
    del names
    yield {
        "kafka-sink": kafka_sink,
        "kafka-once": kafka_once,
        "kafka-once-3p": lambda work, ids: kafka_once(work, ids, partitions=3),
        "kafka-source": kafka_source,
        "kafka-chain": kafka_chain,
        "kafka-broker": kafka_broker,
        "kafka-stomp": kafka_stomp,
        "webhook-kafka": Direct(webhook_kafka, restarts=True),
    }


if __name__ == "__main__":
    sys.exit(main(__doc__ or "", SCENARIOS, setup, restarts=3))
