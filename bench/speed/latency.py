"""Latency: how long a message takes, at fixed offered rates, timed from when it was due.

    .venv/bin/python bench/speed/latency.py
        [--paths embedded,rabbitmq,activemq,stomp-stomp,file-stomp-file,webhook-stomp,http-bare]
        [--loads 0.1,0.5,0.9] [--rate R] [--seconds 5] [--warmup 0.5] [--rounds 3]
        [--size 100] [--batch-time S] [--poll-interval 0.01] [--json PATH]
        [--profile DIR]

Every message is stamped at send with the time it was *due* (in its body:
``TAG SEQ DUE_NS`` then padding to ``--size`` bytes, a JSON line's text on
the file path) and timed where it arrives, in this process: the sender and
the receiver share one clock. The paths (``--paths``):

- ``embedded``, ``rabbitmq``, ``activemq``: a client round trip. One
  trio_stomp client sends to a fresh queue of the broker and, on the same
  connection, receives from it (``ack="auto"``): ``client.send`` to ``async
  for message in sub``. The embedded broker runs as ``trio-stomp broker`` in
  its own process, like the real brokers.
- ``stomp-stomp``: ``bridges run`` in its own process, as a user runs it, with
  one route: stomp source (queue A) -> stomp sink (queue B), both on the
  embedded broker. A client sends to A and receives from B.
- ``file-stomp-file``: ``bridges run`` with two routes: a ``file`` source
  tailing a JSON-lines file (``mode = "jsonl"``, ``poll_interval``) ->
  stomp sink (queue A), and stomp source (A) -> ``file`` sink (JSON lines,
  fsynced per batch). This process appends lines to the input file and
  polls the output directory every millisecond (which adds up to 1 ms).
- ``webhook-stomp``: ``bridges run`` with an ``http`` source -> stomp sink
  route. ``--senders`` keep-alive httpx connections post the messages (each
  answered only once its batch is durable); a client receives from the queue.
- ``http-bare``: the webhook path's peer, no bridge: the same senders post to
  a bare hypercorn endpoint (its own process) that answers 204 and stores
  nothing; a message arrives when its answer does. What HTTP costs alone.

Each route has the shipped defaults (``in_flight = 1000``, ``batch = { count =
100, time = 0 }``: group commit) unless ``--batch-time`` sets ``batch.time``
(``--batch-time 0.02`` is the fixed-time batching shipped before group commit).

For each path, each round measures first the most the path carries (sending
for ``--max-seconds`` with at most ``--window`` messages on their way; the
arrival rate over the last two thirds of that time), then offers ``--loads``
of that rate (10%, 50%, 90%), each for ``--warmup`` + ``--seconds`` (what
arrives in the warm-up is not counted). Sends keep a schedule that does not drift:
message *i* is due at ``start + i / rate``; a sender that wakes late sends
all that is due at once, each still stamped with its due time. Latency is
arrival minus due time, so time a message spent waiting for a late sender
counts (no coordinated omission). ``--rate R`` offers R msg/s instead (no
maximum measured: the quick run that CI makes).

Beside each cell, what the processes used of the machine, per second: the
cores each kept busy (the bridge, the broker, this process), and for those
that are one event loop (the bridge, the embedded broker, this process) how
long their main thread waited in the run queue (``/proc/PID/schedstat``):
runnable but not running, time a loaded machine adds to every hop.

The machine is shared, so ``--rounds N`` runs every path N times
(interleaved) and the table gives the median over rounds of each figure.
Target: at 50% load, a bridge's p99 at most its ``batch.time`` (none by default)
plus 5 ms, beyond what its writes themselves cost (an fsync, a receipt);
on the file path, two bridges in a row and a polled file, the sum of theirs
plus the file source's ``poll_interval``.

``--profile DIR`` runs each ``bridges run`` under cProfile (one ``.prof``
per path and round) with its log at debug level (kept beside it), and
prints for each cell the batches each route wrote: how many, their mean
size, and p50 / p99 / max of a write (to the sink, durable), in ms. The
latencies are then not for quoting.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, Final, Protocol

import httpx
import trio
from _common import (
    EMBEDDED,
    HOST,
    TARGETS,
    BenchError,
    Target,
    bench_command,
    bridges_command,
    check_target,
    child,
    drain_rest,
    embedded_broker,
    environment_line,
    free_port,
    listening_pid,
    process_cpu,
    wait_port,
    write_report,
)
from http_throughput import _BARE_SERVER as BARE_SERVER

import trio_stomp
from bridges._config import Batching

CLIENT_PATHS: Final = {
    EMBEDDED: "client round trip, embedded",
    "rabbitmq": "client round trip, RabbitMQ",
    "activemq": "client round trip, ActiveMQ",
}
BRIDGE_PATHS: Final = {
    "stomp-stomp": "bridge STOMP -> STOMP",
    "file-stomp-file": "bridges file -> STOMP -> file",
    "webhook-stomp": "bridge webhook -> STOMP",
}
#: The webhook path's peer: the same senders, a server that stores nothing.
BARE_HTTP: Final = "http-bare"
PATHS: Final = {**CLIENT_PATHS, **BRIDGE_PATHS, BARE_HTTP: "bare HTTP round trip (no bridge)"}
#: How the plot's axis names each path (short: one group of bars per path and load).
SHORT: Final = {
    EMBEDDED: "embedded",
    "rabbitmq": "RabbitMQ",
    "activemq": "ActiveMQ",
    "stomp-stomp": "STOMP->STOMP",
    "file-stomp-file": "file->STOMP->file",
    "webhook-stomp": "webhook->STOMP",
    BARE_HTTP: "bare HTTP",
}
#: What the target allows a route (a bridge) beyond its batch.time (0 by default) at 50% load, s.
SLACK: Final = 0.005
#: How long a bridge may take to start and carry its first message, s.
READY_LIMIT: Final = 60.0
_RECORD: Final = re.compile(rb'"body": ?"(\w+) (\d+) (\d+) ')


# -- arrivals and their figures -------------------------------------------------------


class Tally:
    """What arrived of one cell's ``count`` messages (tagged ``tag``): each one's latency."""

    def __init__(self, tag: bytes, count: int, skip: int = 0) -> None:
        self.tag = tag
        self.count = count
        self.skip = skip  # the first ``skip`` (the warm-up) are not counted
        self.seen = bytearray(count)
        self.latencies: list[int] = []  # ns
        self.arrived = 0
        self.duplicates = 0
        self.done = trio.Event()

    def arrive(self, tag: bytes, seq: int, due: int, now: int) -> None:
        if tag != self.tag or seq >= self.count:
            return
        if self.seen[seq]:
            self.duplicates += 1
            return
        self.seen[seq] = 1
        self.arrived += 1
        if seq >= self.skip:
            self.latencies.append(now - due)
        if self.arrived == self.count:
            self.done.set()

    def figures(self) -> dict[str, float]:
        """p50, p99 and max latency (ms, nearest rank) of the counted arrivals."""
        ordered = sorted(self.latencies)
        if not ordered:
            raise BenchError(f"nothing of cell {self.tag.decode()} arrived after its warm-up")

        def rank(q: float) -> float:
            return ordered[min(len(ordered) - 1, max(0, -int(-q * len(ordered)) - 1))] / 1e6

        return {"p50": rank(0.50), "p99": rank(0.99), "max": ordered[-1] / 1e6}


class Arrivals:
    """Routes each arrival to the cell being measured (others' stragglers are ignored)."""

    def __init__(self) -> None:
        self.tally = Tally(b"none", 0)

    def body(self, body: bytes, now: int) -> None:
        tag, seq, due, _ = body.split(b" ", 3)
        self.tally.arrive(tag, int(seq), int(due), now)


def stamp(tag: bytes, seq: int, due: int, size: int) -> bytes:
    head = b"%b %d %d " % (tag, seq, due)
    return head + b"x" * max(size - len(head), 0)


class Probe(Protocol):
    """One path's sending end; its receiving end reports to an :class:`Arrivals`."""

    async def send(self, bodies: list[bytes]) -> None: ...


# -- sending ---------------------------------------------------------------------------


async def sleep_until_ns(when: int) -> None:
    await trio.sleep(max(0.0, (when - time.perf_counter_ns()) / 1e9))


async def paced(probe: Probe, tally: Tally, rate: float, size: int) -> None:
    """Send ``tally.count`` messages at ``rate``, message i due at start + i / rate."""
    interval = 1e9 / rate
    start = time.perf_counter_ns() + 10_000_000
    sent = 0
    while sent < tally.count:
        now = time.perf_counter_ns()
        due = min(tally.count, int((now - start) / interval) + 1) if now >= start else 0
        if due > sent:
            await probe.send(
                [stamp(tally.tag, i, start + int(i * interval), size) for i in range(sent, due)]
            )
            sent = due
        if sent < tally.count:
            await sleep_until_ns(start + int(sent * interval))


async def flood(probe: Probe, tally: Tally, seconds: float, window: int, size: int) -> float:
    """Send as fast as the path takes them, at most ``window`` on their way, for
    ``seconds``; the rate they arrived at after the first third (the pipeline full)."""
    began = time.perf_counter_ns()
    full, end = began + int(seconds * 1e9 / 3), began + int(seconds * 1e9)
    sent = 0
    counted: tuple[int, int] | None = None  # (when, arrived by then) once full
    while (now := time.perf_counter_ns()) < end:
        if counted is None and now >= full:
            counted = (now, tally.arrived)
        room = min(window - (sent - tally.arrived), 100, tally.count - sent)
        if room <= 0:
            await trio.sleep(0.001)
            continue
        await probe.send([stamp(tally.tag, i, now, size) for i in range(sent, sent + room)])
        sent += room
    tally.count = sent
    if tally.arrived >= sent:
        tally.done.set()
    if counted is None or tally.arrived <= counted[1]:
        raise BenchError(f"nothing arrived in the last {seconds * 2 / 3:.1f} s at the maximum")
    return (tally.arrived - counted[1]) / ((now - counted[0]) / 1e9)


async def wait_all(tally: Tally, limit: float) -> None:
    with trio.move_on_after(limit):
        await tally.done.wait()
    if tally.arrived < tally.count:
        raise BenchError(
            f"only {tally.arrived} of {tally.count} messages arrived within {limit:.0f} s"
        )


def new_cell(arrivals: Arrivals, count: int, skip: int = 0) -> Tally:
    gc.collect()
    gc.freeze()  # (the heap so far out of the collector's way, as bridges run does)
    arrivals.tally = Tally(uuid.uuid4().hex[:8].encode(), count, skip)
    return arrivals.tally


async def wait_ready(probe: Probe, arrivals: Arrivals, size: int) -> None:
    """Until a message makes it through (a bridge that just started may not listen yet)."""
    tally = new_cell(arrivals, 10_000)
    with trio.move_on_after(READY_LIMIT):
        for seq in range(tally.count):
            await probe.send([stamp(tally.tag, seq, time.perf_counter_ns(), size)])
            with trio.move_on_after(0.2):
                while not tally.arrived:  # noqa: ASYNC110 - a counter
                    await trio.sleep(0.005)
            if tally.arrived:
                await trio.sleep(0.3)  # the stragglers of the probe pass
                return
    raise BenchError(f"no message made it through in {READY_LIMIT:.0f} s")


# -- the paths -------------------------------------------------------------------------


class StompProbe:
    def __init__(self, client: trio_stomp.Client, destination: str) -> None:
        self.client = client
        self.destination = destination

    async def send(self, bodies: list[bytes]) -> None:
        for body in bodies:
            await self.client.send(self.destination, body)


async def receive_stomp(
    client: trio_stomp.Client, destination: str, arrivals: Arrivals, task_status: Any
) -> None:
    clock = time.perf_counter_ns
    async with client.subscribe(destination, ack="auto", receipt=True) as sub:
        task_status.started()
        async for message in sub:
            arrivals.body(bytes(message.body), clock())


@contextlib.asynccontextmanager
async def stomp_pair(
    target: Target, send_to: str, receive_from: str, arrivals: Arrivals
) -> AsyncIterator[Probe]:
    """A client sending to ``send_to`` and receiving (``ack="auto"``) from ``receive_from``."""
    async with trio_stomp.connect(target.url, heartbeat=(0, 0)) as client:
        async with trio.open_nursery() as nursery:
            await nursery.start(receive_stomp, client, receive_from, arrivals)
            yield StompProbe(client, send_to)
            nursery.cancel_scope.cancel()


class FileProbe:
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    async def send(self, bodies: list[bytes]) -> None:
        os.write(self.fd, b"\n".join(bodies) + b"\n")


async def tail_output(directory: Path, arrivals: Arrivals) -> None:
    """Poll ``directory`` every millisecond for the JSON lines the file sink wrote."""
    files: dict[int, list[Any]] = {}  # inode -> [fd, bytes of a line not yet complete]
    scanned = 0.0
    try:
        while True:
            if time.monotonic() - scanned > 0.05:
                scanned = time.monotonic()
                for entry in os.scandir(directory):
                    if ".jsonl" in entry.name and entry.inode() not in files:
                        files[entry.inode()] = [os.open(entry.path, os.O_RDONLY), b""]
            now = time.perf_counter_ns()
            for state in files.values():
                while data := os.read(state[0], 1 << 20):
                    state[1] += data
                end = state[1].rfind(b"\n") + 1
                if end:
                    whole, state[1] = state[1][:end], state[1][end:]
                    for found in _RECORD.finditer(whole):
                        tag, seq, due = found.groups()
                        arrivals.tally.arrive(tag, int(seq), int(due), now)
            await trio.sleep(0.001)
    finally:
        for fd, _ in files.values():
            os.close(fd)


@contextlib.asynccontextmanager
async def file_pair(work: Path, arrivals: Arrivals) -> AsyncIterator[Probe]:
    probe = FileProbe(work / "in.jsonl")
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tail_output, work / "out", arrivals)
            yield probe
            nursery.cancel_scope.cancel()
    finally:
        os.close(probe.fd)


