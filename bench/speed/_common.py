"""The throughput benchmarks' harness (``bench/speed/``): raw sends, one measurement per process.

Nothing here is timed by itself. It provides, beside what it re-exports from
the layer under both bench folders (``bench/_base.py``: errors, ports,
processes, the environment line and reports; ``bench/_brokers.py``: the
brokers and the raw-socket client):

- :func:`run_child` / :func:`child_main`: run one measurement in a fresh
  interpreter and read its JSON result, so each gets clean CPU accounting
  and a bounded run time.
- :func:`prefill` and :func:`drain_rest`: a queue filled with raw sends;
  whatever a failed cell leaves in a queue is consumed (a broker left holding
  messages is a broker that slows: ActiveMQ keeps them on its heap until it
  runs out of it).
- what every broker/client measurement does the same way (options, counts).

The broker/client measurements import neither trio nor bridges from here
(their children start clean); what the endpoint benchmarks share beyond
this is in ``bench/speed/_endpoints.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# The layer under both bench folders (bench/: _base, _brokers, _http, _spark), for the
# scripts here: they are run by path, so only their own folder is on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _base import HOST as HOST
from _base import BenchError as BenchError
from _base import bench_command as bench_command
from _base import bridges_command as bridges_command
from _base import environment_line as environment_line
from _base import free_port as free_port
from _base import stop_process as stop_process
from _base import wait_port as wait_port
from _base import write_report as write_report
from _brokers import CHUNK as CHUNK
from _brokers import EMBEDDED as EMBEDDED
from _brokers import TARGETS as TARGETS
from _brokers import WINDOW as WINDOW
from _brokers import WINDOW_HEADERS as WINDOW_HEADERS
from _brokers import RawClient as RawClient
from _brokers import Target as Target
from _brokers import broker_went_away as broker_went_away
from _brokers import check_target as check_target
from _brokers import embedded_broker as embedded_broker
from _brokers import frame as frame
from _brokers import open_targets as open_targets
from _brokers import parse_brokers as parse_brokers
from _brokers import start_embedded_broker as start_embedded_broker
from _http import START_LIMIT as START_LIMIT
from _http import child as child
from _http import wait_healthy as wait_healthy
from _spark import committed_files as committed_files

ACK_MODES: Final = ("auto", "client-individual")


def unique_queue(*parts: str) -> str:
    """A queue name no earlier run used: nothing left over can be counted."""
    tag = "-".join(part.replace(".", "").replace("_", "") for part in parts)
    return f"/queue/bench-{tag}-{uuid.uuid4().hex[:10]}"


def body_of(size: int) -> bytes:
    return (b"0123456789abcdefghijklmnopqrstuvwxyz" * (size // 36 + 1))[:size]


def send_frames(
    destination: str, body: bytes, count: int, headers: dict[str, str] | None = None
) -> bytes:
    """``count`` SEND frames as trio_stomp encodes them (destination, ``headers``
    (no escaping needed), content-length)."""
    extra = "".join(f"{name}:{value}\n" for name, value in (headers or {}).items())
    frame = f"SEND\ndestination:{destination}\n{extra}content-length:{len(body)}\n\n".encode()
    return (frame + body + b"\0") * count


def prefill(target: Target, destination: str, body: bytes, count: int, timeout: float) -> None:
    """Put ``count`` messages in ``destination`` (raw socket, confirmed by a receipt)."""
    client = RawClient(target, timeout=timeout)
    client.write(send_frames(destination, body, count))
    client.disconnect()


def drain_rest(target: Target, destination: str, idle: float = 1.0) -> int:
    """Best effort, after a failed run: consume what is left until ``idle`` s pass quietly.

    Returns how many messages that took. Leaving them would leave them in the
    broker: ActiveMQ keeps them in its heap until it runs out of it.
    """
    got = 0
    try:
        client = RawClient(target, timeout=max(idle, 5.0))
        client.subscribe(destination, "auto")
        client.sock.settimeout(idle)
        tail = b""
        while True:
            try:
                data = client.sock.recv(CHUNK)
            except TimeoutError:
                break
            if not data:
                break
            # The 7 bytes kept cannot hold a whole "MESSAGE\n": one cut in two
            # between reads is counted once, on the next read.
            data = tail + data
            got += data.count(b"MESSAGE\n")
            tail = data[-7:]
        client.sock.close()
    except (BenchError, OSError):
        pass
    return got


# -- one measurement per fresh process ---------------------------------------------


@dataclass(frozen=True)
class Result:
    """What one measurement child reports."""

    count: int
    elapsed: float  # wall seconds
    cpu: float  # process CPU seconds (all threads), same window
    note: str = ""  # how this run differed from the default, if it did

    @property
    def rate(self) -> float:
        return self.count / self.elapsed

    @property
    def cpu_per_10k(self) -> float:
        return self.cpu / self.count * 10_000


class Meter:
    """Wall time and process CPU time (every thread) between start() and stop()."""

    def __init__(self) -> None:
        self.wall0 = self.cpu0 = 0.0
        self.result: dict[str, float] = {}

    def start(self) -> None:
        self.wall0 = time.perf_counter()
        self.cpu0 = time.process_time()

    def stop(self, count: int) -> None:
        self.result = {
            "count": count,
            "elapsed": time.perf_counter() - self.wall0,
            "cpu": time.process_time() - self.cpu0,
        }


Runner = Callable[[dict[str, Any], "Meter"], None]


def child_main(run: Runner, spec: dict[str, Any]) -> None:
    """In the child: ``run(spec, meter)`` (optionally under cProfile); print the result."""
    meter = Meter()
    profile_path = spec.get("profile")
    try:
        if profile_path:
            import cProfile

            profiler = cProfile.Profile()
            try:
                profiler.runcall(run, spec, meter)
            finally:
                profiler.dump_stats(profile_path)
        else:
            run(spec, meter)
    except BenchError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(3)
    if not meter.result:
        print("the run did not stop its meter", file=sys.stderr)
        sys.exit(3)
    print(json.dumps(meter.result), flush=True)


def run_child(script: str, spec: dict[str, Any], timeout: float) -> Result:
    """Run ``script --child SPEC`` in a fresh interpreter; return its :class:`Result`.

    Raises:
      BenchError: the child failed, printed no result, or ran past ``timeout``.
    """
    command = [sys.executable, script, "--child", json.dumps(spec)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout:.0f} s") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise BenchError(lines[-1][:200])
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BenchError(f"no result from the child: {done.stdout[-200:]!r}") from None
    return Result(int(data["count"]), float(data["elapsed"]), float(data["cpu"]))


def listening_pid(port: int) -> int | None:
    """The pid of the process listening on 127.0.0.1:``port``, if /proc tells."""
    wanted = f"{socket.htonl(0x7F000001):08X}:{port:04X}"
    inode = None
    try:
        with open("/proc/net/tcp") as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                if fields[1] == wanted and fields[3] == "0A":  # 0A: LISTEN
                    inode = fields[9]
                    break
    except OSError:
        return None
    if inode is None:
        return None
    needle = f"socket:[{inode}]"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) == needle:
                    return int(proc.name)
        except OSError:
            continue
    return None


def process_cpu(pid: int | None) -> float | None:
    """CPU seconds (user + system, all threads) that process ``pid`` has used so far."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


