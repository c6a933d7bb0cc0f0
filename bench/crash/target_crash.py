"""Crash test of the other side: the TARGET (or SOURCE) server SIGKILLed under a running bridge.

    .venv/bin/python bench/crash/target_crash.py [--count 5000] [--kills 3] [--only NAMES]
        [--rate 500] [--seed N] [--json] [--report PATH]

Every other crash script kills ``bridges run``; this one kills the server on
the other side of it, which is what an acknowledgement must survive too.

**Target rows.** ``count`` files are dropped into a file inbox, ``--rate`` a
second (so that the kills land mid-stream, and files keep coming while the
server is away); ``bridges run`` (one process for the whole run) moves them
into the target, and the file source
acknowledges a message upstream by moving its file to ``done/``, only once
the sink said it is durable. ``kills`` times, once a random share of the
files is in ``done/`` (plus 0-50 ms), the target server gets SIGKILL and is
started again with its data kept (the shared servers:
``scripts/brokers kill NAME`` then ``start NAME``; the private ones: this
script's own processes). When every file is in ``done/`` the bridge is
stopped with SIGTERM (a clean exit is required) and the target is drained:

- **lost**: a file in ``done/`` (acknowledged upstream) whose message is not
  in the target after the restarts. It must be 0 on every durable row.
- **duplicates**: copies beyond the first. A sink's write that the server
  stored but whose acknowledgement died with it is written again after the
  restart; bounded by ``kills * in_flight``, and 0 where the target
  de-duplicates (JetStream's ``Nats-Msg-Id``, the embedded broker's window).

Each target uses the configuration the guarantee table recommends:

    stomp-rabbitmq   stomp sink, persistent = true, durable /queue/ (RabbitMQ) that
                     the first SEND creates: NOT durable for a moment (RabbitMQ's
                     Mnesia commit of the queue, see rabbitmq_declare_synced)
    stomp-rabbitmq-declared
                     the same into a queue declared durable beforehand, its
                     definition on disk (rabbitmqctl eval 'mnesia:dump_log().')
    stomp-rabbitmq-not-persistent
                     the same with persistent = false: NOT durable, measured
    stomp-activemq   stomp sink, persistent = true, /queue/ (ActiveMQ, KahaDB)
    amqp             amqp sink (delivery mode 2, confirms) into a durable queue
                     (declared beforehand, its definition on disk, as above)
    mqtt             mqtt sink, QoS 1, into a persistent session that is offline
                     (Mosquitto of scripts/brokers: autosave_on_changes, see below)
    mqtt-default     the same into a private Mosquitto with its default autosave
                     (persistence true, autosave_interval 1800 s): NOT durable,
                     measured to show what the default loses
    mqtt-every-second  private, autosave_interval 1 (s): NOT durable, measured
    mqtt-on-changes  private, autosave_on_changes true + autosave_interval 1:
                     a snapshot after every main-loop pass that changed
                     something (the recommended configuration)
    redis            redis sink (XADD); appendonly yes, appendfsync always
    nats             nats sink, JetStream stream with file storage
    embedded         stomp sink into ``trio-stomp broker --data-dir`` (own process)
    http             http sink into a receiver that fsyncs before its 204
                     (``_store_receiver.py``), SIGKILLed like the others

**Source rows.** ``count`` persistent messages wait in the source server;
``bridges run`` moves them into files named by message id (``format =
"files"``: a redelivered message rewrites its own file, so redeliveries are
de-duplicated by the sink); the source server is SIGKILLed ``kills`` times.
Lost = a message not in the outbox at the end (the source server had them all
on disk before the run).

    source-stomp-rabbitmq, source-redis, source-nats

RabbitMQ and ActiveMQ take 5-30 s to come back; everyone sharing them sees
that. The shared servers are always started again, even when a run fails.
The RabbitMQ rows delete the queue they made once it is drained.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final, Protocol

import trio
from _crash import (
    _RUNNING,
    HOST,
    IN_FLIGHT,
    LIMIT,
    BenchError,
    Server,
    Target,
    bench_command,
    bridges_command,
    environment_line,
    id_ranges,
    route_config,
    stomp_drain,
    stop_process,
    wait_for,
    write_report,
)
from _rabbitmq import rabbitmq_declare_synced, rabbitmq_depth, rabbitmq_queue_delete
from mqtt_redis_crash import mosquitto_command, paho_client, redis_bodies, redis_fill, session
from once_crash import FILES_SINK, files_bodies
from queues_crash import AMQP_URL, amqp_drain, nats_bodies, nats_call, nats_fill

import trio_stomp

ROOT: Final = Path(__file__).resolve().parents[2]
BROKERS: Final = ROOT / "scripts" / "brokers"
NATS_URL: Final = f"nats://guest:guest@{HOST}:4222"
REDIS_URL: Final = f"redis://{HOST}:6379/0"
MQTT_PORT: Final = 1883
RABBITMQ: Final = Target("rabbitmq", "RabbitMQ", 61613, "guest", "guest")
ACTIVEMQ: Final = Target("activemq", "ActiveMQ", 61623, "bench", "bench")


# -- the servers: killed, then started with their data -----------------------------------------


def _nothing() -> None:
    """No call while the server is down."""


class Crashable(Protocol):
    def crash(self, while_down: Callable[[], None] = _nothing) -> float:
        """SIGKILL the server, call ``while_down()``, start it again with its data; the
        seconds it was away."""


class Shared:
    """A server of ``scripts/brokers``: ``kill NAME``, then ``start NAME`` (data kept)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def crash(self, while_down: Callable[[], None] = _nothing) -> float:
        began = time.monotonic()
        try:
            subprocess.run([str(BROKERS), "kill", self.name], check=True, capture_output=True)
            time.sleep(0.2)  # (SIGKILL is sent, not waited for)
            while_down()
        finally:
            self.start()
        return round(time.monotonic() - began, 1)

    def start(self) -> None:
        for _ in range(3):
            subprocess.run(
                [str(BROKERS), "start", self.name], capture_output=True, check=False, timeout=300
            )
            status = [str(BROKERS), "status", self.name]
            if subprocess.run(status, capture_output=True, check=False).returncode == 0:
                return
        raise BenchError(f"{self.name} does not answer after `scripts/brokers start`")


