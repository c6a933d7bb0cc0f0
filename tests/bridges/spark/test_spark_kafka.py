"""A kafka source on ``engine = "spark"``: opened on the driver, through the write-ahead log.

(Spark's own Kafka connector is not used: docs/howto/kafka.md, "Kafka on Spark", says why.)
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from family_kit import require_server

import bridges
from bridges.spark import start_routes
from bridges.spark._bridged import RouteRef

from spark_kit import BrokerProcess, broker_fixture, drain, spark_fixture  # noqa: F401 (fixtures)

SERVERS = os.environ.get("TRIO_STOMP_KAFKA_SERVERS", "127.0.0.1:9092")
RECORDS = 30


def _listening(host: str, port: int) -> str | None:
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        return f"kafka is not running on {host}:{port} ({exc}); start it with `scripts/brokers up`"
    return None


def _topic_with_records() -> str:
    topic = f"spark-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": SERVERS})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": SERVERS, "acks": "all"})
    for n in range(RECORDS):
        producer.produce(topic, f"r-{n}".encode(), headers=[("n", str(n))])
    assert producer.flush(30) == 0
    return topic


def _committed(topic: str, group: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": SERVERS, "group.id": group})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
        return int(found[0].offset)
    finally:
        consumer.close()


def test_a_kafka_source_runs_on_spark_through_the_driver(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    require_server(f"kafka://{SERVERS}", 9092, _listening)
    topic = _topic_with_records()
    queue = f"/queue/k-{uuid.uuid4().hex}"
    group = f"spark-{topic}"
    config_path = tmp_path / "kafka.toml"
    config_path.write_text(
        f"""
[bridge]
engine = "spark"
[spark]
checkpoint = "ckpt"
trigger = "200 ms"
[routes.from-kafka]
source = {{ type = "kafka", bootstrap_servers = "{SERVERS}", topic = "{topic}", group = "{group}" }}
sink = {{ type = "stomp", url = "{broker.url}", destination = "{queue}" }}
"""
    )
    config = bridges.load_config(config_path, bridges.default_registry(), base_dir=tmp_path)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        queries = start_routes(spark, config, str(config_path))
    finally:
        os.chdir(cwd)
    try:
        received = drain(broker.url, queue, RECORDS, timeout=120)
    finally:
        for query in queries:
            query.stop()
    assert sorted(m.body for m in received) == sorted(f"r-{n}".encode() for n in range(RECORDS))
    ids = {m.headers["bridge-id"] for m in received}
    assert len(ids) == RECORDS
    assert all(i.startswith(f"{topic}#") and i.endswith(tuple(f":0:{n}" for n in range(RECORDS)))
               for i in ids)  # fmt: skip
    assert {m.headers["kafka-partition"] for m in received} == {"0"}
    # Acked to the group once the driver's write-ahead log held them, as the local engine does.
    assert _committed(topic, group) == RECORDS


def test_each_executor_task_has_a_transactional_id_of_its_own(spark: Any, tmp_path: Path) -> None:
    # The tasks of one micro-batch write at once: with one transactional.id they would
    # fence each other. Each attempt of one partition's task has the same (it fences its
    # zombie, as a restarted bridges run does).
    config_path = tmp_path / "kafka.toml"
    config_path.write_text(
        """
[bridge]
engine = "spark"
[spark]
checkpoint = "ckpt"
[routes.k2k]
source = { type = "kafka", topic = "in" }
sink = { type = "kafka", topic = "out", transactional = true }
dead_letter = { type = "kafka", topic = "dead", transactional = true, transactional_id = "d" }
"""
    )
    ref = RouteRef(str(config_path), "k2k", str(tmp_path))

    def ids(_: Any) -> Iterator[tuple[str, str]]:
        route, _registry = ref.load()
        sink = ref.build(route.sink, "sink").settings()["transactional.id"]
        dead = ref.build(route.dead_letter, "dead_letter").settings()["transactional.id"]
        yield sink, dead

    found = spark.sparkContext.parallelize(range(3), 3).mapPartitions(ids).collect()
    assert found == [(f"bridge-k2k-spark-p{n}", f"d-spark-p{n}") for n in range(3)]
    route, _ = ref.load()
    assert ref.build(route.sink, "sink").settings()["transactional.id"] == "bridge-k2k"  # (driver)