class WebhookProbe:
    """Hands bodies to ``senders`` tasks, each posting on its own keep-alive connection."""

    def __init__(self, send: trio.MemorySendChannel[bytes]) -> None:
        self.channel = send

    async def send(self, bodies: list[bytes]) -> None:
        for body in bodies:
            self.channel.send_nowait(body)


async def post_each(
    client: httpx.AsyncClient,
    url: str,
    receive: trio.MemoryReceiveChannel[bytes],
    answered: Arrivals | None,
) -> None:
    """Post each body until it is taken (a 2xx); a sender retries what failed. With
    ``answered``, the answer is the arrival (the bare HTTP round trip)."""
    headers = {"content-type": "application/octet-stream"}
    async for body in receive:
        while True:
            try:
                response = await client.post(url, content=body, headers=headers)
                if 200 <= response.status_code < 300:
                    break
            except httpx.TransportError:
                pass
            await trio.sleep(0.05)
        if answered is not None:
            answered.body(body, time.perf_counter_ns())


@contextlib.asynccontextmanager
async def webhook_pair(
    url: str, target: Target | None, queue: str, senders: int, arrivals: Arrivals
) -> AsyncIterator[Probe]:
    """Webhooks posted by ``senders`` connections, received from ``queue`` on ``target``;
    without a target, a message arrives when its POST is answered."""
    limits = httpx.Limits(max_connections=senders, max_keepalive_connections=senders)
    send, receive = trio.open_memory_channel[bytes](float("inf"))
    async with (
        httpx.AsyncClient(limits=limits, timeout=60, trust_env=False) as http,
        trio.open_nursery() as nursery,
    ):
        if target is not None:
            client = await nursery.start(connected, target)
            await nursery.start(receive_stomp, client, queue, arrivals)
        for _ in range(senders):
            nursery.start_soon(post_each, http, url, receive, None if target else arrivals)
        yield WebhookProbe(send)
        nursery.cancel_scope.cancel()


