"""Crash test for the mqtt and redis endpoints: ``bridges run`` killed with SIGKILL, each direction.

    .venv/bin/python bench/mqtt_redis_crash.py [--count 10000] [--kills 5]
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
id, against the bound at-least-once promises: ``kills * in_flight``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Final

import coredis
import paho.mqtt.client as paho
import stomp
import trio
from _common import Target, embedded_broker
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

import trio_stomp

IN_FLIGHT: Final = 200
BATCH: Final = 100
LIMIT: Final = 120.0
HOST: Final = "127.0.0.1"


class BenchError(Exception):
    """A run could not be completed; the message says why, in one line."""


def bridges_command() -> list[str]:
    script = Path(sys.executable).with_name("bridges")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bridges._cli"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def wait_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise BenchError(f"{what} did not start") from None
            time.sleep(0.05)


class Server:
    """A private mosquitto or redis-server that the run may restart."""

    def __init__(self, command: Callable[[int, Path], list[str]], what: str) -> None:
        self.port = free_port()
        self._work = Path(tempfile.mkdtemp(prefix=f"{what}-"))
        self._command = command(self.port, self._work)
        self._what = what
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_port(self.port, self._process, self._what)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()  # both save their data on SIGTERM
            self._process.wait(30)
            self._process = None

    def restart(self) -> None:
        self.stop()
        time.sleep(0.3)
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._work, ignore_errors=True)


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


def redis_fill(url: str, stream: str, ids: list[str]) -> None:
    async def fill(client: coredis.Redis[bytes]) -> None:
        for start in range(0, len(ids), 1000):
            async with client.pipeline(transaction=False) as pipe:
                for message_id in ids[start : start + 1000]:
                    pipe.xadd(stream, {"body": message_id, "bridge-id": message_id})

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


@dataclasses.dataclass
class Scenario:
    """One scenario's route config and the means to watch the far side."""

    source: str
    sink: str
    held: Callable[[], int]  # messages the far side holds now (duplicates included)
    final: Callable[[], Counter[str]]  # copies per id at the end
    distinct: Callable[[], int]  # ids the far side holds now
    server: Server

    def config(self) -> str:
        return f"""
[bridge]
shutdown_timeout = 20
log_level = "warning"

[routes.crash]
in_flight = {IN_FLIGHT}
batch = {{ count = {BATCH}, time = 0.01 }}
retry = {{ attempts = 1000, initial = 0.05, max = 1.0 }}
source = {self.source}
sink = {self.sink}
"""


def stomp_endpoint(target: Target, queue: str) -> str:
    return (
        f'{{ type = "stomp", url = "stomp://{HOST}:{target.port}", login = "{target.login}", '
        f'passcode = "{target.passcode}", destination = "{queue}" }}'
    )


def stomp_to_mqtt(ids: list[str], target: Target, servers: dict[str, Server]) -> Scenario:
    mqtt, queue, topic = (
        servers["mqtt"],
        f"/queue/crash-{uuid.uuid4().hex[:8]}",
        f"crash/{uuid.uuid4().hex[:8]}",
    )
    counter = MqttCounter(mqtt.port, topic)
    stomp_fill(target, queue, ids)
    sink = f'{{ type = "mqtt", url = "mqtt://{HOST}:{mqtt.port}", topic = "{topic}", qos = 1 }}'
    return Scenario(
        stomp_endpoint(target, queue), sink, counter.held, counter.final, counter.distinct, mqtt
    )


def mqtt_to_stomp(ids: list[str], target: Target, servers: dict[str, Server]) -> Scenario:
    mqtt, queue, topic = (
        servers["mqtt"],
        f"/queue/crash-{uuid.uuid4().hex[:8]}",
        f"crash/{uuid.uuid4().hex[:8]}",
    )
    client_id = f"crash-{uuid.uuid4().hex[:8]}"
    mqtt_fill(mqtt.port, client_id, topic, ids)
    counter = StompCounter(target, queue)
    source = (
        f'{{ type = "mqtt", url = "mqtt://{HOST}:{mqtt.port}", topics = ["{topic}"], qos = 1, '
        f'client_id = "{client_id}" }}'
    )
    return Scenario(
        source, stomp_endpoint(target, queue), counter.held, counter.final, counter.distinct, mqtt
    )


def stomp_to_redis(ids: list[str], target: Target, servers: dict[str, Server]) -> Scenario:
    redis, queue, stream = (
        servers["redis"],
        f"/queue/crash-{uuid.uuid4().hex[:8]}",
        f"crash-{uuid.uuid4().hex[:8]}",
    )
    url = f"redis://{HOST}:{redis.port}/0"
    stomp_fill(target, queue, ids)
    sink = f'{{ type = "redis", url = "{url}", stream = "{stream}" }}'
    return Scenario(
        stomp_endpoint(target, queue),
        sink,
        lambda: redis_length(url, stream),
        lambda: redis_bodies(url, stream),
        lambda: len(redis_bodies(url, stream)),
        redis,
    )


def redis_to_stomp(ids: list[str], target: Target, servers: dict[str, Server]) -> Scenario:
    redis, queue, stream = (
        servers["redis"],
        f"/queue/crash-{uuid.uuid4().hex[:8]}",
        f"crash-{uuid.uuid4().hex[:8]}",
    )
    url = f"redis://{HOST}:{redis.port}/0"
    redis_fill(url, stream, ids)
    counter = StompCounter(target, queue)
    source = (
        f'{{ type = "redis", url = "{url}", stream = "{stream}", start = "0", '
        'consumer = "crash", block = 0.1 }'
    )
    return Scenario(
        source, stomp_endpoint(target, queue), counter.held, counter.final, counter.distinct, redis
    )