# -- draining each target ------------------------------------------------------------------


def stomp_fill(target: Target, queue: str, ids: list[str]) -> None:
    """``ids`` as persistent messages of ``queue`` (the last one with a receipt)."""

    async def fill() -> None:
        async with trio_stomp.connect(target.url) as client:
            for index, message_id in enumerate(ids):
                headers = {"bridge-id": message_id, "persistent": "true"}
                last = index == len(ids) - 1
                await client.send(queue, message_id.encode(), headers=headers, receipt=last)

    trio.run(fill)


def mqtt_session(port: int, client_id: str, topic: str, *, login: bool) -> None:
    """Create ``client_id``'s persistent session, subscribed to ``topic`` at QoS 1; leave it."""
    client = paho_client(client_id)
    if login:
        client.username_pw_set("guest", "guest")
    subscribed = threading.Event()
    client.on_subscribe = lambda *args: subscribed.set()
    client.connect(HOST, port, clean_start=False, properties=session(7 * 24 * 3600))
    client.loop_start()
    client.subscribe(topic, qos=1)
    try:
        if not subscribed.wait(10):
            raise BenchError("no SUBACK for the counting session")
    finally:
        client.disconnect()
        client.loop_stop()


def mqtt_drain(port: int, client_id: str, *, login: bool, idle: float = 3.0) -> Counter[str]:
    """What ``client_id``'s session kept (its queued QoS 1 messages); the session ends."""
    copies: Counter[str] = Counter()
    last = [time.monotonic()]
    lock = threading.Lock()

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        with lock:
            copies[bytes(message.payload).decode()] += 1
            last[0] = time.monotonic()

    client = paho_client(client_id)
    if login:
        client.username_pw_set("guest", "guest")
    client.on_message = on_message
    client.connect(HOST, port, clean_start=False, properties=session(0))
    client.loop_start()
    try:
        while time.monotonic() - last[0] < idle:
            time.sleep(0.1)
    finally:
        client.disconnect()
        client.loop_stop()
    return copies


