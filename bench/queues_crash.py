"""Crash test for the nats and amqp endpoints: ``bridges run`` killed with SIGKILL again and again.

    .venv/bin/python bench/queues_crash.py [--count 10000] [--kills 5]
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
duplicate window drops the sink's re-sends, so nats-sink expects none).
"""

from __future__ import annotations

import argparse
import asyncio
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
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import aio_pika
import nats

IN_FLIGHT: Final = 200
BATCH: Final = 100
LIMIT: Final = 120.0
HOST: Final = "127.0.0.1"
AMQP_URL = os.environ.get("TRIO_STOMP_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
ROOT = Path(__file__).resolve().parents[1]


class BenchError(Exception):
    pass


def bridges_command() -> list[str]:
    script = Path(sys.executable).with_name("bridges")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bridges._cli"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


class PrivateNats:
    """A nats-server with JetStream of our own, restartable, its store kept across restarts."""

    def __init__(self, store: Path) -> None:
        self.port = free_port()
        self.url = f"nats://{HOST}:{self.port}"
        self._store = store
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        command = [binary, "-a", HOST, "-p", str(self.port), "-js", "-sd", str(self._store)]
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    raise BenchError("nats-server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
            self._process = None

    def restart(self) -> None:
        self.stop()
        time.sleep(0.5)
        self.start()


@contextmanager
def private_nats() -> Iterator[PrivateNats]:
    with tempfile.TemporaryDirectory(prefix="nats-crash-") as store:
        server = PrivateNats(Path(store))
        server.start()
        try:
            yield server
        finally:
            server.stop()


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


# -- one scenario ---------------------------------------------------------------------------


def route_config(source: str, sink: str) -> str:
    return f"""
[bridge]
shutdown_timeout = 20
log_level = "warning"

[routes.crash]
in_flight = {IN_FLIGHT}
batch = {{ count = {BATCH}, time = 0.01 }}
retry = {{ attempts = 1000, initial = 0.05, max = 1.0 }}
source = {source}
sink = {sink}
"""


@dataclasses.dataclass
class Scenario:
    """One scenario's route config and the means to watch the far side."""

    config: str
    held: Callable[[], int]  # messages the far side holds now (duplicates included)
    final: Callable[[], Counter[str]]  # copies per body at the end
    finished: Callable[[], bool]  # everything arrived (and the source is drained)
    restart_server: Callable[[], None]


JSONL_SOURCE: Final = (
    '{ type = "file", path = "events.jsonl", mode = "jsonl", poll_interval = 0.05 }'
)
FILE_SINK: Final = '{ type = "file", path = "outbox", format = "jsonl", rotate_bytes = 65536 }'


def restart_rabbitmq() -> None:
    subprocess.run([str(ROOT / "scripts" / "brokers"), "restart", "rabbitmq"], check=True)


def nats_sink(work: Path, ids: list[str], server: PrivateNats) -> Scenario:
    url, stream = server.url, f"CRASH{uuid.uuid4().hex[:8].upper()}"
    nats_call(url, lambda _, js: js.add_stream(name=stream, subjects=[f"{stream}.>"]))
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    sink = f'{{ type = "nats", url = "{url}", subject = "{stream}.out" }}'
    return Scenario(
        route_config(JSONL_SOURCE, sink),
        lambda: nats_stored(url, stream),
        lambda: nats_bodies(url, stream),
        lambda: nats_stored(url, stream) >= len(ids),
        server.restart,
    )


def nats_source(work: Path, ids: list[str], server: PrivateNats) -> Scenario:
    url, stream = server.url, f"CRASH{uuid.uuid4().hex[:8].upper()}"
    nats_fill(url, stream, ids)
    source = (
        f'{{ type = "nats", url = "{url}", stream = "{stream}", durable = "crash", '
        f'subject = "{stream}.>", ack_wait = 5.0 }}'
    )
    outbox = work / "outbox"
    return Scenario(
        route_config(source, FILE_SINK),
        lambda: sum(outbox_bodies(outbox).values()),
        lambda: outbox_bodies(outbox),
        lambda: len(outbox_bodies(outbox)) >= len(ids),
        server.restart,
    )


def amqp_sink(work: Path, ids: list[str], server: PrivateNats) -> Scenario:
    queue = f"queues-crash-{uuid.uuid4().hex[:10]}"
    amqp_fill(queue, [])
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    sink = f'{{ type = "amqp", url = "{AMQP_URL}", routing_key = "{queue}" }}'
    return Scenario(
        route_config(JSONL_SOURCE, sink),
        lambda: amqp_depth(queue),
        lambda: amqp_drain(queue),
        lambda: amqp_depth(queue) >= len(ids),
        restart_rabbitmq,
    )


def amqp_source(work: Path, ids: list[str], server: PrivateNats) -> Scenario:
    queue = f"queues-crash-{uuid.uuid4().hex[:10]}"
    amqp_fill(queue, ids)
    source = f'{{ type = "amqp", url = "{AMQP_URL}", queue = "{queue}" }}'
    outbox = work / "outbox"

    def final() -> Counter[str]:
        amqp_call(lambda channel: channel.queue_delete(queue))
        return outbox_bodies(outbox)

    return Scenario(
        route_config(source, FILE_SINK),
        lambda: sum(outbox_bodies(outbox).values()),
        final,
        lambda: amqp_depth(queue) == 0 and len(outbox_bodies(outbox)) >= len(ids),
        restart_rabbitmq,
    )


SCENARIOS: Final = {
    "nats-sink": nats_sink,
    "nats-source": nats_source,
    "amqp-sink": amqp_sink,
    "amqp-source": amqp_source,
}


def run_scenario(
    name: str, count: int, kills: int, restart: bool, rng: random.Random, server: PrivateNats
) -> dict[str, Any]:
    ids = [f"msg-{i:06d}" for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="queues-crash-") as tmp:
        work = Path(tmp)
        scenario = SCENARIOS[name](work, ids, server)
        (work / "bridge.toml").write_text(scenario.config)
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
                scenario.restart_server()
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
            return running and scenario.finished()

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
        total = sum(copies.values())
        return {
            "scenario": name,
            "messages": count,
            "kills": kills,
            "server_restarted": restart_at >= 0,
            "held_at_kills": progress,
            "arrived": len(set(copies) & set(ids)),
            "missing": len(set(ids) - set(copies)),
            "duplicates": total - len(copies),
            "max_copies": max(copies.values(), default=0),
            "bound": kills * IN_FLIGHT,
            "exit_status": status,
            "seconds": round(time.monotonic() - started, 1),
            "log_tail": (work / "bridge.log").read_text()[-1500:] if status != 0 else "",
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


def ok(result: dict[str, Any]) -> bool:
    return bool(
        result["missing"] == 0
        and result["duplicates"] <= result["bound"]
        and result["exit_status"] == 0
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--only", default="nats-sink,nats-source,amqp-sink,amqp-source")
    parser.add_argument("--restart", action="store_true", help="restart the server once, too")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    results = []
    with private_nats() as server:
        for name in args.only.split(","):
            try:
                results.append(
                    run_scenario(name, args.count, args.kills, args.restart, rng, server)
                )
            except BenchError as exc:
                results.append({"scenario": name, "error": str(exc)})
    if args.json:
        for result in results:
            print(json.dumps(result))
    else:
        print(f"queues crash test, seed {seed}: SIGKILL at random moments")
        print(
            "| scenario    | messages | kills | restart | arrived | missing | duplicates "
            "| max copies | dup bound | exit | time, s | verdict |"
        )
        print(
            "|-------------|----------|-------|---------|---------|---------|------------"
            "|------------|-----------|------|---------|---------|"
        )
        for r in results:
            if "error" in r:
                print(f"| {r['scenario']:<11} | error: {r['error']}")
                continue
            print(
                f"| {r['scenario']:<11} | {r['messages']:>8,} | {r['kills']:>5} "
                f"| {'yes' if r['server_restarted'] else 'no':>7} | {r['arrived']:>7,} "
                f"| {r['missing']:>7} | {r['duplicates']:>10} | {r['max_copies']:>10} "
                f"| {r['bound']:>9,} | {r['exit_status']:>4} | {r['seconds']:>7} "
                f"| {'ok' if ok(r) else 'FAIL':<7} |"
            )
            if r["log_tail"]:
                print(r["log_tail"])
    return 0 if all("error" not in r and ok(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
