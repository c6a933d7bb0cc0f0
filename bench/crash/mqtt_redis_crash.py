"""Crash test for the mqtt and redis endpoints: ``bridges run`` killed with SIGKILL, each direction.

    .venv/bin/python bench/crash/mqtt_redis_crash.py [--count 10000] [--kills 5]
        [--only stomp-to-mqtt,mqtt-to-stomp,stomp-to-redis,redis-to-stomp]
        [--restart] [--seed N] [--json]

Four scenarios, one route each, the other side STOMP (the embedded broker in
a process of its own, ``trio-stomp broker``, which outlives every kill):

    stomp-to-mqtt:   queue of ``count`` messages  ->  mqtt sink (QoS 1)  ->  subscriber
    mqtt-to-stomp:   ``count`` messages waiting in the bridge's MQTT session  ->  queue
    stomp-to-redis:  queue of ``count`` messages  ->  redis sink (XADD)  ->  stream
    redis-to-stomp:  stream of ``count`` entries (consumer group)  ->  queue

Mosquitto and Redis are private instances of Debian's binaries on free ports
(Redis with ``appendonly yes``, ``appendfsync always``; Mosquitto without
queue limits), so the run disturbs nothing else. Each message's body is its
id (``msg-000042``). ``bridges run`` is started and killed with SIGKILL once
the far side holds a random share of the messages (plus 0-50 ms), ``--kills``
times, then runs until everything arrived and is stopped with SIGTERM (a clean
exit is required). ``--restart`` also restarts the private server once,
mid-run. Figures: arrived (must be all), duplicates and the most copies of one
id, against the bound at-least-once promises: ``kills * in_flight``. The
harness (kills, figures, command line) is ``bench/crash/_crash.py``, shared with
``bench/crash/queues_crash.py``; this script adds the four scenarios.
"""

from __future__ import annotations

import collections
import functools
import os
import shutil
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import coredis
import paho.mqtt.client as paho
import stomp
import trio
from _crash import (
    HOST,
    BenchError,
    Factory,
    Scenario,
    Server,
    Target,
    embedded_broker,
    main,
    private_servers,
)
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

import trio_stomp