def http_drain(store: Path) -> Counter[str]:
    if not store.exists():
        return Counter()
    data = store.read_bytes()
    return Counter(line.decode() for line in data[: data.rfind(b"\n") + 1].splitlines())


# -- the rows --------------------------------------------------------------------------------


@dataclasses.dataclass
class TargetRow:
    """A sink into a server that is crashed under it, and how to read the server after."""

    server: Crashable
    sink: str
    drain: Callable[[frozenset[str]], Counter[str]]  # (the ids acknowledged upstream)
    durable: bool = True  # the table says durable: lost must be 0
    dedup: bool = False  # the target drops re-sent ids: duplicates must be 0
    where: str = ""  # the queue (stream, topic) written to, to look at after a loss
    #: What the target holds just before each kill (RabbitMQ: the queue's depth), or None.
    held: Callable[[], int] | None = None
    #: Deletes what the row created on a shared server (run once the row is drained).
    cleanup: Callable[[], None] | None = None


@dataclasses.dataclass
class SourceRow:
    """A source on a server that is crashed under it."""

    server: Crashable
    source: str
    fill: Callable[[list[str]], None]
    cleanup: Callable[[], None] | None = None


Row = TargetRow | SourceRow


def _key() -> str:
    return uuid.uuid4().hex[:8]


def stomp_row(target: Target, *, persistent: bool = True, declared: bool = False) -> TargetRow:
    name = f"target-crash-{_key()}"
    queue = f"/queue/{name}"
    if declared:
        rabbitmq_declare_synced(name)
    sink = (
        f'{{ type = "stomp", url = "stomp://{HOST}:{target.port}", login = "{target.login}", '
        f'passcode = "{target.passcode}", destination = "{queue}", '
        f"persistent = {str(persistent).lower()} }}"
    )

    def drain(expect: frozenset[str]) -> Counter[str]:
        return stomp_drain(target, queue, expect=expect)

    row = TargetRow(Shared(target.name), sink, drain, durable=persistent, where=queue)
    if target is RABBITMQ:
        row.held = functools.partial(rabbitmq_depth, name)
        row.cleanup = functools.partial(rabbitmq_queue_delete, name)
    return row


def amqp_row() -> TargetRow:
    queue = f"target-crash-{_key()}"
    rabbitmq_declare_synced(queue)  # a durable queue, and durably so (see there)
    sink = f'{{ type = "amqp", url = "{AMQP_URL}", routing_key = "{queue}", persistent = true }}'
    return TargetRow(Shared("rabbitmq"), sink, lambda _: amqp_drain(queue))


def mqtt_row(server: Crashable, port: int, *, login: bool, durable: bool) -> TargetRow:
    key = _key()
    client_id, topic = f"target-crash-{key}", f"target-crash/{key}"
    mqtt_session(port, client_id, topic, login=login)
    auth = ', username = "guest", password = "guest"' if login else ""
    sink = f'{{ type = "mqtt", url = "mqtt://{HOST}:{port}"{auth}, topic = "{topic}", qos = 1 }}'
    return TargetRow(
        server, sink, lambda _: mqtt_drain(port, client_id, login=login), durable=durable
    )


def redis_row() -> TargetRow:
    stream = f"target-crash-{_key()}"
    sink = f'{{ type = "redis", url = "{REDIS_URL}", stream = "{stream}" }}'
    return TargetRow(Shared("redis"), sink, lambda _: redis_bodies(REDIS_URL, stream), dedup=True)


def nats_row() -> TargetRow:
    stream = f"TARGETCRASH{_key().upper()}"
    nats_call(NATS_URL, lambda _, js: js.add_stream(name=stream, subjects=[f"{stream}.>"]))
    sink = f'{{ type = "nats", url = "{NATS_URL}", subject = "{stream}.out" }}'
    return TargetRow(Shared("nats"), sink, lambda _: nats_bodies(NATS_URL, stream), dedup=True)