async def connected(target: Target, task_status: Any) -> None:
    """A client of ``target`` for as long as the task runs."""
    async with trio_stomp.connect(target.url, heartbeat=(0, 0)) as client:
        task_status.started(client)
        await trio.sleep_forever()


def stomp_endpoint(target: Target, queue: str) -> str:
    return (
        f'type = "stomp", url = "stomp://{HOST}:{target.port}", login = "{target.login}", '
        f'passcode = "{target.passcode}", destination = "{queue}"'
    )


def bridge_config(path: str, target: Target, work: Path, args: argparse.Namespace) -> str:
    """The ``bridges run`` config of a bridge path (queues and files under ``work``)."""
    batch = "" if args.batch_time is None else f"batch = {{ time = {args.batch_time} }}\n"
    a, b = (stomp_endpoint(target, f"/queue/latency-{x}-{work.name}") for x in "ab")
    # (--profile: the engine logs each batch write at debug level, timed)
    text = f'[bridge]\nlog_level = "{"debug" if args.profile else "warning"}"\n'
    if path == "stomp-stomp":
        routes = [(f"{{ {a} }}", f"{{ {b} }}")]
    elif path == "file-stomp-file":
        tail = f'type = "file", path = "{work}/in.jsonl", mode = "jsonl"'
        routes = [
            (f"{{ {tail}, poll_interval = {args.poll_interval} }}", f"{{ {a} }}"),
            (f"{{ {a} }}", f'{{ type = "file", path = "{work}/out" }}'),
        ]
    else:
        hooks = f'type = "http", listen = "{HOST}:{args.http_port}", path = "/hooks"'
        routes = [(f"{{ {hooks} }}", f"{{ {b} }}")]
    for index, (source, sink) in enumerate(routes):
        text += f"\n[routes.r{index}]\n{batch}source = {source}\nsink = {sink}\n"
    return text