# -- what every broker/client measurement does the same way --------------------------------


def run_trio_cell(main: Callable[[], Awaitable[None]], timeout: float) -> None:
    """``trio.run(main)`` in a measurement child; a client error or the timeout: BenchError."""
    import trio

    import trio_stomp

    try:
        trio.run(main)
    except trio_stomp.StompError as exc:
        raise BenchError(f"{type(exc).__name__}: {exc}") from None
    except trio.TooSlowError:
        raise BenchError(f"no result within {timeout} s") from None


async def consume_count(sub: Any, count: int, acking: bool, meter: Meter) -> None:
    """COUNT messages from the trio_stomp subscription SUB (each acked when ACKING), metered."""
    got = 0
    async for message in sub:
        if acking:
            await message.ack()
        got += 1
        if got == count:
            break
    meter.stop(got)
    if got != count:
        raise BenchError(f"the subscription ended after {got} of {count} messages")


def check_raw_count(got: int, count: int) -> None:
    if got != count:
        raise BenchError(f"received {got} messages, expected {count}")


def add_cell_options(parser: argparse.ArgumentParser) -> None:
    """--timeout, --profile and the hidden --child of a script measuring cells in children."""
    parser.add_argument("--timeout", type=float, default=60.0, help="bound on each cell, s")
    parser.add_argument("--profile", metavar="DIR", help="cProfile the trio_stomp cells into DIR")
    parser.add_argument("--child", help=argparse.SUPPRESS)


def check_cell_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--count, --size and --rounds positive; the --profile folder made."""
    if args.count < 1 or args.size < 1 or args.rounds < 1:
        parser.error("--count, --size and --rounds must be positive")
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)


def print_elapsed(started: float, profile: str | None) -> None:
    note = "; profiled: not for quoting" if profile else ""
    print(f"\n({time.perf_counter() - started:.0f} s{note})")