def embedded_row(broker: Server) -> TargetRow:
    target = Target("embedded", "embedded", broker.port, "bench", "bench")
    queue = f"/queue/target-crash-{_key()}"
    sink = f'{{ type = "stomp", url = "stomp://{HOST}:{broker.port}", destination = "{queue}" }}'
    return TargetRow(broker, sink, lambda ids: stomp_drain(target, queue, expect=ids), dedup=True)


def http_row(receiver: Server) -> TargetRow:
    url = f"http://{HOST}:{receiver.port}/hooks"
    sink = f'{{ type = "http", url = "{url}", concurrency = 8, timeout = 10.0 }}'
    return TargetRow(receiver, sink, lambda _: http_drain(receiver.work / "store.jsonl"))


def source_stomp_row() -> SourceRow:
    name = f"target-crash-{_key()}"
    queue = f"/queue/{name}"
    source = (
        f'{{ type = "stomp", url = "stomp://{HOST}:{RABBITMQ.port}", login = "guest", '
        f'passcode = "guest", destination = "{queue}", prefetch = {IN_FLIGHT} }}'
    )
    fill = functools.partial(stomp_fill, RABBITMQ, queue)
    delete = functools.partial(rabbitmq_queue_delete, name)
    return SourceRow(Shared("rabbitmq"), source, fill, delete)


def source_redis_row() -> SourceRow:
    stream = f"target-crash-{_key()}"
    source = (
        f'{{ type = "redis", url = "{REDIS_URL}", stream = "{stream}", start = "0", '
        'consumer = "crash", block = 0.1 }'
    )
    return SourceRow(Shared("redis"), source, lambda ids: redis_fill(REDIS_URL, stream, ids))


def source_nats_row() -> SourceRow:
    stream = f"TARGETCRASH{_key().upper()}"
    source = (
        f'{{ type = "nats", url = "{NATS_URL}", stream = "{stream}", durable = "crash", '
        f'subject = "{stream}.>", ack_wait = 5.0 }}'
    )
    return SourceRow(Shared("nats"), source, lambda ids: nats_fill(NATS_URL, stream, ids))


#: Private Mosquittos, each with its autosave settings (Mosquitto's defaults otherwise).
MOSQUITTO_AUTOSAVE: Final = {
    "mqtt-default": "",  # autosave_interval 1800 (seconds)
    "mqtt-every-second": "autosave_interval 1\n",
    "mqtt-on-changes": "autosave_on_changes true\nautosave_interval 1\n",
}


def mosquitto_autosave(port: int, work: Path, autosave: str) -> list[str]:
    command = mosquitto_command(port, work)
    with (work / "mosquitto.conf").open("a") as conf:
        conf.write(autosave)
    return command


def embedded_command(port: int, work: Path) -> list[str]:
    script = Path(sys.executable).with_name("trio-stomp")
    return [str(script), "broker", "--listen", f"{HOST}:{port}", "--data-dir", str(work)]


def receiver_command(port: int, work: Path) -> list[str]:
    receiver = Path(__file__).with_name("_store_receiver.py")
    return [sys.executable, str(receiver), str(port), str(work / "store.jsonl")]


TARGET_ROWS: Final = [
    "stomp-rabbitmq", "stomp-rabbitmq-declared", "stomp-rabbitmq-not-persistent",
    "stomp-activemq", "amqp", "mqtt", *MOSQUITTO_AUTOSAVE, "redis", "nats", "embedded", "http",
]  # fmt: skip
SOURCE_ROWS: Final = ["source-stomp-rabbitmq", "source-redis", "source-nats"]
ROWS: Final = TARGET_ROWS + SOURCE_ROWS


