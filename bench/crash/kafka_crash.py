"""Crash test for the kafka endpoints: ``bridges run`` killed with SIGKILL again and again.

    .venv/bin/python bench/crash/kafka_crash.py [--count 10000] [--kills 5]
        [--only kafka-sink,kafka-once,kafka-source] [--restart] [--seed N] [--json]

Two scenarios, one route each, the other side a JSON-lines file (fsynced per
batch) so that only the endpoint under test talks to Kafka:

    kafka-sink:    file events.jsonl (one id per line)  ->  kafka (acks=all, idempotent)
    kafka-once:    the same into the transactional sink: 0 duplicates (its tail read back)
    kafka-source:  topic of ``count`` records (a consumer group)  ->  file outbox/

Kafka is the one of ``scripts/brokers up kafka`` (``TRIO_STOMP_KAFKA_SERVERS``),
with a fresh topic per run. ``bridges run`` is started and killed with SIGKILL
once the far side holds a random share of the messages (plus 0-50 ms),
``--kills`` times, then runs until everything arrived and is stopped with
SIGTERM (a clean exit is required). With ``--restart`` Kafka itself is also
killed with SIGKILL once mid-run and started again on its data
(``scripts/brokers kill kafka``, then ``start kafka``: it disturbs everything
else using that Kafka; not in CI).

Figures: arrived (must be all), duplicates and the most copies of one id,
against the bound at-least-once promises (``kills * in_flight``): the sink is
at least once (a batch written again after a kill is in the topic twice).
The harness is ``bench/crash/_crash.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import confluent_kafka
from _crash import Factory, Scenario, main
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

SERVERS = os.environ.get("TRIO_STOMP_KAFKA_SERVERS", "127.0.0.1:9092")
ROOT = Path(__file__).resolve().parents[2]
JSONL_SOURCE: Final = (
    '{ type = "file", path = "events.jsonl", mode = "jsonl", poll_interval = 0.05 }'
)
FILE_SINK: Final = '{ type = "file", path = "outbox", format = "jsonl", rotate_bytes = 65536 }'


def create_topic() -> str:
    name = f"crash-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": SERVERS})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def stored(topic: str) -> int:
    """Records in the topic now (its partition's high watermark); retried while Kafka
    restarts (--restart)."""
    for attempt in range(60):
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": SERVERS, "group.id": "crash-watch"}
        )
        try:
            _low, high = consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, 0), timeout=10
            )
            return int(high)
        except confluent_kafka.KafkaException:
            if attempt == 59:
                raise
            time.sleep(1)
        finally:
            consumer.close()
    raise AssertionError("unreachable")


def bodies(topic: str) -> Counter[str]:
    """Copies of each body in the topic."""
    copies: Counter[str] = Counter()
    high = stored(topic)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": SERVERS, "group.id": f"crash-read-{uuid.uuid4().hex[:8]}"}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        partition = confluent_kafka.TopicPartition(topic, 0)
        seen, idle = 0, 0
        while seen < high:
            record = consumer.poll(0.5)
            if record is None:
                # Transaction markers take offsets no record is read for (read_committed).
                seen = max(seen, consumer.position([partition])[0].offset or 0)
                idle += 1
                if idle > 40 and seen < high:
                    raise RuntimeError(f"{topic}: {seen} of {high} offsets read")
                continue
            if record.error():
                continue
            copies[(record.value() or b"").decode()] += 1
            seen = (record.offset() or 0) + 1
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


def outbox_bodies(outbox: Path) -> Counter[str]:
    copies: Counter[str] = Counter()
    for path in outbox.glob("messages-*.jsonl*"):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # a .part renamed under us
            continue
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            copies[json.loads(line)["body"]] += 1
    return copies


def restart_kafka() -> None:
    """SIGKILL Kafka, then start it again on its data (what it acknowledged must be there)."""
    brokers = str(ROOT / "scripts" / "brokers")
    subprocess.run([brokers, "kill", "kafka"], check=True)
    time.sleep(1)
    subprocess.run([brokers, "start", "kafka"], check=True)


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


def kafka_once(work: Path, ids: list[str]) -> Scenario:
    topic = create_topic()
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


def kafka_source(work: Path, ids: list[str]) -> Scenario:
    topic = create_topic()
    fill(topic, ids)
    source = (
        f'{{ type = "kafka", bootstrap_servers = "{SERVERS}", topic = "{topic}", '
        f'group = "crash-{topic}" }}'
    )
    outbox = work / "outbox"
    return Scenario(
        source,
        FILE_SINK,
        lambda: sum(outbox_bodies(outbox).values()),
        lambda: outbox_bodies(outbox),
        lambda: len(outbox_bodies(outbox)) >= len(ids),
        restart_kafka,
    )


SCENARIOS: Final = ["kafka-sink", "kafka-once", "kafka-source"]


@contextmanager
def setup(names: list[str]) -> Iterator[dict[str, Factory]]:
    """A factory per scenario (the project's Kafka serves them all)."""
    del names
    yield {"kafka-sink": kafka_sink, "kafka-once": kafka_once, "kafka-source": kafka_source}


if __name__ == "__main__":
    sys.exit(main(__doc__ or "", SCENARIOS, setup))
