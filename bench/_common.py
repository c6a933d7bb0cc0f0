"""Shared by the bench/ scripts: brokers, raw sockets, subprocesses, private servers, routes.

Nothing here is timed by itself. It provides:

- :data:`TARGETS`, :func:`open_targets` and :func:`check_target`: the
  brokers on loopback and a STOMP CONNECT probe that tells, in one line,
  when one is not running; :func:`broker_went_away` for the shared brokers
  that test suites restart.
- :func:`embedded_broker`: ``trio-stomp broker`` in its own process (its own
  GIL and core, like the real brokers), on a free port.
- The raw-socket method: pre-encoded frames written with a plain blocking
  socket in 64 KiB chunks, and MESSAGE frames counted with ``bytes.count``
  (ACK frames for their ``ack`` headers built with one regex and one join).
  No parsing, no objects per message: the limit that a client adds to.
- :func:`run_child` / :func:`child_main`: run one measurement in a fresh
  interpreter and read its JSON result, so each gets clean CPU accounting
  and a bounded run time.
- :func:`drain_rest`: whatever a failed cell leaves in a queue is consumed;
  a broker left holding messages is a broker that slows (ActiveMQ keeps
  them on its heap until it runs out of it).
- :func:`free_port` and :func:`wait_port`, for the scripts that start
  servers of their own (``bench/_endpoints.py``, ``bench/_crash.py``).

The broker/client measurements import neither trio nor bridges from here
(their children start clean); what the endpoint benchmarks share beyond
this is in ``bench/_endpoints.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

HOST: Final = "127.0.0.1"
#: Bytes per socket read and per write, for every client measured.
CHUNK: Final = 64 * 1024
#: The prefetch window every consumer asks for, whatever the client: RabbitMQ
#: reads the first header, ActiveMQ the second (and the embedded broker either).
WINDOW: Final = 1000
WINDOW_HEADERS: Final = {"prefetch-count": str(WINDOW), "activemq.prefetchSize": str(WINDOW)}
ACK_MODES: Final = ("auto", "client-individual")


class BenchError(Exception):
    """A measurement could not be made; the message says why, in one line."""


@dataclass(frozen=True)
class Target:
    """A broker to measure against."""

    name: str
    label: str
    port: int
    login: str
    passcode: str
    hint: str = ""

    def as_spec(self) -> dict[str, Any]:
        """What a child needs to rebuild it: ``Target(**spec)``."""
        return asdict(self)

    @property
    def url(self) -> str:
        return f"stomp://{self.login}:{self.passcode}@{HOST}:{self.port}/?vhost=/"


TARGETS: Final = {
    "rabbitmq": Target(
        "rabbitmq", "RabbitMQ", 61613, "guest", "guest", "start it with: scripts/brokers up"
    ),
    "activemq": Target(
        "activemq", "ActiveMQ", 61623, "bench", "bench", "start it with: scripts/brokers up"
    ),
}
EMBEDDED: Final = "embedded"
BROKER_NAMES: Final = ("rabbitmq", "activemq", EMBEDDED)


def parse_brokers(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BROKER_NAMES]
    if unknown or not names:
        raise SystemExit(f"--brokers: expected names from {','.join(BROKER_NAMES)}, got {text!r}")
    return names


def unique_queue(*parts: str) -> str:
    """A queue name no earlier run used: nothing left over can be counted."""
    tag = "-".join(part.replace(".", "").replace("_", "") for part in parts)
    return f"/queue/bench-{tag}-{uuid.uuid4().hex[:10]}"


def body_of(size: int) -> bytes:
    return (b"0123456789abcdefghijklmnopqrstuvwxyz" * (size // 36 + 1))[:size]


# -- raw sockets -----------------------------------------------------------------

_ACK_ID: Final = re.compile(rb"\nack:([^\n]*)")


def send_frames(
    destination: str, body: bytes, count: int, headers: dict[str, str] | None = None
) -> bytes:
    """``count`` SEND frames as trio_stomp encodes them (destination, ``headers``
    (no escaping needed), content-length)."""
    extra = "".join(f"{name}:{value}\n" for name, value in (headers or {}).items())
    frame = f"SEND\ndestination:{destination}\n{extra}content-length:{len(body)}\n\n".encode()
    return (frame + body + b"\0") * count


def frame(command: str, headers: dict[str, str]) -> bytes:
    """A body-less frame, unescaped: only for names and values that need no escaping."""
    lines = "".join(f"{name}:{value}\n" for name, value in headers.items())
    return f"{command}\n{lines}\n".encode() + b"\0"


class RawClient:
    """One STOMP 1.2 connection over a plain blocking socket, no client logic."""

    def __init__(self, target: Target, *, timeout: float) -> None:
        try:
            self.sock = socket.create_connection((HOST, target.port), timeout=timeout)
        except OSError as exc:
            raise BenchError(
                f"{target.label} is not reachable on {HOST}:{target.port} ({exc.strerror or exc})"
                + (f"; {target.hint}" if target.hint else "")
            ) from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.target = target
        self.pending = b""
        connect = {
            "accept-version": "1.2",
            "host": "/",
            "login": target.login,
            "passcode": target.passcode,
            "heart-beat": "0,0",
        }
        self.sock.sendall(frame("CONNECT", connect))
        reply = self.read_frame()
        if not reply.startswith(b"CONNECTED\n"):
            raise BenchError(f"{target.label} refused CONNECT: {reply[:200]!r}")

    def read_frame(self) -> bytes:
        """The next whole frame (for control frames only: CONNECTED, RECEIPT)."""
        buf = self.pending
        while b"\0" not in buf:
            data = self.recv()
            buf += data
        head, _, self.pending = buf.partition(b"\0")
        return head.lstrip(b"\r\n")

    def recv(self) -> bytes:
        try:
            data = self.sock.recv(CHUNK)
        except TimeoutError:
            raise BenchError(f"{self.target.label}: no data within the timeout") from None
        if not data:
            raise BenchError(f"{self.target.label} closed the connection")
        return data

    def write(self, data: bytes) -> None:
        """Write ``data`` in CHUNK-sized ``sendall`` calls."""
        sendall = self.sock.sendall
        view = memoryview(data)
        for start in range(0, len(data), CHUNK):
            sendall(view[start : start + CHUNK])

    def disconnect(self) -> None:
        """DISCONNECT, wait for its RECEIPT, close."""
        self.sock.sendall(frame("DISCONNECT", {"receipt": "bench-bye"}))
        while True:
            reply = self.read_frame()
            if reply.startswith(b"RECEIPT\n"):
                break
            if reply.startswith(b"ERROR\n"):
                raise BenchError(f"{self.target.label} sent ERROR: {reply[:300]!r}")
        self.sock.close()

    def subscribe(
        self, destination: str, ack: str, *, receipt: bool = False, selector: str | None = None
    ) -> None:
        """SUBSCRIBE with the common window (and ``selector``, when given); with
        ``receipt``, wait until the broker has it."""
        headers = {"id": "1", "destination": destination, "ack": ack, **WINDOW_HEADERS}
        if selector is not None:
            headers["selector"] = selector
        if receipt:
            headers["receipt"] = "bench-subscribed"
        self.sock.sendall(frame("SUBSCRIBE", headers))
        if receipt:
            reply = self.read_frame()
            if not reply.startswith(b"RECEIPT\n"):
                raise BenchError(f"{self.target.label}: SUBSCRIBE answered with {reply[:300]!r}")

    def consume(self, count: int, *, ack: bool) -> int:
        """Read until ``count`` MESSAGE frames arrived; ACK each by its ``ack`` header.

        Bodies must hold no NUL and no "MESSAGE" line (ours do not): frames
        are counted with ``bytes.count`` on whole frames only, ACKs for a
        read's messages go out as one pre-formatted ``sendall``.
        """
        got = 0
        pending = self.pending
        recv = self.recv
        sendall = self.sock.sendall
        findall = _ACK_ID.findall
        while got < count:
            data = recv()
            buf = pending + data if pending else data
            end = buf.rfind(b"\0") + 1
            if not end:
                pending = buf
                continue
            whole, pending = buf[:end], buf[end:]
            got += whole.count(b"MESSAGE\n")
            if ack:
                ids = findall(whole)
                if ids:
                    sendall(b"ACK\nid:" + b"\n\n\0ACK\nid:".join(ids) + b"\n\n\0")
            if b"ERROR\n" in whole:
                error = whole[whole.find(b"ERROR\n") :][:300]
                raise BenchError(f"{self.target.label} sent ERROR: {error!r}")
        self.pending = pending
        return got


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


def open_targets(stack: ExitStack, names: list[str]) -> list[Target]:
    """The brokers named that answer, the embedded one started (until ``stack`` closes).

    Each one that cannot be used is reported on stderr, in one line, and skipped.
    """
    targets: list[Target] = []
    for name in names:
        if name == EMBEDDED:
            try:
                targets.append(stack.enter_context(embedded_broker()))
            except BenchError as exc:
                print(f"skipping the embedded broker: {exc}", file=sys.stderr)
            continue
        target = TARGETS[name]
        problem = check_target(target)
        if problem is not None:
            print(f"skipping {target.label}: {problem}", file=sys.stderr)
            continue
        targets.append(target)
    return targets


#: What a cell's error says when its broker went away (another test restarting it).
_GONE: Final = ("not reachable", "ConnectFailed", "closed the connection", "reset", "Broken")


def broker_went_away(target: Target, error: str, wait: float) -> bool:
    """True if ``error`` looks like ``target`` went away and it answers again within ``wait`` s.

    The brokers are shared: test suites restart them. A cell that failed that
    way is worth running again once the broker is back.
    """
    if check_target(target) is None and not any(word in error for word in _GONE):
        return False
    print(f"  {target.label} seems to have gone away; waiting for it", file=sys.stderr)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if check_target(target) is None:
            return True
        time.sleep(1.0)
    return False


def check_target(target: Target, timeout: float = 5.0) -> str | None:
    """None if ``target`` answers STOMP CONNECT, else a one-line reason."""
    try:
        RawClient(target, timeout=timeout).disconnect()
    except (BenchError, OSError) as exc:
        return str(exc)
    return None


# -- the embedded broker, in its own process ------------------------------------

_LISTENING: Final = re.compile(r"broker listening on stomp://[^:\s]+:(\d+)")

_FALLBACK_BROKER: Final = """
import signal, sys, trio
from trio_stomp.broker import open_broker
async def main():
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_broker("127.0.0.1", 0) as broker:
            print(f"trio-stomp: broker listening on {broker.url}", file=sys.stderr, flush=True)
            async for _ in signals:
                break
