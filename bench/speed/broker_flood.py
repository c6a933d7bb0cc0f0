"""Does a client that pipelines small SENDs starve the embedded broker's other clients?

    .venv/bin/python bench/speed/broker_flood.py [--seconds 3] [--flooders 1]
        [--rounds 3] [--compare TREE]

Starts the embedded broker (``trio-stomp broker``, in its own process) and
measures a prober's round trips: a SEND with a ``receipt`` to a topic
nobody reads, then its RECEIPT, one at a time over a raw socket. First for
``--seconds`` alone (the baseline), then while ``--flooders`` other clients
each write small SENDs (no receipt, 16-byte bodies) to a queue of their own
as fast as the broker takes them, in 256 KiB writes, each drained by an
``auto`` consumer of its own (one process per flooder, so the prober shares
no GIL with them). A 256 KiB read of such frames holds about 5,000 of them.

Prints, per broker and round, the prober's median, 99th percentile and
worst round trip, alone and under the flood, and the flood's rate (messages
its consumers received per second). The worst round trip under the flood is
the figure: how long one client's pipelining can hold another's.

``--compare TREE``: the same measurement of a broker run from another
source tree (``PYTHONPATH=TREE``, e.g. a detached worktree of main: ``git
worktree add --detach /tmp/main main``), the two alternating round by round,
each in a fresh broker. The run's own broker comes from ``$PYTHONPATH``
(or the installed package). Not a test: a table to read, with the load
average beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from _common import (
    CHUNK,
    BenchError,
    RawClient,
    Target,
    environment_line,
    frame,
    start_embedded_broker,
    stop_process,
)

#: The bytes a flooder writes at a time: one read of the broker's (RECEIVE_SIZE).
FLOOD_WRITE: Final = 256 * 1024
#: How long the flood runs before the prober starts, s.
WARMUP: Final = 0.5


@contextmanager
def broker_from(tree: str | None) -> Iterator[Target]:
    """The embedded broker, its code from ``tree`` (None: as this process finds it)."""
    saved = os.environ.get("PYTHONPATH")
    if tree is not None:
        os.environ["PYTHONPATH"] = tree
    try:
        proc, target = start_embedded_broker()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        yield target
    finally:
        stop_process(proc)


def probe(target: Target, seconds: float) -> list[float]:
    """Round trips (SEND with receipt, RECEIPT) back to back for ``seconds``, in ms."""
    client = RawClient(target, timeout=60)
    times = []
    n = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        n += 1
        send = frame("SEND", {"destination": "/topic/probe", "receipt": str(n)})
        started = time.perf_counter()
        client.sock.sendall(send)
        reply = client.read_frame()
        times.append((time.perf_counter() - started) * 1000)
        if not reply.startswith(b"RECEIPT\n"):
            raise BenchError(f"the prober got {reply[:200]!r}")
    client.disconnect()
    return times


def flood(port: int, seconds: float, to: str) -> None:
    """A flooder (a child process): a producer writing small SENDs as fast as the
    broker reads, for ``seconds``, and a consumer of its own (``to`` "queue") or
    none (``to`` "topic": a topic nobody reads); prints the messages consumed per
    second (0 for a topic)."""
    target = Target("embedded", "embedded", port, "bench", "bench")
    destination = f"/{to}/flood-{os.getpid()}"
    consumer = RawClient(target, timeout=60)
    if to == "queue":
        consumer.subscribe(destination, "auto", receipt=True)
    got = [0]

    def consume() -> None:
        tail = b""
        with_tail = len(b"MESSAGE\n") - 1
        try:
            while True:
                data = tail + consumer.sock.recv(CHUNK)
                got[0] += data.count(b"MESSAGE\n")
                tail = data[-with_tail:]
        except OSError:
            return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    producer = RawClient(target, timeout=60)
    one = frame("SEND", {"destination": destination})[:-1] + b"0123456789abcdef\0"
    data = one * (FLOOD_WRITE // len(one))
    print("flooding", flush=True)
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        producer.sock.sendall(data)
    print(f"{got[0] / (time.perf_counter() - started):.0f}", flush=True)


def measure(target: Target, args: argparse.Namespace) -> tuple[list[float], list[float], float]:
    """Round trips alone and under the flood (ms), and the flood's rate (msg/s)."""
    alone = probe(target, args.seconds)
    window = WARMUP + args.seconds
    command = [sys.executable, os.path.abspath(__file__), "--flood", str(target.port)]
    command += [str(window), args.to]
    flooders = [
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(args.flooders)
    ]
    try:
        for flooder in flooders:
            assert flooder.stdout is not None
            if flooder.stdout.readline().strip() != "flooding":
                raise BenchError("a flooder did not start")
        time.sleep(WARMUP)  # (the flood in full flow)
        flooded = probe(target, args.seconds)
        rate = sum(float(flooder.communicate(timeout=60)[0]) for flooder in flooders)
    finally:
        for flooder in flooders:
            if flooder.poll() is None:
                flooder.kill()
                flooder.wait()
    return alone, flooded, rate


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered):7.2f} {p99:7.2f} {ordered[-1]:8.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--flooders", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", metavar="TREE", help="a second source tree to measure")
    parser.add_argument(
        "--to", choices=("queue", "topic"), default="queue", help="where the flood goes"
    )
    parser.add_argument("--flood", nargs=3, help=argparse.SUPPRESS)  # (a flooder: PORT S TO)
    args = parser.parse_args()
    if args.flood is not None:
        port, seconds, to = args.flood
        flood(int(port), float(seconds), to)
        return
    print(environment_line())
    trees: list[str | None] = [os.environ.get("PYTHONPATH")]
    if args.compare:
        trees.append(str(Path(args.compare).resolve()))
    print(
        f"{'broker from':40} {'round':>5}  {'alone: p50    p99    worst':>26}  "
        f"{'flood: p50    p99    worst':>26} {'flood msg/s':>11}"
    )
    for round_ in range(1, args.rounds + 1):
        for tree in trees:
            with broker_from(tree) as target:
                alone, flooded, rate = measure(target, args)
            label = tree or "(installed)"
            print(
                f"{label[-40:]:40} {round_:>5}  {summary(alone)}  {summary(flooded)} "
                f"{rate:>11,.0f}",
                flush=True,
            )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