def make_row(name: str, stack: ExitStack) -> Row:
    """The row NAME (its private server, if any, started and closed with STACK)."""
    if name == "stomp-rabbitmq":
        return stomp_row(RABBITMQ)
    if name == "stomp-activemq":
        return stomp_row(ACTIVEMQ)
    if name == "stomp-rabbitmq-declared":
        return stomp_row(RABBITMQ, declared=True)
    if name == "stomp-rabbitmq-not-persistent":
        return stomp_row(RABBITMQ, persistent=False)
    if name == "mqtt":
        return mqtt_row(Shared("mosquitto"), MQTT_PORT, login=True, durable=True)
    if name in MOSQUITTO_AUTOSAVE:
        command = functools.partial(mosquitto_autosave, autosave=MOSQUITTO_AUTOSAVE[name])
        server = _private(stack, command, "mosquitto")
        return mqtt_row(server, server.port, login=False, durable=name == "mqtt-on-changes")
    if name == "embedded":
        return embedded_row(_private(stack, embedded_command, "embedded"))
    if name == "http":
        return http_row(_private(stack, receiver_command, "receiver"))
    makers: dict[str, Callable[[], Row]] = {
        "amqp": amqp_row,
        "redis": redis_row,
        "nats": nats_row,
        "source-stomp-rabbitmq": source_stomp_row,
        "source-redis": source_redis_row,
        "source-nats": source_nats_row,
    }
    return makers[name]()


def _private(stack: ExitStack, command: Callable[[int, Path], list[str]], what: str) -> Server:
    server = Server(command, what)
    stack.callback(server.close)
    server.start()
    return server


# -- one run ---------------------------------------------------------------------------------


def drive(
    work: Path,
    config: str,
    server: Crashable,
    progress: Callable[[], int],
    finished: Callable[[], bool],
    count: int,
    kills: int,
    rng: random.Random,
    acked_ids: Callable[[], set[str]] | None = None,
    held: Callable[[], int] | None = None,
) -> dict[str, Any]:
    """``bridges run`` once, the server crashed at ``kills`` random shares of the progress.

    With ``acked_ids``, the ids acknowledged upstream just before each kill are
    kept (``acked_before_kill``): a message among them that the target lacks
    at the end was receipted, then lost by the target's crash. They are read
    while the server is down, after the kill: what was acked by then was
    receipted before it died, even when the bridge acked it after the kill
    was sent (read before the kill, they missed what a loaded machine acked
    in between, and the test counted them as lost after the kill). With ``held``,
    what the target says it holds is read after those ids and before the kill
    (``held_at_kills``: at least the ids acked so far of a new queue; those
    acked just before it was read: ``acked_when_held``).
    """
    (work / "bridge.toml").write_text(config)
    log_path = work / "bridge.log"
    goals = sorted(int(rng.uniform(0.05, 0.9) * count) for _ in range(kills))
    at_kill: list[int] = []
    away: list[float] = []
    before_kill: set[str] = set()
    held_at: list[int] = []
    acked_when_held: list[int] = []
    with log_path.open("w") as log:
        command = [*bridges_command(), "run", "bridge.toml"]
        process = subprocess.Popen(command, cwd=work, stdout=log, stderr=log)
        try:
            for goal in goals:
                wait_for(lambda goal=goal: progress() >= goal, process)  # type: ignore[misc]
                time.sleep(rng.uniform(0.0, 0.05))
                at_kill.append(progress())
                if held is not None:
                    if acked_ids is not None:  # (read first: the target holds at least these)
                        acked_when_held.append(len(acked_ids()))
                    held_at.append(held())
                if acked_ids is None:
                    away.append(server.crash())
                else:
                    away.append(server.crash(lambda: before_kill.update(acked_ids())))
            wait_for(finished, process, LIMIT + count / 50)
            time.sleep(0.5)
        finally:
            stop_process(process, 60)  # (SIGTERM; SIGKILL after 60 s: status -9)
    return {
        "progress_at_kills": at_kill,
        "acked_before_kill": before_kill,
        **({"held_at_kills": held_at} if held is not None else {}),
        **({"acked_when_held": acked_when_held} if acked_when_held else {}),
        "seconds_away": away,
        "exit_status": process.returncode,
        "log_tail": log_path.read_text()[-1500:] if process.returncode != 0 else "",
    }