def target(path: str, args: argparse.Namespace) -> float:
    """The p99 a bridge path may have at 50% load, s: each route on it (each bridge) its
    ``batch.time`` + SLACK, and the file source its ``poll_interval`` on the file path."""
    each: float = SLACK + (Batching().time if args.batch_time is None else args.batch_time)
    if path == "file-stomp-file":
        poll: float = args.poll_interval
        return 2 * each + poll
    return each


@contextlib.contextmanager
def bridge_process(
    path: str, target: Target, work: Path, args: argparse.Namespace, round_: int
) -> Iterator[subprocess.Popen[bytes]]:
    """``bridges run`` for a bridge path in its own process, for the block."""
    config = work / "bridge.toml"
    config.write_text(bridge_config(path, target, work, args))
    command = bridges_command()
    if args.profile:
        prof = Path(args.profile) / f"bridge-{path}-r{round_}.prof"
        command = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "bridges._cli"]
    with child([*command, "run", str(config)], work, "bridge") as process:
        try:
            yield process
        except BenchError as exc:
            text = (work / "bridge.log").read_text(errors="replace").strip()
            raise BenchError(f"{exc}; bridges run said: {text[-1500:] or 'nothing'}") from None
    if process.returncode not in (0, -15):
        text = (work / "bridge.log").read_text(errors="replace")[-1000:]
        raise BenchError(f"bridges run exited with {process.returncode}: {text}")
    if args.profile:
        shutil.copy(work / "bridge.log", Path(args.profile) / f"bridge-{path}-r{round_}.log")


