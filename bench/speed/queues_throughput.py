"""The queue families' endpoints against their libraries used bare, in one run, round by round.

    .venv/bin/python bench/speed/queues_throughput.py [--count 20000] [--size 100] [--batch 100]
        [--window 1000] [--rounds 5] [--only nats,amqp,mqtt,redis,kafka]
        [--directions consume,publish] [--json PATH]

Every bridge row runs at the shipped defaults: the endpoint's config with only
what names the queue, ``Context()``, and a :class:`bridges.Route` with its
own ``in_flight`` (1000), ``batch_count`` (100) and ``batch_time`` (0: group commit).
``--batch`` and ``--window`` set the bare clients' fetch, publish batch and
prefetch, matching those defaults.

Each round runs every case once (every other round in the reverse order); a
bridge is judged by the **median of its per-round ratios** to the bare
library in the same round, which a load that comes and goes on a shared
machine moves much less than a best-of or a ratio of medians. The table gives
the median rate and CPU time per message (this process) too, and each
round's ratio. A run is timed from the first connect to the last close, bare
and bridge alike.

Servers: NATS runs on a private ``nats-server -js``, MQTT on a private
``mosquitto``, Redis on a private ``redis-server`` with ``appendfsync
always`` (each Debian's binary; loopback, a free port, a temporary
directory), AMQP on the RabbitMQ of ``scripts/brokers up`` (5672,
guest/guest) with a fresh durable queue per run.

consume (``count`` messages wait in the stream / queue / session):

(The asyncio bare clients run on asyncio's own event loop, set explicitly:
importing trio-asyncio would otherwise give ``asyncio.run`` its synchronous loop.)

- nats bare: plain asyncio, a pull subscription, ``fetch(--batch)``, ``ack()``
  each message, the next fetch;
- amqp bare: plain asyncio, ``basic.qos(--window)``, ``queue.consume`` with
  ``message.ack()`` in the callback;
- mqtt bare: paho's own network thread, ``manual_ack``, ``ack()`` in
  ``on_message`` (``bench/speed/mqtt_throughput.py``);
- redis bare: coredis, ``XREADGROUP COUNT --window`` and one ``XACK`` for
  what it read (``bench/speed/redis_throughput.py``);
- bridge: a route from the family's source to a sink that only counts.

publish (``count`` messages of ``--size`` bytes, each with its id):

- nats bare: batches of ``--batch`` ``publish_async`` with ``Nats-Msg-Id``,
  then every PubAck awaited;
- amqp bare: a confirm-mode channel, batches of ``--batch`` persistent
  mandatory publishes gathered, every confirm awaited;
- mqtt bare: QoS 1 publishes with a ``bridge-id`` user property, batches of
  ``--batch``, every PUBACK awaited;
- redis bare: pipelines of ``--batch`` ``XADD``;
- bridge: a route from an in-memory source to the family's sink.

kafka: ``bench/speed/kafka_throughput.py``'s cases (its docstring says what
each side does), with a third pair, ``publish, transactional``: a bare
producer with one transaction per ``--batch`` records against the
transactional sink, which makes one per batch.

``--json PATH`` writes the figures (``bench/_base.write_report``): one row
per family and direction and side (series ``bridge`` / ``bare library``, label
``FAMILY source`` / ``FAMILY sink``, value the median msg/s, with the median
ratio, the per-round ratios and the CPU time per message).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aio_pika
import kafka_throughput as kafka
import mqtt_throughput as mqtt
import nats
import redis_throughput as redis
import trio
from _common import HOST, bench_command, environment_line, write_report
from _endpoints import Case, in_rounds, private_server, run_from_memory, run_to_count, timed

from bridges import Context, Sink, Source
from bridges.endpoints.amqp import AmqpSink, AmqpSinkConfig, AmqpSource, AmqpSourceConfig
from bridges.endpoints.nats import NatsSink, NatsSinkConfig, NatsSource, NatsSourceConfig

AMQP_URL = os.environ.get("TRIO_STOMP_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
FAMILIES = ("nats", "amqp", "mqtt", "redis", "kafka")
#: What a bridge is named in the table, per direction.
ENDPOINT = {"consume": "source", "publish": "sink"}


def nats_command(port: int, work: Path) -> list[str]:
    """A nats-server with JetStream of our own."""
    binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
    return [binary, "-a", HOST, "-p", str(port), "-js", "-sd", str(work)]


# -- routes at the shipped defaults ---------------------------------------------------------


async def to_count(source: Source, count: int) -> None:
    """A route (defaults) from ``source`` to a counting sink. (A server restarted under
    us: fail, not hang.)"""
    await run_to_count(source, count, 300)


async def from_memory(sink: Sink, count: int, size: int) -> None:
    """A route (defaults) from ``count`` messages of ``size`` bytes in memory to ``sink``."""
    await run_from_memory(sink, count, size, 300)


# -- NATS -------------------------------------------------------------------------------


async def nats_fill(url: str, stream: str, count: int, size: int) -> None:
    client = await nats.connect(url)
    js = client.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream}.>"])
    body = b"x" * size
    for start in range(0, count, 1000):
        futures = [
            await js.publish_async(f"{stream}.a", body) for _ in range(min(1000, count - start))
        ]
        await asyncio.gather(*futures)
    await client.close()


async def nats_drop(url: str, stream: str) -> None:
    client = await nats.connect(url)
    await client.jetstream().delete_stream(stream)
    await client.close()


async def nats_consume_bare(url: str, stream: str, count: int, batch: int) -> None:
    client = await nats.connect(url)
    js = client.jetstream()
    sub = await js.pull_subscribe(f"{stream}.>", durable="bare", stream=stream)
    got = 0
    while got < count:
        for msg in await sub.fetch(batch, timeout=5):
            await msg.ack()
            got += 1
    await client.flush()
    await client.close()


async def nats_publish_bare(url: str, stream: str, count: int, size: int, batch: int) -> None:
    client = await nats.connect(url)
    js = client.jetstream()
    body = b"x" * size
    for start in range(0, count, batch):
        futures = [
            await js.publish_async(f"{stream}.a", body, headers={"Nats-Msg-Id": f"b{i}"})
            for i in range(start, min(start + batch, count))
        ]
        await asyncio.gather(*futures)
    await client.close()


def nats_cases(url: str, args: argparse.Namespace) -> list[Case]:
    count, size, batch = args.count, args.size, args.batch

    def on_stream(filled: bool, run: Callable[[str], None]) -> Callable[[], tuple[float, float]]:
        def once() -> tuple[float, float]:
            stream = f"B{uuid.uuid4().hex[:8].upper()}"
            asyncio.run(nats_fill(url, stream, count if filled else 0, size))
            try:
                return timed(lambda: run(stream), count)
            finally:
                asyncio.run(nats_drop(url, stream))

        return once

    def consume_bridge(stream: str) -> None:
        config = NatsSourceConfig(url=url, stream=stream, subject=f"{stream}.>", durable="bridge")
        trio.run(to_count, NatsSource(config, Context()), count)

    def publish_bridge(stream: str) -> None:
        sink = NatsSink(NatsSinkConfig(url=url, subject=f"{stream}.a"), Context())
        trio.run(from_memory, sink, count, size)

    return [
        Case(
            "consume",
            "bare",
            on_stream(True, lambda s: asyncio.run(nats_consume_bare(url, s, count, batch))),
        ),
        Case("consume", "bridge", on_stream(True, consume_bridge)),
        Case(
            "publish",
            "bare",
            on_stream(False, lambda s: asyncio.run(nats_publish_bare(url, s, count, size, batch))),
        ),
        Case("publish", "bridge", on_stream(False, publish_bridge)),
    ]


# -- AMQP -------------------------------------------------------------------------------


async def amqp_fill(queue: str, count: int, size: int) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    body = b"x" * size
    for start in range(0, count, 1000):
        await asyncio.gather(
            *(
                channel.default_exchange.publish(aio_pika.Message(body), queue)
                for _ in range(min(1000, count - start))
            )
        )
    await connection.close()


async def amqp_drop(queue: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    await channel.queue_delete(queue)
    await connection.close()


async def amqp_consume_bare(queue: str, count: int, window: int) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=window)
    declared = await channel.get_queue(queue)
    done = asyncio.Event()
    got = 0

    async def on_message(message: Any) -> None:
        nonlocal got
        await message.ack()
        got += 1
        if got >= count:
            done.set()

    await declared.consume(on_message)
    await asyncio.wait_for(done.wait(), 300)  # (a broker restarted under us: fail, not hang)
    await connection.close()


async def amqp_publish_bare(queue: str, count: int, size: int, batch: int) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
    body = b"x" * size
    persistent = aio_pika.DeliveryMode.PERSISTENT
    for start in range(0, count, batch):
        await asyncio.gather(
            *(
                channel.default_exchange.publish(
                    aio_pika.Message(body, delivery_mode=persistent, message_id=f"b{i}"),
                    queue,
                    mandatory=True,
                )
                for i in range(start, min(start + batch, count))
            )
        )
    await connection.close()


def amqp_cases(args: argparse.Namespace) -> list[Case]:
    count, size, batch, window = args.count, args.size, args.batch, args.window

    def on_queue(filled: bool, run: Callable[[str], None]) -> Callable[[], tuple[float, float]]:
        def once() -> tuple[float, float]:
            queue = f"bench-{uuid.uuid4().hex[:10]}"
            asyncio.run(amqp_fill(queue, count if filled else 0, size))
            try:
                return timed(lambda: run(queue), count)
            finally:
                asyncio.run(amqp_drop(queue))

        return once

    def consume_bridge(queue: str) -> None:
        source = AmqpSource(AmqpSourceConfig(url=AMQP_URL, queue=queue), Context())
        trio.run(to_count, source, count)

    def publish_bridge(queue: str) -> None:
        sink = AmqpSink(AmqpSinkConfig(url=AMQP_URL, routing_key=queue), Context())
        trio.run(from_memory, sink, count, size)

    return [
        Case(
            "consume",
            "bare",
            on_queue(True, lambda q: asyncio.run(amqp_consume_bare(q, count, window))),
        ),
        Case("consume", "bridge", on_queue(True, consume_bridge)),
        Case(
            "publish",
            "bare",
            on_queue(False, lambda q: asyncio.run(amqp_publish_bare(q, count, size, batch))),
        ),
        Case("publish", "bridge", on_queue(False, publish_bridge)),
    ]


# -- MQTT and Redis: their own benches' cases ----------------------------------------------------


def mqtt_cases(port: int, args: argparse.Namespace) -> list[Case]:
    by_name = {(c.direction, c.name): c for c in mqtt.cases(port, args)}
    return [
        Case("consume", "bare", by_name[mqtt.CONSUME, mqtt.BARE].once),
        Case("consume", "bridge", by_name[mqtt.CONSUME, mqtt.SOURCE].once),
        Case("publish", "bare", by_name[mqtt.PUBLISH, mqtt.BARE].once),
        Case("publish", "bridge", by_name[mqtt.PUBLISH, mqtt.SINK].once),
    ]


def redis_cases(url: str, args: argparse.Namespace) -> list[Case]:
    by_name = {(c.direction, c.name): c for c in redis.cases(url, args)}
    return [
        Case("consume", "bare", by_name[redis.CONSUME, redis.BARE].once),
        Case("consume", "bridge", by_name[redis.CONSUME, redis.SOURCE].once),
        Case("publish", "bare", by_name[redis.PUBLISH, redis.BARE].once),
        Case("publish", "bridge", by_name[redis.PUBLISH, redis.SINK].once),
    ]


def kafka_cases(args: argparse.Namespace) -> list[Case]:
    by_name = {(c.direction, c.name): c for c in kafka.cases(kafka.SERVERS, args)}
    return [
        Case("consume", "bare", by_name[kafka.CONSUME, kafka.BARE].once),
        Case("consume", "bridge", by_name[kafka.CONSUME, kafka.SOURCE].once),
        Case("publish", "bare", by_name[kafka.PUBLISH, kafka.BARE].once),
        Case("publish", "bridge", by_name[kafka.PUBLISH, kafka.SINK].once),
        # (its own bare row: a bare producer with one transaction per batch, as the sink)
        Case("publish, transactional", "bare", by_name[kafka.PUBLISH_ONCE, kafka.BARE].once),
        Case("publish, transactional", "bridge", by_name[kafka.PUBLISH_ONCE, kafka.SINK_ONCE].once),
    ]


# -- output ---------------------------------------------------------------------------------


def _label(family: str, direction: str) -> str:
    """``kafka sink`` for ``publish``; ``kafka sink, transactional`` for
    ``publish, transactional`` (a variant with its own bare row)."""
    base, _, variant = direction.partition(",")
    return f"{family} {ENDPOINT[base]}{',' + variant if variant else ''}"


def report_rows(family: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` of :func:`in_rounds` for ``family`` as write_report rows."""
    return [
        {
            "series": "bare library" if row["name"] == "bare" else "bridge",
            "label": _label(family, row["direction"]),
            "value": round(row["rate"]),
            "ratio": round(row["ratio"], 3),
            "ratios": [round(ratio, 3) for ratio in row["ratios"]],
            "cpu_us": round(row["cpu_us"], 1),
        }
        for row in rows
    ]


