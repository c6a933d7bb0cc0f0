"""NATS JetStream and AMQP endpoints against nats-py and aio-pika used bare, in one run.

    .venv/bin/python bench/speed/queues_throughput.py [--count 20000] [--size 100] [--batch 100]
        [--window 1000] [--rounds 3] [--only nats,amqp] [--directions consume,publish]
        [--json]

NATS runs on a private ``nats-server -js`` (Debian's binary; loopback, a free
port, JetStream in a temporary directory) so that nothing else disturbs it;
AMQP uses the RabbitMQ of ``scripts/brokers up`` (5672, guest/guest) with a
fresh durable queue. One table: messages/s (best of ``--rounds``), CPU time
per message (this process), and the ratio to the bare library doing the same
work in the same direction:

consume (``count`` messages wait in the stream / queue):

(The bare clients run on asyncio's own event loop, set explicitly: importing
trio-asyncio would otherwise give ``asyncio.run`` its synchronous loop.)

- nats bare: plain asyncio, a pull subscription, ``fetch(--batch)``, ``ack()``
  each message, the next fetch;
- nats bridge: a route from the ``nats`` source (trio-asyncio, window
  ``--window``) to a sink that only counts;
- amqp bare: plain asyncio, ``basic.qos(--window)``, ``queue.consume`` with
  ``message.ack()`` in the callback;
- amqp bridge: a route from the ``amqp`` source to a sink that only counts.

publish (``count`` messages of ``--size`` bytes):

- nats bare: batches of ``--batch`` ``publish_async`` with ``Nats-Msg-Id``,
  then every PubAck awaited;
- nats bridge: a route from an in-memory source to the ``nats`` sink;
- amqp bare: a confirm-mode channel, batches of ``--batch`` persistent
  mandatory publishes gathered, every confirm awaited;
- amqp bridge: a route from an in-memory source to the ``amqp`` sink.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aio_pika
import nats
import trio
from _common import HOST, environment_line
from _endpoints import private_server, run_from_memory, run_to_count, timed

from bridges import Context, Sink, Source
from bridges.endpoints.amqp import AmqpSink, AmqpSinkConfig, AmqpSource, AmqpSourceConfig
from bridges.endpoints.nats import NatsSink, NatsSinkConfig, NatsSource, NatsSourceConfig

AMQP_URL = os.environ.get("TRIO_STOMP_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")


def nats_command(port: int, work: Path) -> list[str]:
    """A nats-server with JetStream of our own."""
    binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
    return [binary, "-a", HOST, "-p", str(port), "-js", "-sd", str(work)]


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


def nats_rows(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    count, size, batch, window = args.count, args.size, args.batch, args.window
    rows: list[dict[str, Any]] = []

    def consume_bare() -> None:
        asyncio.run(nats_consume_bare(url, stream, count, batch))

    def consume_bridge() -> None:
        source = NatsSource(
            NatsSourceConfig(url=url, stream=stream, subject=f"{stream}.>", durable="bridge"),
            Context(in_flight=window),
        )
        trio.run(to_count, source, count, batch, window)

    def publish_bare() -> None:
        asyncio.run(nats_publish_bare(url, stream, count, size, batch))

    def publish_bridge() -> None:
        sink = NatsSink(NatsSinkConfig(url=url, subject=f"{stream}.a"), Context())
        trio.run(from_memory, sink, count, size, batch, window)

    for direction, bare, bridge in (
        ("consume", consume_bare, consume_bridge),
        ("publish", publish_bare, publish_bridge),
    ):
        if direction not in args.directions.split(","):
            continue
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.rounds):
            for name, run in (("bare", bare), ("bridge", bridge)):
                stream = f"B{uuid.uuid4().hex[:8].upper()}"
                if direction == "consume":
                    asyncio.run(nats_fill(url, stream, count, size))
                else:
                    asyncio.run(nats_fill(url, stream, 0, size))
                try:
                    rate, cpu = timed(run, count)
                finally:
                    asyncio.run(nats_drop(url, stream))
                if name not in best or rate > best[name][0]:
                    best[name] = (rate, cpu)
        rows += table_rows("nats", direction, best)
    return rows


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


def amqp_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    count, size, batch, window = args.count, args.size, args.batch, args.window
    rows: list[dict[str, Any]] = []

    def consume_bare() -> None:
        asyncio.run(amqp_consume_bare(queue, count, window))

    def consume_bridge() -> None:
        source = AmqpSource(AmqpSourceConfig(url=AMQP_URL, queue=queue), Context(in_flight=window))
        trio.run(to_count, source, count, batch, window)

    def publish_bare() -> None:
        asyncio.run(amqp_publish_bare(queue, count, size, batch))

    def publish_bridge() -> None:
        sink = AmqpSink(AmqpSinkConfig(url=AMQP_URL, routing_key=queue), Context())
        trio.run(from_memory, sink, count, size, batch, window)

    for direction, bare, bridge in (
        ("consume", consume_bare, consume_bridge),
        ("publish", publish_bare, publish_bridge),
    ):
        if direction not in args.directions.split(","):
            continue
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.rounds):
            for name, run in (("bare", bare), ("bridge", bridge)):
                queue = f"bench-{uuid.uuid4().hex[:10]}"
                asyncio.run(amqp_fill(queue, count if direction == "consume" else 0, size))
                try:
                    rate, cpu = timed(run, count)
                finally:
                    asyncio.run(amqp_drop(queue))
                if name not in best or rate > best[name][0]:
                    best[name] = (rate, cpu)
        rows += table_rows("amqp", direction, best)
    return rows


# -- routes -------------------------------------------------------------------------------


async def to_count(source: Source, count: int, batch: int, window: int) -> None:
    # (a server restarted under us: fail, not hang)
    await run_to_count(source, count, 300, in_flight=window, batch_count=batch, batch_time=0.005)


async def from_memory(sink: Sink, count: int, size: int, batch: int, window: int) -> None:
    await run_from_memory(
        sink, count, size, 300, in_flight=window, batch_count=batch, batch_time=0.005
    )


# -- output ---------------------------------------------------------------------------------


def table_rows(
    family: str, direction: str, best: dict[str, tuple[float, float]]
) -> list[dict[str, Any]]:
    bare_rate = best["bare"][0]
    return [
        {
            "family": family,
            "direction": direction,
            "client": f"{family} {name}",
            "msgs_per_s": round(rate),
            "cpu_us_per_msg": round(cpu, 1),
            "ratio_to_bare": round(rate / bare_rate, 2),
        }
        for name, (rate, cpu) in best.items()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="nats,amqp")
    parser.add_argument("--directions", default="consume,publish")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # Importing the endpoints imports trio-asyncio, which makes a plain
    # asyncio.run() outside Trio use its own (slower) synchronous loop; the
    # bare clients must run on asyncio's own loop, as they would without us.
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    families = set(args.only.split(","))
    rows: list[dict[str, Any]] = []
    if "nats" in families:
        with private_server(nats_command, "nats-server") as port:
            rows += nats_rows(f"nats://{HOST}:{port}", args)
    if "amqp" in families:
        rows += amqp_rows(args)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(environment_line())
    print(
        f"{args.count} messages of {args.size} B, batch {args.batch}, window {args.window}, "
        f"best of {args.rounds}; python {sys.version.split()[0]}"
    )
    head = ("direction", "client", "msgs/s", "CPU µs/msg", "vs bare")
    print(f"| {head[0]:<9} | {head[1]:<12} | {head[2]:>8} | {head[3]:>10} | {head[4]:>7} |")
    print(f"|{'-' * 11}|{'-' * 14}|{'-' * 10}|{'-' * 12}|{'-' * 9}|")
    for row in rows:
        print(
            f"| {row['direction']:<9} | {row['client']:<12} | {row['msgs_per_s']:>8} | "
            f"{row['cpu_us_per_msg']:>10} | {row['ratio_to_bare']:>7.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