_WROTE: Final = re.compile(rb"route '(\w+)': wrote (\d+) message\(s\) in ([\d.]+) ms")


def log_size(log: Path | None) -> int | None:
    return None if log is None else log.stat().st_size


def batch_writes(log: Path, start: int) -> dict[str, float]:
    """Per route, from the debug lines the bridge logged after byte ``start`` of ``log``:
    batches written, their mean size, and p50 / p99 / max of a write (ms)."""
    with log.open("rb") as text:
        text.seek(start)
        found = _WROTE.findall(text.read())
    figures: dict[str, float] = {}
    for route in sorted({name.decode() for name, _, _ in found}):
        sizes = [int(n) for name, n, _ in found if name.decode() == route]
        times = sorted(float(ms) for name, _, ms in found if name.decode() == route)
        figures |= {
            f"{route}_batches": len(times),
            f"{route}_batch_size": sum(sizes) / len(sizes),
            f"{route}_write_p50": times[len(times) // 2],
            f"{route}_write_p99": times[min(len(times) - 1, int(len(times) * 0.99))],
            f"{route}_write_max": times[-1],
        }
    return figures


# -- cells -----------------------------------------------------------------------------

Opener = Callable[[Arrivals], contextlib.AbstractAsyncContextManager[Probe]]


def run_queue_wait(pid: int | None) -> float | None:
    """Seconds the main thread of ``pid`` has spent runnable but waiting for a CPU so far
    (``/proc/PID/schedstat``): a Trio process's event loop, late by that much."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


#: name -> (pid, whether its main thread is an event loop whose run-queue wait tells)
Processes = dict[str, tuple[int | None, bool]]


def usage(processes: Processes) -> dict[str, float | None]:
    """CPU seconds (all threads) and run-queue wait (event loops) of each process so far."""
    figures = {f"cpu_{name}": process_cpu(pid) for name, (pid, _) in processes.items()}
    for name, (pid, loop) in processes.items():
        if loop:
            figures[f"wait_{name}"] = run_queue_wait(pid)
    return figures


def usage_since(
    before: dict[str, float | None], seconds: float, processes: Processes
) -> dict[str, float]:
    """Per second of wall time since ``before``: cores busy, and seconds waiting for one."""
    return {
        name: (value - was) / seconds
        for name, value in usage(processes).items()
        if value is not None and (was := before[name]) is not None
    }


async def measure_path(
    open_probe: Opener,
    args: argparse.Namespace,
    window: int,
    processes: Processes,
    log: Path | None = None,
) -> dict[str, Any]:
    """One round of one path: its maximum (at most ``window`` messages on their way),
    then each load (or ``--rate``); what ``processes`` used of the machine in each and,
    with ``--profile``, the bridge's batch writes (from its ``log``)."""
    processes = {"bench": (os.getpid(), True), **processes}
    arrivals = Arrivals()
    result: dict[str, Any] = {"cells": {}}
    async with open_probe(arrivals) as probe:
        await wait_ready(probe, arrivals, args.size)
        if args.rate is None:
            tally = new_cell(arrivals, 10_000_000)
            result["max"] = await flood(probe, tally, args.max_seconds, window, args.size)
            await wait_all(tally, args.timeout)
            loads = [(f"{load:.0%}", load * result["max"]) for load in args.loads]
        else:
            loads = [(f"{args.rate:g}/s", args.rate)]
        for label, rate in loads:
            await trio.sleep(0.2)  # (what the last cell left in flight settles)
            skip = int(rate * args.warmup)
            tally = new_cell(arrivals, skip + max(10, int(rate * args.seconds)), skip)
            before, wall = usage(processes), time.perf_counter()
            log_start = log_size(log) if args.profile else None
            await paced(probe, tally, rate, args.size)
            await wait_all(tally, args.timeout)
            cell = {"rate": rate, **tally.figures(), "duplicates": tally.duplicates}
            cell.update(usage_since(before, time.perf_counter() - wall, processes))
            if log is not None and log_start is not None:
                cell.update(batch_writes(log, log_start))
            result["cells"][label] = cell
    return result


def run_path(path: str, broker: Target, args: argparse.Namespace, round_: int) -> dict[str, Any]:
    """One round of ``path``: its processes started, measured, stopped."""
    broker_pid = listening_pid(broker.port)
    with tempfile.TemporaryDirectory(prefix="latency-") as tmp:
        work = Path(tmp)
        if path in CLIENT_PATHS:
            target = broker if path == EMBEDDED else TARGETS[path]
            queue = f"/queue/latency-{uuid.uuid4().hex[:10]}"
            opener = partial(stomp_pair, target, queue, queue)
            broker_process = {"broker": (listening_pid(target.port), path == EMBEDDED)}
            try:
                return trio.run(measure_path, opener, args, args.window, broker_process)
            finally:
                if path != EMBEDDED:
                    drain_rest(target, queue, idle=0.2)
        args.http_port = free_port()
        if path == BARE_HTTP:
            url = f"http://{HOST}:{args.http_port}/"
            bare = [sys.executable, "-c", BARE_SERVER, f"{HOST}:{args.http_port}"]
            with child(bare, work, "bare") as process:
                wait_port(args.http_port, process, "the bare HTTP server")
                opener = partial(webhook_pair, url, None, "", args.senders)
                server: Processes = {"bridge": (process.pid, True)}  # (in the bridge's column)
                return trio.run(measure_path, opener, args, 4 * args.senders, server)
        a, b = (f"/queue/latency-{x}-{work.name}" for x in "ab")
        window = args.window
        if path == "stomp-stomp":
            opener = partial(stomp_pair, broker, a, b)
        elif path == "file-stomp-file":
            (work / "out").mkdir()
            opener = partial(file_pair, work)
        else:
            url = f"http://{HOST}:{args.http_port}/hooks"
            opener = partial(webhook_pair, url, broker, b, args.senders)
            window = 4 * args.senders  # (only as many are posted at once as there are senders)
        with bridge_process(path, broker, work, args, round_) as process:
            processes = {"bridge": (process.pid, True), "broker": (broker_pid, True)}
            return trio.run(measure_path, opener, args, window, processes, work / "bridge.log")


# -- the run and its report --------------------------------------------------------------

#: path -> load label -> figure -> value per round
Figures = dict[str, dict[str, dict[str, list[float]]]]
CPU_NAMES: Final = ("bridge", "broker", "bench")


def collect(results: Figures, path: str, result: dict[str, Any]) -> None:
    cells = results.setdefault(path, {})
    if "max" in result:
        cells.setdefault("max", {}).setdefault("rate", []).append(result["max"])
    for label, cell in result["cells"].items():
        for name, value in cell.items():
            cells.setdefault(label, {}).setdefault(name, []).append(value)


def progress(path: str, round_: int, result: dict[str, Any]) -> str:
    """One line per path and round, as it is measured."""
    parts = [f"max {result['max']:,.0f}/s"] if "max" in result else []
    for label, cell in result["cells"].items():
        part = f"{label}: {cell['p50']:.1f} / {cell['p99']:.1f} / {cell['max']:.1f} ms"
        for route in sorted({key.split("_")[0] for key in cell if "_write_" in key}):
            part += (
                f" ({route}: {cell[f'{route}_batches']:.0f} batches of "
                f"{cell[f'{route}_batch_size']:.0f}, written in {cell[f'{route}_write_p50']:.1f}"
                f" / {cell[f'{route}_write_p99']:.1f} / {cell[f'{route}_write_max']:.1f} ms)"
            )
        parts.append(part)
    return f"  round {round_ + 1}, {PATHS[path]}: " + "; ".join(parts)


def table(results: Figures, args: argparse.Namespace) -> tuple[list[str], list[dict[str, Any]]]:
    """The table's lines and the report's rows (medians over rounds)."""
    lines = [
        "| path | load | offered msg/s | p50 ms | p99 ms | max ms "
        "| bridge, broker, bench: cores busy/run-queue wait ms per s | target |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    rows: list[dict[str, Any]] = []
    for path in [p for p in PATHS if p in results]:  # (in the order of --paths' help)
        for label, figures in results[path].items():
            if label == "max":
                continue
            med = {name: statistics.median(values) for name, values in figures.items()}
            cpu = ", ".join(
                f"{med.get(f'cpu_{name}', 0):.2f}/{med[f'wait_{name}'] * 1000:.0f}"
                if f"wait_{name}" in med
                else f"{med[f'cpu_{name}']:.2f}"
                if f"cpu_{name}" in med
                else "-"
                for name in CPU_NAMES
            )
            verdict = ""
            if path in BRIDGE_PATHS and label == "50%":
                bound = target(path, args) * 1000
                verdict = f"p99 <= {bound:g} ms: {'met' if med['p99'] <= bound else 'NOT met'}"
            lines.append(
                f"| {PATHS[path]} | {label} | {med['rate']:,.0f} | {med['p50']:.1f} "
                f"| {med['p99']:.1f} | {med['max']:.1f} | {cpu} | {verdict} |"
            )
            rows += [
                {
                    "series": series,
                    "label": f"{SHORT[path]} {label}",
                    "value": round(med[series], 3),
                    "path": path,
                    "load": label,
                    "rate": round(med["rate"], 1),
                    "rounds": [round(v, 3) for v in figures[series]],
                }
                for series in ("p50", "p99", "max")
            ]
    return lines, rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--paths",
        type=lambda text: [p.strip() for p in text.split(",") if p.strip()],
        default=list(PATHS),
        help=f"from {','.join(PATHS)}",
    )
    parser.add_argument(
        "--loads",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[0.1, 0.5, 0.9],
        help="offered rates, as fractions of the maximum measured in the same round",
    )
    parser.add_argument("--rate", type=float, help="offer this rate (msg/s) instead of --loads")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured, per load")
    parser.add_argument("--warmup", type=float, default=0.5, help="sent first, not counted, s")
    parser.add_argument("--max-seconds", type=float, default=3.0, help="to measure the maximum")
    parser.add_argument("--window", type=int, default=5000, help="on their way, at the maximum")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=100, help="body bytes")
    parser.add_argument(
        "--batch-time", type=float, help="the routes' batch.time (default: the shipped 0)"
    )
    parser.add_argument("--poll-interval", type=float, default=0.01, help="the file source's")
    parser.add_argument("--senders", type=int, default=16, help="webhook connections")
    parser.add_argument("--timeout", type=float, default=60.0, help="for a cell's last arrivals")
    parser.add_argument("--json", metavar="PATH", help="write the figures (bench/_common report)")
    parser.add_argument("--profile", metavar="DIR", help="cProfile each bridges run into DIR")
    args = parser.parse_args()
    unknown = [p for p in args.paths if p not in PATHS]
    if unknown or not args.paths:
        parser.error(f"--paths: expected names from {','.join(PATHS)}, got {unknown}")
    if (args.rate is not None and args.rate <= 0) or not all(0 < x <= 1 for x in args.loads):
        parser.error("--rate must be positive and --loads fractions in (0, 1]")
    if args.rounds < 1 or args.seconds <= 0 or args.size < 40:
        parser.error("--rounds and --seconds must be positive, --size at least 40")
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    return args


