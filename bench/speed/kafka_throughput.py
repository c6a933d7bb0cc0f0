"""Kafka endpoints against confluent-kafka used bare, on the project's Kafka, in one run.

    .venv/bin/python bench/speed/kafka_throughput.py [--count 20000] [--size 100]
        [--batch 100] [--window 1000] [--rounds 5] [--directions consume,publish]

Uses the Kafka ``scripts/brokers up kafka`` runs (``TRIO_STOMP_KAFKA_SERVERS``,
default 127.0.0.1:9092), a new topic per measurement, and prints one table:
messages/s (median of ``--rounds``), CPU time per message (this process), and
the median per-round ratio to the bare library in the same direction.
``bench/speed/queues_throughput.py --only kafka`` runs the same cases.

consume (``count`` records waiting in a one-partition topic):

- *confluent-kafka bare*: ``consume(window, 1 s)`` in a loop, each record's
  value, key, headers and timestamp read (what the source hands on), and an
  asynchronous commit of what it read after each call (a group, no auto
  commit, ``read_committed``: the same work as the source, whose commits
  follow the acks);
- *bridge kafka source*: a route from the ``kafka`` source to a sink that
  only counts.

publish (``count`` records):

- *confluent-kafka bare*: ``--batch`` records produced, each with a
  ``bridge-id`` header and a delivery callback, then ``flush`` until the
  queue is empty, in a loop (acks=all, idempotent, linger 5 ms, delivery
  reports for errors only: the sink's settings, and its rule that a batch
  is done once each record is acked);
- *bridge kafka sink*: a route to the ``kafka`` sink from an in-memory
  source that hands out and acks messages in bulk (:class:`_endpoints.BulkSource`),
  as the kafka, nats and stomp sources do: what such a source costs the
  route, without its I/O (``publish_bridge(single=True)``: from the other
  benches' one-at-a-time ``ListSource``).

publish, transactional (``count`` records):

- *confluent-kafka bare*: the same with a ``transactional.id``: one
  transaction per ``--batch`` records (``begin``, produce, flush until each
  is acknowledged, ``commit``), as the sink makes one per batch;
- *bridge kafka sink, transactional*: the sink with ``transactional = true``
  (a transaction per batch of the route's ``batch_count``, 100 by default;
  the topic's tail read back on open).

Each bridge run starts as ``bridges run`` starts its routes: the heap built
so far frozen out of the garbage collector's way and young objects
collected less often (``bridges.service.freeze_heap``, before the clock
starts: ``bridges run`` makes it once per process, before its routes start,
and its full collection of the bench's own heap took 25 to 60 ms, a tenth
of a 20,000-record run); the collector's settings are put back for the bare runs, which run as
a plain program does.

A second table gives, for each publish run, when its first batch was
acknowledged and the rate after it. An idempotent producer's first batch
waits for its producer id: librdkafka asks at once, and if no broker is
connected yet, again 500 ms later; a producer whose first ``produce``
comes a few ms after it was made mostly gets its id in about 55 ms. The
bare producer produces at once and nearly always waits the 500 ms; the
bridge, whose route starts first, mostly does not. Each row of the first
table carries that chance; the second shows the rates without it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import confluent_kafka
import trio
from _common import environment_line
from _endpoints import BulkSource, Case, in_rounds, run_from_memory, run_to_count, timed
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bridges import Context, Route
from bridges.endpoints.kafka import KafkaSink, KafkaSinkConfig, KafkaSource, KafkaSourceConfig
from bridges.service import freeze_heap

SERVERS = os.environ.get("TRIO_STOMP_KAFKA_SERVERS", "127.0.0.1:9092")
CONSUME = "kafka -> (consume)"
PUBLISH = "(publish) -> kafka"
BARE = "confluent-kafka bare"
SOURCE = "bridge kafka source"
SINK = "bridge kafka sink"
SINK_ONCE = "bridge kafka sink, transactional"
PUBLISH_ONCE = "(publish, transactional) -> kafka"
#: When the current publish run had its first batch acknowledged (time.perf_counter).
FIRST_ACK: list[float] = []
#: Per publish case, each round's (s to its first acknowledged batch, msg/s after it).
STARTS: dict[str, list[tuple[float, float]]] = {}
#: The producer settings the sink ships with, for the bare producer.
PRODUCER = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "delivery.report.only.error": True,
}


def create_topic(servers: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def fill(servers: str, topic: str, count: int, size: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": servers, **PRODUCER})
    body = b"x" * size
    for i in range(count):
        while True:
            try:
                producer.produce(topic, body, headers=[("bridge-id", f"b{i}".encode())])
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(60):
        raise RuntimeError("fill: records not acknowledged")


def consume_bare(servers: str, topic: str, count: int, window: int) -> None:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"bare-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    got = 0
    while got < count:
        records = consumer.consume(window, 1.0)
        got += len(records)
        for record in records:
            record.value(), record.key(), record.headers(), record.timestamp()
        if records:
            last = records[-1]
            offsets = [confluent_kafka.TopicPartition(topic, last.partition(), last.offset() + 1)]  # type: ignore[operator,arg-type]
            consumer.commit(offsets=offsets, asynchronous=True)
    consumer.close()


def publish_bare(
    servers: str, topic: str, count: int, size: int, batch: int, once: bool = False
) -> None:
    """``once``: one transaction per ``batch`` (``transactional.id`` bare-TOPIC)."""
    settings = {"bootstrap.servers": servers, **PRODUCER}
    if once:
        settings["transactional.id"] = f"bare-{topic}"
    producer = confluent_kafka.Producer(settings)
    if once:
        producer.init_transactions(30)
    body = b"x" * size
    for start in range(0, count, batch):
        if once:
            producer.begin_transaction()
        failed: list[Any] = []

        def report(error: Any, _record: Any, failed: list[Any] = failed) -> None:
            failed.append(error)  # (only for errors: delivery.report.only.error)

        for i in range(start, min(start + batch, count)):
            producer.produce(topic, body, on_delivery=report, headers=[("bridge-id", b"b%d" % i)])
        while producer.flush(0.1):
            pass
        if failed:
            raise RuntimeError(f"records not written: {failed[0]}")
        if once:
            producer.commit_transaction(30)
        if not FIRST_ACK:
            FIRST_ACK.append(time.perf_counter())


@contextmanager
def as_bridges_run() -> Iterator[None]:
    """The garbage collector as ``bridges run`` sets it for its routes, for the block."""
    threshold = gc.get_threshold()
    freeze_heap()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def consume_bridge(servers: str, topic: str, count: int) -> None:
    config = KafkaSourceConfig(bootstrap_servers=servers, topic=topic, group=f"bridge-{topic}")
    trio.run(run_to_count, KafkaSource(config, Context()), count, 300)


async def run_from_bulk(sink: KafkaSink, count: int, size: int, limit: float) -> None:
    """A route from a :class:`BulkSource` of ``count`` messages to ``sink``, to the end."""
    source = BulkSource(count, b"x" * size)
    with trio.fail_after(limit):
        await Route("bench", source, sink).run()
    if source.acked != count:
        raise SystemExit(f"bridge sink wrote {source.acked} of {count}")
    if source.first_ack is not None and not FIRST_ACK:
        FIRST_ACK.append(source.first_ack)


def publish_bridge(
    servers: str, topic: str, count: int, size: int, once: bool = False, single: bool = False
) -> None:
    """``single``: from the other benches' :class:`ListSource` (one message per
    ``receive``, each acked alone) instead of a :class:`_endpoints.BulkSource`."""
    config = KafkaSinkConfig(bootstrap_servers=servers, topic=topic, transactional=once)
    sink = KafkaSink(config, Context(route=topic))
    if single:
        trio.run(run_from_memory, sink, count, size, 300)
    else:
        trio.run(run_from_bulk, sink, count, size, 300)


def cases(servers: str, args: Any) -> list[Case]:
    """What this bench measures (the bare client first in each direction)."""
    count, size = args.count, args.size

    def on_topic(
        filled: bool, runner: Callable[[str], None], bridges_gc: bool = False, case: str = ""
    ) -> Callable[[], tuple[float, float]]:
        def once() -> tuple[float, float]:
            topic = create_topic(servers)
            if filled:
                fill(servers, topic, count, size)
            with as_bridges_run() if bridges_gc else contextlib.nullcontext():
                FIRST_ACK.clear()
                start = time.perf_counter()
                rate, cpu = timed(lambda: runner(topic), count)
                if case and FIRST_ACK:
                    end = start + count / rate
                    after = (count - args.batch) / (end - FIRST_ACK[0])
                    STARTS.setdefault(case, []).append((FIRST_ACK[0] - start, after))
                return rate, cpu

        return once

    return [
        Case(CONSUME, BARE, on_topic(True, lambda t: consume_bare(servers, t, count, args.window))),
        Case(
            CONSUME,
            SOURCE,
            on_topic(True, lambda t: consume_bridge(servers, t, count), bridges_gc=True),
        ),
        Case(
            PUBLISH,
            BARE,
            on_topic(
                False, lambda t: publish_bare(servers, t, count, size, args.batch), case=PUBLISH
            ),
        ),
        Case(
            PUBLISH,
            SINK,
            on_topic(
                False,
                lambda t: publish_bridge(servers, t, count, size),
                bridges_gc=True,
                case=SINK,
            ),
        ),
        Case(
            PUBLISH_ONCE,
            BARE,
            on_topic(
                False,
                lambda t: publish_bare(servers, t, count, size, args.batch, once=True),
                case=PUBLISH_ONCE,
            ),
        ),
        Case(
            PUBLISH_ONCE,
            SINK_ONCE,
            on_topic(
                False,
                lambda t: publish_bridge(servers, t, count, size, once=True),
                bridges_gc=True,
                case=SINK_ONCE,
            ),
        ),
    ]


def _direction(heading: str) -> str:
    """``consume`` or ``publish``: which of the two a case's direction is."""
    return "consume" if heading == CONSUME else "publish"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--directions", default="consume,publish")
    args = parser.parse_args()
    directions = {d.strip() for d in args.directions.split(",") if d.strip()}
    if not directions or not directions <= {"consume", "publish"}:
        parser.error("--directions takes consume,publish")
    print(environment_line(), flush=True)
    print(f"{args.count} x {args.size} B, {args.rounds} rounds, medians")
    print("| direction | client | msg/s | CPU µs/msg | ratio | ratio per round |")
    print("|---|---|---:|---:|---:|---|")
    chosen = [c for c in cases(SERVERS, args) if _direction(c.direction) in directions]
    for row in in_rounds(chosen, args.rounds):
        rounds = " ".join(f"{ratio:.2f}" for ratio in row["ratios"])
        print(
            f"| {row['direction']} | {row['name']} | {row['rate']:,.0f} | "
            f"{row['cpu_us']:.1f} | **{row['ratio']:.2f}** | {rounds} |"
        )
    print_starts()
    return 0


def print_starts() -> None:
    """The publish cases' first batches and their rates after it (see the module docs)."""
    print("\npublish: the first batch acknowledged at (ms, each round); msg/s after it (median)")
    print("| case | first batch, ms | msg/s after it | ratio after it, per round |")
    print("|---|---|---:|---|")
    for case, bare in ((SINK, PUBLISH), (SINK_ONCE, PUBLISH_ONCE)):
        for name in (bare, case):
            runs = STARTS.get(name, [])
            if not runs:
                continue
            ratios = [mine[1] / theirs[1] for mine, theirs in zip(runs, STARTS[bare], strict=False)]
            firsts = " ".join(f"{first * 1000:.0f}" for first, _ in runs)
            after = statistics.median(rate for _, rate in runs)
            per_round = " ".join(f"{ratio:.2f}" for ratio in ratios)
            label = f"{BARE}, {name}" if name == bare else name
            print(f"| {label} | {firsts} | {after:,.0f} | {per_round} |")


if __name__ == "__main__":
    sys.exit(main())