trio.run(main)
"""


def start_embedded_broker(
    data_dir: Path | None = None,
    timeout: float = 15.0,
    name: str = "embedded",
    options: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], Target]:
    """Start the embedded broker in a subprocess (durable with ``data_dir``; ``options``:
    more of ``trio-stomp broker``'s); return it and its :class:`Target` once it listens.
    Stop it with :func:`stop_process`.

    Uses the ``trio-stomp broker`` console script next to this interpreter
    when there is one, else ``python -c`` with ``open_broker`` (volatile).
    Its log goes to a temporary file, so it never blocks on a full pipe.
    """
    script = Path(sys.executable).with_name("trio-stomp")
    if script.exists():
        command = [str(script), "broker", "--listen", f"{HOST}:0"]
        if data_dir is not None:
            command += ["--data-dir", str(data_dir)]
        command += options
    elif data_dir is None and not options:
        command = [sys.executable, "-c", _FALLBACK_BROKER]
    else:
        raise BenchError(f"a durable broker needs the trio-stomp script beside {sys.executable}")
    with tempfile.TemporaryFile(mode="w+") as log:  # (the child keeps its own descriptor)
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=log
        )
        deadline = time.monotonic() + timeout
        while True:
            log.seek(0)
            found = _LISTENING.search(log.read())
            if found:
                return proc, Target(name, name, int(found.group(1)), "bench", "bench")
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                stop_process(proc)
                raise BenchError(
                    f"the embedded broker did not start ({' '.join(command)}): "
                    f"{log.read().strip()[-300:] or 'no output'}"
                )
            time.sleep(0.05)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM ``proc`` and wait; SIGKILL it if it is still there after ``timeout`` s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def embedded_broker(
    timeout: float = 15.0,
    data_dir: Path | None = None,
    name: str = "embedded",
    options: tuple[str, ...] = (),
) -> Iterator[Target]:
    """The embedded broker in a subprocess for the block (:func:`start_embedded_broker`)."""
    proc, target = start_embedded_broker(data_dir, timeout, name, options)
    try:
        yield target
    finally:
        stop_process(proc)


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


def environment_line() -> str:
    """The build measured (trio-stomp's version and its codec's: compiled or pure
    Python), Python, CPU count and load: what the numbers depend on. A bench prints
    it first. Only the parent process calls it: trio_stomp is imported here."""
    from trio_stomp._version import build, version

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"trio-stomp {version()} ({build()}); Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {load} at start"
    )


def write_report(
    path: str | os.PathLike[str],
    *,
    bench: str,
    command: str,
    unit: str,
    rows: list[dict[str, Any]],
) -> None:
    """Write one bench run's figures as JSON, for ``docs/performance`` and its plots.

    ``rows`` are flat records: at least ``series`` (a bar colour: a mode, a
    percentile), ``label`` (a position on the axis: a broker, a route) and
    ``value`` (in ``unit``); anything else (``ratio``, ``cpu_us``) rides along.
    The environment line, the date and the command that reproduces the run are
    recorded beside them so that a figure never travels without its conditions.
    """
    import datetime

    for row in rows:
        missing = {"series", "label", "value"} - row.keys()
        if missing:
            raise BenchError(f"report row {row!r} has no {', '.join(sorted(missing))}")
    report = {
        "bench": bench,
        "command": command,
        "environment": environment_line(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "unit": unit,
        "rows": rows,
    }
    Path(path).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


def fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


# -- private servers, timing and routes for the endpoint benchmarks ------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def wait_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    """Until PORT accepts connections (10 s at most); BenchError if PROCESS ends first."""
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise BenchError(f"{what} did not start") from None
            time.sleep(0.05)


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
