"""Crash test for the nats and amqp endpoints: ``bridges run`` killed with SIGKILL again and again.

    .venv/bin/python bench/crash/queues_crash.py [--count 10000] [--kills 5]
        [--only nats-sink,nats-source,amqp-sink,amqp-source] [--restart] [--seed N] [--json]

Four scenarios, one route each, the other side a JSON-lines file (fsynced per
batch) so that only the endpoint under test talks to a server:

    nats-sink:    file events.jsonl (one id per line)  ->  nats (JetStream, Nats-Msg-Id)
    nats-source:  stream of ``count`` messages (durable consumer)  ->  file outbox/
    amqp-sink:    file events.jsonl  ->  amqp (confirms, persistent, mandatory) -> queue
    amqp-source:  queue of ``count`` persistent messages  ->  file outbox/

NATS is a private ``nats-server -js`` (its store in a temporary directory);
AMQP is the RabbitMQ of ``scripts/brokers up`` with a fresh durable queue.
``bridges run`` is started and killed with SIGKILL once the far side holds a
random share of the messages (plus 0-50 ms), ``--kills`` times, then runs
until everything arrived and is stopped with SIGTERM (a clean exit is
required). With ``--restart`` the server is also restarted once mid-run
(NATS: the private server; AMQP: ``scripts/brokers restart rabbitmq``, which
disturbs everything else using that RabbitMQ: not in CI).

Figures: arrived (must be all), duplicates and the most copies of one id,
against the bound at-least-once promises (``kills * in_flight``; JetStream's
duplicate window drops the sink's re-sends, so nats-sink expects none). The
harness (kills, figures, command line) is ``bench/crash/_crash.py``, shared with
``bench/crash/mqtt_redis_crash.py``; this script adds the four scenarios.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import aio_pika
import nats
from _crash import HOST, Factory, Scenario, Server, main, private_servers

AMQP_URL = os.environ.get("TRIO_STOMP_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
ROOT = Path(__file__).resolve().parents[2]

# -- what the servers hold ------------------------------------------------------------------


def nats_call(url: str, work: Callable[[Any, Any], Any]) -> Any:
    async def run() -> Any:
        client = await nats.connect(url)
        try:
            return await work(client, client.jetstream())
        finally:
            await client.close()

    return asyncio.run(run())


def nats_stored(url: str, stream: str) -> int:
    async def count(_: Any, js: Any) -> int:
        info = await js.stream_info(stream)
        return int(info.state.messages)

    return int(nats_call(url, count))


def nats_bodies(url: str, stream: str) -> Counter[str]:
    async def read(_: Any, js: Any) -> Counter[str]:
        info = await js.stream_info(stream)
        found: Counter[str] = Counter()
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            found[(await js.get_msg(stream, seq)).data.decode()] += 1
        return found

    result: Counter[str] = nats_call(url, read)
    return result


def nats_fill(url: str, stream: str, ids: list[str]) -> None:
    async def fill(_: Any, js: Any) -> None:
        await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        for start in range(0, len(ids), 1000):
            futures = [
                await js.publish_async(f"{stream}.in", i.encode())
                for i in ids[start : start + 1000]
            ]
            await asyncio.gather(*futures)

    nats_call(url, fill)


def amqp_call(work: Callable[[Any], Any]) -> Any:
    async def run() -> Any:
        connection = await aio_pika.connect(AMQP_URL)
        try:
            return await work(await connection.channel())
        finally:
            await connection.close()

    return asyncio.run(run())


def amqp_depth(queue: str) -> int:
    async def depth(channel: Any) -> int:
        declared = await channel.declare_queue(queue, durable=True, passive=True)
        return int(declared.declaration_result.message_count)

    return int(amqp_call(depth))


def amqp_drain(queue: str) -> Counter[str]:
    async def drain(channel: Any) -> Counter[str]:
        found: Counter[str] = Counter()
        declared = await channel.get_queue(queue)
        while (message := await declared.get(fail=False, no_ack=True)) is not None:
            found[message.body.decode()] += 1
        await channel.queue_delete(queue)
        return found

    result: Counter[str] = amqp_call(drain)
    return result


def amqp_fill(queue: str, ids: list[str]) -> None:
    """Declare the durable queue; put ``ids`` in it, persistent, each its own body."""

    async def fill(channel: Any) -> None:
        await channel.declare_queue(queue, durable=True)
        for start in range(0, len(ids), 1000):
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(i.encode(), delivery_mode=2, message_id=i), queue
                    )
                    for i in ids[start : start + 1000]
                )
            )

    amqp_call(fill)


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


# -- the scenarios --------------------------------------------------------------------------

JSONL_SOURCE: Final = (
    '{ type = "file", path = "events.jsonl", mode = "jsonl", poll_interval = 0.05 }'
)
FILE_SINK: Final = '{ type = "file", path = "outbox", format = "jsonl", rotate_bytes = 65536 }'


def nats_command(port: int, store: Path) -> list[str]:
    """A nats-server with JetStream of our own, its store kept across restarts."""
    binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
    return [binary, "-a", HOST, "-p", str(port), "-js", "-sd", str(store)]


def nats_url(server: Server) -> str:
    return f"nats://{HOST}:{server.port}"


def restart_rabbitmq() -> None:
    subprocess.run([str(ROOT / "scripts" / "brokers"), "restart", "rabbitmq"], check=True)


def nats_sink(work: Path, ids: list[str], server: Server) -> Scenario:
    url, stream = nats_url(server), f"CRASH{uuid.uuid4().hex[:8].upper()}"
    nats_call(url, lambda _, js: js.add_stream(name=stream, subjects=[f"{stream}.>"]))
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    sink = f'{{ type = "nats", url = "{url}", subject = "{stream}.out" }}'
    return Scenario(
        JSONL_SOURCE,
        sink,
        lambda: nats_stored(url, stream),
        lambda: nats_bodies(url, stream),
        lambda: nats_stored(url, stream) >= len(ids),
        server.restart,
    )


def nats_source(work: Path, ids: list[str], server: Server) -> Scenario:
    url, stream = nats_url(server), f"CRASH{uuid.uuid4().hex[:8].upper()}"
    nats_fill(url, stream, ids)
    source = (
        f'{{ type = "nats", url = "{url}", stream = "{stream}", durable = "crash", '
        f'subject = "{stream}.>", ack_wait = 5.0 }}'
    )
    outbox = work / "outbox"
    return Scenario(
        source,
        FILE_SINK,
        lambda: sum(outbox_bodies(outbox).values()),
        lambda: outbox_bodies(outbox),
        lambda: len(outbox_bodies(outbox)) >= len(ids),
        server.restart,
    )


def amqp_sink(work: Path, ids: list[str]) -> Scenario:
    queue = f"queues-crash-{uuid.uuid4().hex[:10]}"
    amqp_fill(queue, [])
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    sink = f'{{ type = "amqp", url = "{AMQP_URL}", routing_key = "{queue}" }}'
    return Scenario(
        JSONL_SOURCE,
        sink,
        lambda: amqp_depth(queue),
        lambda: amqp_drain(queue),
        lambda: amqp_depth(queue) >= len(ids),
        restart_rabbitmq,
    )


def amqp_source(work: Path, ids: list[str]) -> Scenario:
    queue = f"queues-crash-{uuid.uuid4().hex[:10]}"
    amqp_fill(queue, ids)
    source = f'{{ type = "amqp", url = "{AMQP_URL}", queue = "{queue}" }}'
    outbox = work / "outbox"

    def final() -> Counter[str]:
        amqp_call(lambda channel: channel.queue_delete(queue))
        return outbox_bodies(outbox)

    return Scenario(
        source,
        FILE_SINK,
        lambda: sum(outbox_bodies(outbox).values()),
        final,
        lambda: amqp_depth(queue) == 0 and len(outbox_bodies(outbox)) >= len(ids),
        restart_rabbitmq,
    )


SCENARIOS: Final = ["nats-sink", "nats-source", "amqp-sink", "amqp-source"]


@contextmanager
def setup(names: list[str]) -> Iterator[dict[str, Factory]]:
    """A private nats-server when NATS_NAMES need one; a factory per scenario."""
    wanted = (
        Server(nats_command, "nats-server", down=0.5) if any("nats" in n for n in names) else None
    )
    with private_servers({"nats": wanted}) as servers:
        factories: dict[str, Factory] = {"amqp-sink": amqp_sink, "amqp-source": amqp_source}
        if "nats" in servers:
            factories["nats-sink"] = functools.partial(nats_sink, server=servers["nats"])
            factories["nats-source"] = functools.partial(nats_source, server=servers["nats"])
        yield factories


if __name__ == "__main__":
    sys.exit(main(__doc__ or "", SCENARIOS, setup))