def feed(inbox: Path, ids: list[str], rate: float, stop: threading.Event) -> None:
    """Drop one file per id into ``inbox`` at ``rate`` a second (written aside, renamed in),
    from when the bridge says it runs (else the first files would wait for it to start)."""
    aside = inbox.parent / "aside"
    aside.mkdir()
    log = inbox.parent / "bridge.log"
    deadline = time.monotonic() + LIMIT
    while not (log.exists() and _RUNNING.search(log.read_bytes())):
        if stop.wait(0.05) or time.monotonic() > deadline:
            break
    began = time.monotonic()
    for index, message_id in enumerate(ids):
        due = began + index / rate
        if stop.wait(max(0.0, due - time.monotonic())):
            return
        (aside / message_id).write_text(message_id)
        (aside / message_id).rename(inbox / message_id)


def run_target(
    row: TargetRow, count: int, kills: int, rate: float, rng: random.Random
) -> dict[str, Any]:
    ids = [f"msg-{i:06d}" for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="target-crash-") as tmp:
        work = Path(tmp)
        inbox, done = work / "inbox", work / "inbox" / "done"
        inbox.mkdir()
        source = '{ type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }'

        def acked() -> int:
            return sum(1 for _ in done.iterdir()) if done.exists() else 0

        def names() -> set[str]:
            return {path.name for path in done.iterdir()} if done.exists() else set()

        stop = threading.Event()
        feeder = threading.Thread(target=feed, args=(inbox, ids, rate, stop), daemon=True)
        feeder.start()
        try:
            figures = drive(
                work, route_config(source, row.sink), row.server, acked,
                lambda: acked() >= count, count, kills, rng, names, row.held,
            )  # fmt: skip
        finally:
            stop.set()
            feeder.join()
        acked_ids = {path.name for path in done.iterdir()}
        copies = row.drain(frozenset(acked_ids))
        lost = acked_ids - set(copies)
        if lost and not figures["log_tail"]:
            # (the bridge's own account of a loss, before its folder goes)
            figures["log_tail"] = (work / "bridge.log").read_text()[-3000:]
    before_kill = figures.pop("acked_before_kill")
    return {
        "direction": "target",
        "durable": row.durable,
        "dedup": row.dedup,
        "where": row.where,
        "acked": len(acked_ids),
        "lost": len(lost),
        # Every lost id, in runs: from msg-000000 up to about the kill is what
        # the target held when it died; a run at the end, a drain that stopped
        # early (the drain waits for every acked id, so that would be a bug).
        "lost_ids": id_ranges(lost),
        # Lost and acknowledged upstream BEFORE the kill: receipted by the
        # target, then lost by its crash. Never a drain's artefact.
        "lost_acked_before_kill": len(lost & before_kill),
        "acked_before_kill": len(before_kill),
        **_copies(copies, ids),
        **figures,
    }


def run_source(row: SourceRow, count: int, kills: int, rng: random.Random) -> dict[str, Any]:
    ids = [f"msg-{i:06d}" for i in range(count)]
    row.fill(ids)
    with tempfile.TemporaryDirectory(prefix="target-crash-") as tmp:
        work = Path(tmp)
        outbox = work / "outbox"
        figures = drive(
            work, route_config(row.source, FILES_SINK), row.server,
            lambda: len(files_bodies(outbox)), lambda: len(files_bodies(outbox)) >= count,
            count, kills, rng,
        )  # fmt: skip
        copies = files_bodies(outbox)
    figures.pop("acked_before_kill")  # (a set, and only a target's crash makes it mean anything)
    return {
        "direction": "source",
        "durable": True,
        "dedup": True,
        "acked": len(copies),
        "lost": len(set(ids) - set(copies)),
        **_copies(copies, ids),
        **figures,
    }


def _copies(copies: Counter[str], ids: list[str]) -> dict[str, Any]:
    return {
        "arrived": len(set(copies) & set(ids)),
        "duplicates": sum(copies.values()) - len(copies),
        "max_copies": max(copies.values(), default=0),
    }