def print_table(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"{args.count} messages of {args.size} B; bare: batch {args.batch}, window "
        f"{args.window}; bridge: shipped defaults; {args.rounds} rounds, medians"
    )
    head = ("endpoint", "bare msg/s", "bridge msg/s", "CPU µs bare", "CPU µs bridge", "ratio")
    print("| " + " | ".join(head) + " | ratio per round |")
    print("|---|---:|---:|---:|---:|---:|---|")
    by_label: dict[str, dict[str, dict[str, Any]]] = {}
    for row in results:
        by_label.setdefault(row["label"], {})[row["series"]] = row
    for label, pair in by_label.items():
        bare, bridge = pair["bare library"], pair["bridge"]
        rounds = " ".join(f"{ratio:.2f}" for ratio in bridge["ratios"])
        print(
            f"| {label} | {bare['value']:,} | {bridge['value']:,} | {bare['cpu_us']} | "
            f"{bridge['cpu_us']} | **{bridge['ratio']:.2f}** | {rounds} |"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=",".join(FAMILIES))
    parser.add_argument("--directions", default="consume,publish")
    parser.add_argument("--json", metavar="PATH", help="write the figures here (write_report)")
    args = parser.parse_args(argv)
    families = [name.strip() for name in args.only.split(",") if name.strip()]
    directions = set(args.directions.split(","))
    if not families or set(families) - set(FAMILIES) or not directions <= set(ENDPOINT):
        parser.error(f"--only takes {','.join(FAMILIES)}; --directions consume,publish")
    # Importing the endpoints imports trio-asyncio, which makes a plain
    # asyncio.run() outside Trio use its own (slower) synchronous loop; the
    # bare clients must run on asyncio's own loop, as they would without us.
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    print(environment_line(), flush=True)
    # (mqtt and redis take their own benches' options)
    args.fsync = "always"
    results: list[dict[str, Any]] = []
    for family in families:
        with ExitStack() as stack:
            if family == "nats":
                port = stack.enter_context(private_server(nats_command, "nats-server"))
                cases = nats_cases(f"nats://{HOST}:{port}", args)
            elif family == "amqp":
                cases = amqp_cases(args)
            elif family == "kafka":
                cases = kafka_cases(args)  # (the project's Kafka: starting one takes ~20 s)
            elif family == "mqtt":
                port = stack.enter_context(private_server(mqtt.mosquitto_command, "mosquitto"))
                cases = mqtt_cases(port, args)
            else:
                port = stack.enter_context(
                    private_server(redis.redis_command(args.fsync), "redis-server")
                )
                cases = redis_cases(f"redis://{HOST}:{port}/0", args)
            chosen = [case for case in cases if case.direction.split(",")[0] in directions]
            results += report_rows(family, in_rounds(chosen, args.rounds))
    print_table(results, args)
    if args.json:
        command = bench_command(__file__, list(sys.argv[1:] if argv is None else argv))
        write_report(args.json, bench="queues", command=command, unit="msg/s", rows=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
