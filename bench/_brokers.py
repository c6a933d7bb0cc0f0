"""The brokers a bench runs against: the shared ones on loopback and the embedded one.

- :data:`TARGETS`, :func:`open_targets` and :func:`check_target`: the
  brokers on loopback and a STOMP CONNECT probe that tells, in one line,
  when one is not running; :func:`broker_went_away` for the shared brokers
  that test suites restart.
- :func:`embedded_broker`: ``trio-stomp broker`` in its own process (its own
  GIL and core, like the real brokers), on a free port.
- :class:`RawClient`: the raw-socket method: pre-encoded frames written with
  a plain blocking socket in 64 KiB chunks, and MESSAGE frames counted with
  ``bytes.count`` (ACK frames for their ``ack`` headers built with one regex
  and one join). No parsing, no objects per message: the limit that a client
  adds to.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from _base import HOST, BenchError, stop_process

#: Bytes per socket read and per write, for every client measured.
CHUNK: Final = 64 * 1024
#: The prefetch window every consumer asks for, whatever the client: RabbitMQ
#: reads the first header, ActiveMQ the second (and the embedded broker either).
WINDOW: Final = 1000
WINDOW_HEADERS: Final = {"prefetch-count": str(WINDOW), "activemq.prefetchSize": str(WINDOW)}


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


# -- raw sockets -----------------------------------------------------------------

_ACK_ID: Final = re.compile(rb"\nack:([^\n]*)")


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
from trio_stomp.broker import Limits, open_broker
async def main():
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_broker("127.0.0.1", 0, limits=Limits(duplicate_window=10_000)) as broker:
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
    Its duplicate window is on (10,000 ids), as in a bridge's ``[broker]``,
    which this broker stands in for (the library's default is off).
    Its log goes to a temporary file, so it never blocks on a full pipe.
    """
    script = Path(sys.executable).with_name("trio-stomp")
    if script.exists():
        command = [str(script), "broker", "--listen", f"{HOST}:0"]
        command += ["--duplicate-window", "10000"]  # (as in bridges' [broker])
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