def run_row(name: str, count: int, kills: int, rate: float, rng: random.Random) -> dict[str, Any]:
    started = time.monotonic()
    with ExitStack() as stack:
        row = make_row(name, stack)
        if row.cleanup is not None:
            stack.callback(_clean_up, name, row.cleanup)
        if isinstance(row, TargetRow):
            result = run_target(row, count, kills, rate, rng)
        else:
            result = run_source(row, count, kills, rng)
    bound = 0 if result["dedup"] else kills * IN_FLIGHT
    return {
        "scenario": name,
        "messages": count,
        "kills": kills,
        "bound": bound,
        **result,
        "seconds": round(time.monotonic() - started, 1),
    }


def _clean_up(name: str, cleanup: Callable[[], None]) -> None:
    try:
        cleanup()
    except Exception as exc:  # (a leftover queue is reported, never a failed row)
        print(f"{name}: could not delete what the row created: {exc!r}", file=sys.stderr)


def verdict(r: dict[str, Any]) -> str:
    if "error" in r:
        return "ERROR"
    if r["exit_status"] != 0 or r["duplicates"] > r["bound"]:
        return "FAIL"
    if r["lost"]:
        return "FAIL" if r["durable"] else "loses (expected)"
    return "ok"


def print_table(title: str, results: list[dict[str, Any]]) -> None:
    print(title)
    print(
        "| row                   | killed | messages | acked | lost | duplicates | dup bound "
        "| away, s        | exit | time, s | verdict |"
    )
    print(
        "|-----------------------|--------|----------|-------|------|------------|-----------"
        "|----------------|------|---------|---------|"
    )
    for r in results:
        if "error" in r:
            print(f"| {r['scenario']:<21} | error: {r['error']}")
            continue
        away = ",".join(f"{s:g}" for s in r["seconds_away"])
        print(
            f"| {r['scenario']:<21} | {r['direction']:<6} | {r['messages']:>8,} "
            f"| {r['acked']:>5,} | {r['lost']:>4} | {r['duplicates']:>10} | {r['bound']:>9,} "
            f"| {away:<14} | {r['exit_status']:>4} | {r['seconds']:>7} | {verdict(r):<7} |"
        )
        if r["log_tail"]:
            print(r["log_tail"])


def report_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        if "error" in r:
            continue
        along = {k: r[k] for k in ("messages", "kills", "acked", "bound", "durable", "direction")}
        along |= {"seconds": r["seconds"], "verdict": verdict(r)}
        for series in ("lost", "duplicates"):
            rows.append(
                {
                    "series": f"{series}, seed {r['seed']}",
                    "label": r["scenario"],
                    "value": r[series],
                }
                | along
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--only", default=",".join(ROWS))
    parser.add_argument(
        "--rate", type=float, default=500.0, help="files dropped into the inbox a second"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    parser.add_argument("--report", metavar="PATH", help="write the figures here (JSON)")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    unknown = set(names) - set(ROWS)
    if unknown:
        parser.error(f"unknown row(s): {', '.join(sorted(unknown))}")
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    if not args.json:
        print(environment_line(), flush=True)
    results = []
    for name in names:
        try:
            result = run_row(name, args.count, args.kills, args.rate, rng)
        except (BenchError, OSError, TimeoutError, subprocess.SubprocessError) as exc:
            result = {"scenario": name, "error": f"{type(exc).__name__}: {exc}"}
        result["seed"] = seed
        results.append(result)
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(f"{name}: {verdict(result)}", flush=True)
    if not args.json:
        print_table(
            f"{args.count} messages per row, the server SIGKILLed {args.kills} times at random "
            f"moments, in_flight {IN_FLIGHT}, seed {seed}",
            results,
        )
    if args.report:
        write_report(
            args.report,
            bench=Path(sys.argv[0]).stem,
            command=bench_command(sys.argv[0], sys.argv[1:]),
            unit="messages",
            rows=report_rows(results),
        )
    return 0 if all(verdict(r) in {"ok", "loses (expected)"} for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