def mosquitto_command(port: int, work: Path) -> list[str]:
    as_root = "user root\n" if os.geteuid() == 0 else ""
    (work / "mosquitto.conf").write_text(
        f"listener {port} {HOST}\nallow_anonymous true\npersistence true\n"
        f"persistence_location {work}/\nmax_inflight_messages 0\nmax_queued_messages 0\n"
        f"set_tcp_nodelay true\n{as_root}"
    )
    return [shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", str(work / "mosquitto.conf")]


def redis_command(port: int, work: Path) -> list[str]:
    return [
        shutil.which("redis-server") or "/usr/bin/redis-server",
        "--port", str(port), "--bind", HOST, "--dir", str(work), "--save", "",
        "--appendonly", "yes", "--appendfsync", "always",
    ]  # fmt: skip


# -- the STOMP side -------------------------------------------------------------------


def stomp_fill(target: Target, queue: str, ids: list[str]) -> None:
    async def fill() -> None:
        async with trio_stomp.connect(target.url) as client:
            for index, message_id in enumerate(ids):
                last = index == len(ids) - 1
                headers = {"bridge-id": message_id}
                await client.send(queue, message_id.encode(), headers=headers, receipt=last)

    trio.run(fill)


class StompCounter:
    """A stomp.py consumer (its own thread) that counts what arrives on a queue."""

    def __init__(self, target: Target, queue: str) -> None:
        self.copies: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._connection = stomp.Connection([(HOST, target.port)], auto_decode=False)
        self._connection.set_listener("count", self)
        self._connection.connect(target.login, target.passcode, wait=True)
        self._connection.subscribe(
            queue, id="1", ack="client-individual", headers={"prefetch-count": "1000"}
        )

    def on_message(self, frame: Any) -> None:
        with self._lock:
            self.copies[bytes(frame.body).decode()] += 1
        self._connection.ack(frame.headers["message-id"], "1")

    def held(self) -> int:
        with self._lock:
            return sum(self.copies.values())

    def distinct(self) -> int:
        with self._lock:
            return len(self.copies)

    def final(self) -> Counter[str]:
        self._connection.disconnect()
        with self._lock:
            return Counter(self.copies)


# -- the MQTT side ----------------------------------------------------------------------


def paho_client(client_id: str) -> paho.Client:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
    client.max_inflight_messages_set(0)
    client.max_queued_messages_set(0)
    return client


def session(expiry: int = 3600) -> Properties:
    properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    properties.SessionExpiryInterval = expiry
    return properties


class MqttCounter:
    """A bare paho subscriber (persistent session, QoS 1, its own thread) that counts."""

    def __init__(self, port: int, topic: str) -> None:
        self.copies: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._client = paho_client(f"counter-{uuid.uuid4().hex[:8]}")
        subscribed = threading.Event()
        self._client.on_message = self._on_message
        self._client.on_connect = lambda client, *args: client.subscribe(topic, qos=1)
        self._client.on_subscribe = lambda *args: subscribed.set()
        # reconnects by itself when the server restarts; the session keeps what it missed
        self._client.connect(HOST, port, clean_start=False, properties=session())
        self._client.loop_start()
        if not subscribed.wait(10):
            raise BenchError("the MQTT counter got no SUBACK")

    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        with self._lock:
            self.copies[bytes(message.payload).decode()] += 1

    def held(self) -> int:
        with self._lock:
            return sum(self.copies.values())

    def distinct(self) -> int:
        with self._lock:
            return len(self.copies)

    def final(self) -> Counter[str]:
        self._client.disconnect()
        self._client.loop_stop()
        with self._lock:
            return Counter(self.copies)


def mqtt_fill(port: int, client_id: str, topic: str, ids: list[str]) -> None:
    """Create ``client_id``'s session (subscribed to ``topic``), then publish ``ids`` into it."""
    bridge = paho_client(client_id)
    subscribed = threading.Event()
    bridge.on_subscribe = lambda *args: subscribed.set()
    bridge.connect(HOST, port, clean_start=False, properties=session(7 * 24 * 3600))
    bridge.loop_start()
    bridge.subscribe(topic, qos=1)
    if not subscribed.wait(10):
        raise BenchError("no SUBACK for the bridge's session")
    bridge.disconnect()
    bridge.loop_stop()
    publisher = paho_client(f"filler-{uuid.uuid4().hex[:8]}")
    publisher.connect(HOST, port)
    publisher.loop_start()
    for start in range(0, len(ids), 1000):
        infos = []
        for message_id in ids[start : start + 1000]:
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.UserProperty = [("bridge-id", message_id)]
            infos.append(publisher.publish(topic, message_id, qos=1, properties=properties))
        for info in infos:
            info.wait_for_publish(30)
    publisher.disconnect()
    publisher.loop_stop()


# -- the Redis side ---------------------------------------------------------------------


def redis_call(url: str, work: Callable[[coredis.Redis[bytes]], Any]) -> Any:
    async def call() -> Any:
        async with coredis.Redis.from_url(url) as client:
            return await work(client)

    return trio.run(call)


def redis_fill(url: str, stream: str, ids: list[str], *, stable: bool = True) -> None:
    """``ids`` as entries of ``stream``; with ``bridge-id`` unless not ``stable`` (then a
    source's id is the entry id)."""

    async def fill(client: coredis.Redis[bytes]) -> None:
        for start in range(0, len(ids), 1000):
            async with client.pipeline(transaction=False) as pipe:
                for message_id in ids[start : start + 1000]:
                    fields = {"body": message_id}
                    if stable:
                        fields["bridge-id"] = message_id
                    pipe.xadd(stream, fields)

    redis_call(url, fill)


def redis_bodies(url: str, stream: str) -> Counter[str]:
    async def read(client: coredis.Redis[bytes]) -> Counter[str]:
        copies: Counter[str] = collections.Counter()
        for entry in await client.xrange(stream):
            fields: dict[str | bytes, str | bytes] = dict(entry.field_values or {})
            body = fields.get(b"body", b"")
            copies[body.decode() if isinstance(body, bytes) else str(body)] += 1
        return copies

    result: Counter[str] = redis_call(url, read)
    return result


def redis_length(url: str, stream: str) -> int:
    length: int = redis_call(url, lambda client: client.xlen(stream))
    return length


# -- scenarios --------------------------------------------------------------------------


def queue_name() -> str:
    return f"/queue/crash-{uuid.uuid4().hex[:8]}"


def stomp_endpoint(target: Target, queue: str) -> str:
    return (
        f'{{ type = "stomp", url = "stomp://{HOST}:{target.port}", login = "{target.login}", '
        f'passcode = "{target.passcode}", destination = "{queue}" }}'
    )


def all_of(count: int, counter: StompCounter | MqttCounter) -> Callable[[], bool]:
    return lambda: counter.held() >= count and counter.distinct() >= count


def stomp_to_mqtt(ids: list[str], target: Target, mqtt: Server) -> Scenario:
    queue, topic = queue_name(), f"crash/{uuid.uuid4().hex[:8]}"
    counter = MqttCounter(mqtt.port, topic)
    stomp_fill(target, queue, ids)
    sink = f'{{ type = "mqtt", url = "mqtt://{HOST}:{mqtt.port}", topic = "{topic}", qos = 1 }}'
    return Scenario(
        stomp_endpoint(target, queue),
        sink,
        counter.held,
        counter.final,
        all_of(len(ids), counter),
        mqtt.restart,
    )


def mqtt_to_stomp(ids: list[str], target: Target, mqtt: Server) -> Scenario:
    queue, topic = queue_name(), f"crash/{uuid.uuid4().hex[:8]}"
    client_id = f"crash-{uuid.uuid4().hex[:8]}"
    mqtt_fill(mqtt.port, client_id, topic, ids)
    counter = StompCounter(target, queue)
    source = (
        f'{{ type = "mqtt", url = "mqtt://{HOST}:{mqtt.port}", topics = ["{topic}"], qos = 1, '
        f'client_id = "{client_id}" }}'
    )
    return Scenario(
        source,
        stomp_endpoint(target, queue),
        counter.held,
        counter.final,
        all_of(len(ids), counter),
        mqtt.restart,
    )


def stomp_to_redis(ids: list[str], target: Target, redis: Server) -> Scenario:
    queue, stream = queue_name(), f"crash-{uuid.uuid4().hex[:8]}"
    url = f"redis://{HOST}:{redis.port}/0"
    stomp_fill(target, queue, ids)
    sink = f'{{ type = "redis", url = "{url}", stream = "{stream}" }}'

    def finished() -> bool:
        return redis_length(url, stream) >= len(ids) and len(redis_bodies(url, stream)) >= len(ids)

    return Scenario(
        stomp_endpoint(target, queue),
        sink,
        lambda: redis_length(url, stream),
        lambda: redis_bodies(url, stream),
        finished,
        redis.restart,
    )


def redis_to_stomp(ids: list[str], target: Target, redis: Server) -> Scenario:
    queue, stream = queue_name(), f"crash-{uuid.uuid4().hex[:8]}"
    url = f"redis://{HOST}:{redis.port}/0"
    redis_fill(url, stream, ids)
    counter = StompCounter(target, queue)
    source = (
        f'{{ type = "redis", url = "{url}", stream = "{stream}", start = "0", '
        'consumer = "crash", block = 0.1 }'
    )
    return Scenario(
        source,
        stomp_endpoint(target, queue),
        counter.held,
        counter.final,
        all_of(len(ids), counter),
        redis.restart,
    )


Make = Callable[[list[str], Target, Server], Scenario]

#: Each scenario and the private server it needs.
SCENARIOS: Final[dict[str, tuple[Make, str]]] = {
    "stomp-to-mqtt": (stomp_to_mqtt, "mqtt"),
    "mqtt-to-stomp": (mqtt_to_stomp, "mqtt"),
    "stomp-to-redis": (stomp_to_redis, "redis"),
    "redis-to-stomp": (redis_to_stomp, "redis"),
}


@contextmanager
def setup(names: list[str]) -> Iterator[dict[str, Factory]]:
    """The embedded broker and the private servers NAMES need; a factory per scenario."""
    needed = {SCENARIOS[name][1] for name in names}
    wanted = {
        "mqtt": Server(mosquitto_command, "mosquitto") if "mqtt" in needed else None,
        "redis": Server(redis_command, "redis-server") if "redis" in needed else None,
    }
    with embedded_broker() as target, private_servers(wanted) as servers:
        yield {
            name: functools.partial(_ignore_work, make, target, servers[kind])
            for name, (make, kind) in SCENARIOS.items()
            if name in names
        }


def _ignore_work(
    make: Make, target: Target, server: Server, work: Path, ids: list[str]
) -> Scenario:
    return make(ids, target, server)


if __name__ == "__main__":
    sys.exit(main(__doc__ or "", list(SCENARIOS), setup))