def run_rounds(args: argparse.Namespace, failed: list[str]) -> Figures:
    """Every path, round after round (every other round in reverse order)."""
    results: Figures = {}
    with embedded_broker() as broker:
        paths = []
        for path in args.paths:
            reason = check_target(TARGETS[path]) if path in TARGETS else None
            if reason is None:
                paths.append(path)
            else:
                failed.append(f"{PATHS[path]}: skipped: {reason}")
        for round_ in range(args.rounds):
            for path in paths if round_ % 2 == 0 else reversed(paths):
                try:
                    result = run_path(path, broker, args, round_)
                except (BenchError, trio_stomp.StompError, OSError) as exc:
                    failed.append(f"{PATHS[path]}, round {round_ + 1}: {exc}")
                    continue
                print(progress(path, round_, result), flush=True)
                collect(results, path, result)
    return results


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    print(environment_line())
    if args.rate:
        offered = f"{args.rate:g} msg/s"
    else:
        loads = ", ".join(f"{x:.0%}" for x in args.loads)
        offered = f"loads {loads} of the maximum ({args.max_seconds:g} s, window {args.window})"
    print(
        f"{args.size}-byte messages; {offered}; {args.warmup:g} s warm-up + {args.seconds:g} s "
        f"per load; medians of {args.rounds} interleaved rounds; p50 / p99 / max per round:"
    )
    failed: list[str] = []
    results = run_rounds(args, failed)
    lines, rows = table(results, args)
    print()
    print("\n".join(lines))
    for path, cells in results.items():
        if "max" in cells:
            each = ", ".join(f"{r:,.0f}" for r in cells["max"]["rate"])
            print(f"{PATHS[path]}: maximum {each} msg/s (per round)")
    for line in failed:
        print(line, file=sys.stderr)
    if args.json:
        command = bench_command(__file__, sys.argv[1:])
        write_report(args.json, bench="latency", command=command, unit="ms", rows=rows)
    note = "; profiled: not for quoting" if args.profile else ""
    print(f"\n({time.perf_counter() - started:.0f} s{note})")
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