SCENARIOS: Final = {
    "stomp-to-mqtt": stomp_to_mqtt,
    "mqtt-to-stomp": mqtt_to_stomp,
    "stomp-to-redis": stomp_to_redis,
    "redis-to-stomp": redis_to_stomp,
}


def wait_for(
    condition: Callable[[], bool], process: subprocess.Popen[bytes], limit: float = LIMIT
) -> None:
    deadline = time.monotonic() + limit
    while True:
        try:
            if condition():
                return
        except Exception:  # the server is restarting: look again
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise BenchError("no progress (the bridge exited, or the limit passed)")
        time.sleep(0.05)


def run_scenario(
    name: str,
    count: int,
    kills: int,
    restart: bool,
    rng: random.Random,
    target: Target,
    servers: dict[str, Server],
) -> dict[str, Any]:
    ids = [f"msg-{i:06d}" for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="mqtt-redis-crash-") as tmp:
        work = Path(tmp)
        scenario = SCENARIOS[name](ids, target, servers)
        (work / "bridge.toml").write_text(scenario.config())
        log = (work / "bridge.log").open("w")
        command = [*bridges_command(), "run", str(work / "bridge.toml")]
        started = time.monotonic()
        shares = sorted(rng.uniform(0.05, 0.9) for _ in range(kills))
        restart_at = rng.randrange(kills) if restart and kills else -1
        progress = []
        for n, share in enumerate(shares):
            process = subprocess.Popen(command, cwd=work, stdout=log, stderr=log)
            goal = int(share * count)
            wait_for(lambda goal=goal: scenario.held() >= goal, process)  # type: ignore[misc]
            time.sleep(rng.uniform(0.0, 0.05))
            if n == restart_at:
                scenario.server.restart()
                time.sleep(1.0)
            if process.poll() is not None:
                raise BenchError(f"{name}: bridges exited by itself; see {work}/bridge.log")
            process.send_signal(signal.SIGKILL)
            process.wait()
            progress.append(scenario.held())
        log.flush()
        log_start = (work / "bridge.log").stat().st_size
        process = subprocess.Popen(command, cwd=work, stdout=log, stderr=log)

        def finished() -> bool:
            # (a SIGTERM before the bridge handles signals would just kill it)
            with (work / "bridge.log").open("rb") as text:
                text.seek(log_start)
                running = b"running 1 route(s)" in text.read()
            return running and scenario.held() >= count and scenario.distinct() >= count

        try:
            wait_for(finished, process, LIMIT + count / 100)
            time.sleep(0.5)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                status = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                status = -9
            log.close()
        copies = scenario.final()
        held_ids = set(copies) & set(ids)
        total = sum(copies.values())
        return {
            "scenario": name,
            "messages": count,
            "kills": kills,
            "server_restarted": restart_at >= 0,
            "held_at_kills": progress,
            "arrived": len(held_ids),
            "missing": len(set(ids) - set(copies)),
            "duplicates": total - len(copies),
            "max_copies": max(copies.values(), default=0),
            "bound": kills * IN_FLIGHT,
            "exit_status": status,
            "seconds": round(time.monotonic() - started, 1),
            "log_tail": (work / "bridge.log").read_text()[-1500:] if status != 0 else "",
        }


def ok(result: dict[str, Any]) -> bool:
    return bool(
        result["missing"] == 0
        and result["duplicates"] <= result["bound"]
        and result["exit_status"] == 0
    )


@contextmanager
def servers_for(names: list[str]) -> Iterator[dict[str, Server]]:
    with ExitStack() as stack:
        servers: dict[str, Server] = {}
        if any("mqtt" in name for name in names):
            servers["mqtt"] = Server(mosquitto_command, "mosquitto")
        if any("redis" in name for name in names):
            servers["redis"] = Server(redis_command, "redis-server")
        for server in servers.values():
            stack.callback(server.close)
            server.start()
        yield servers


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--restart", action="store_true", help="restart the server once, too")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    results = []
    with embedded_broker() as target, servers_for(names) as servers:
        for name in names:
            try:
                result = run_scenario(
                    name, args.count, args.kills, args.restart, rng, target, servers
                )
            except BenchError as exc:
                result = {"scenario": name, "error": str(exc)}
            result["seed"] = seed
            results.append(result)
            if args.json:
                print(json.dumps(result), flush=True)
    if not args.json:
        print(
            f"{args.count} messages per scenario, {args.kills} SIGKILLs, "
            f"in_flight {IN_FLIGHT}, seed {seed}"
        )
        print(
            "| scenario       | arrived | missing | duplicates (bound) | max copies | exit | s    |"
        )
        print(
            "|----------------|---------|---------|--------------------|------------|------|------|"
        )
        for r in results:
            if "error" in r:
                print(f"| {r['scenario']:<14} | FAILED: {r['error']}")
                continue
            print(
                f"| {r['scenario']:<14} | {r['arrived']:>7} | {r['missing']:>7} | "
                f"{r['duplicates']:>8} ({r['bound']:>5})   | {r['max_copies']:>10} | "
                f"{r['exit_status']:>4} | {r['seconds']:>4} |"
            )
    return 0 if all("error" not in r and ok(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
