"""Send-with-receipt throughput: the durable embedded broker, in memory, and RabbitMQ.

    .venv/bin/python bench/speed/durable_store.py [--count 20000] [--size 100]
        [--senders 8] [--window 1,64] [--rounds 3] [--json]

Three brokers, measured in the same run, round after round (the order of
the brokers rotates each round):

- ``durable``: ``trio-stomp broker --data-dir DIR`` (a fresh temporary DIR):
  every RECEIPT comes once the messages sent before it are fsynced
  (SQLite, WAL, ``synchronous=FULL``, commits grouped across connections);
- ``memory``: ``trio-stomp broker`` without a data dir (volatile);
- ``rabbitmq``: RabbitMQ of ``scripts/brokers up`` (127.0.0.1:61613,
  guest/guest), a durable queue (``/queue/...``) and ``persistent:true``:
  its RECEIPT for a SEND waits for the publisher confirm, which RabbitMQ
  gives once the message is on disk.

Each embedded broker runs in a process of its own (its own interpreter and
core, like RabbitMQ). What is measured: ``senders`` connections, each a
thread with a blocking socket, send ``count`` messages of ``size`` bytes in
all to one fresh queue, every SEND with a ``receipt`` header, keeping at most
``window`` receipts outstanding per connection (1: each sender waits for
each receipt, as ``await client.send(..., receipt=True)`` does). The clock
runs from the first SEND to the last RECEIPT. After each cell the queue is
consumed (not timed), so no broker grows from round to round.

Printed: msg/s per round, the median and the spread (min-max) of each
broker, and durable / RabbitMQ (target: at least 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from _common import (
    HOST,
    TARGETS,
    BenchError,
    Target,
    body_of,
    check_target,
    drain_rest,
    embedded_broker,
    environment_line,
    unique_queue,
)


def _connect(target: Target) -> socket.socket:
    sock = socket.create_connection((HOST, target.port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    login = f"login:{target.login}\npasscode:{target.passcode}\n"
    sock.sendall(f"CONNECT\naccept-version:1.2\nhost:/\n{login}\n\0".encode())
    data = b""
    while b"\0" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise BenchError(f"{target.label} closed the connection at CONNECT")
        data += chunk
    if not data.startswith(b"CONNECTED"):
        raise BenchError(f"{target.label} refused CONNECT: {data[:200]!r}")
    return sock


def _sender(
    sock: socket.socket, destination: str, body: bytes, count: int, window: int, tag: str
) -> None:
    head = f"SEND\ndestination:{destination}\npersistent:true\ncontent-length:{len(body)}\n"
    sent = received = 0
    tail = b""
    while received < count:
        frames = []
        while sent < count and sent - received < window:
            frames.append(f"{head}receipt:{tag}-{sent}\n\n".encode() + body + b"\0")
            sent += 1
        if frames:
            sock.sendall(b"".join(frames))
        data = sock.recv(65536)
        if not data:
            raise BenchError("the broker closed the connection")
        if b"ERROR" in data:
            raise BenchError(f"the broker sent ERROR: {data[:300]!r}")
        data = tail + data
        received += data.count(b"RECEIPT\n")
        tail = data[-7:]  # cannot hold a whole "RECEIPT\n": counted once, next read


def measure(target: Target, count: int, size: int, senders: int, window: int) -> float:
    """msg/s of ``senders`` connections sending ``count`` receipted messages in all."""
    destination = unique_queue("durable", target.name)
    body = body_of(size)
    socks = [_connect(target) for _ in range(senders)]
    share = [count // senders + (1 if i < count % senders else 0) for i in range(senders)]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            _sender(socks[index], destination, body, share[index], window, f"s{index}")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(senders)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    for sock in socks:
        sock.close()
    drained = drain_rest(target, destination, idle=1.0)
    if errors:
        raise BenchError(f"{target.label}: {errors[0]}")
    if drained != count:
        print(f"  note: {target.label} held {drained} of {count} afterwards", file=sys.stderr)
    return count / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--window", default="1,64", help="receipts outstanding per sender")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object per cell")
    args = parser.parse_args()
    windows = [int(w) for w in args.window.split(",")]
    print(environment_line())
    print(
        f"{args.count} messages of {args.size} B per cell, {args.senders} senders, "
        f"every SEND with a receipt; {args.rounds} rounds"
    )
    rates: dict[tuple[str, int], list[float]] = {}
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="durable-bench-") as tmp:
        targets = [
            stack.enter_context(embedded_broker(data_dir=Path(tmp) / "data", name="durable")),
            stack.enter_context(embedded_broker(name="memory")),
        ]
        rabbit = TARGETS["rabbitmq"]
        problem = check_target(rabbit)
        if problem is None:
            targets.append(rabbit)
        else:
            print(f"skipping RabbitMQ: {problem}", file=sys.stderr)
        for round_number in range(args.rounds):
            turn = targets[round_number % len(targets) :] + targets[: round_number % len(targets)]
            for window in windows:
                for target in turn:
                    rate = measure(target, args.count, args.size, args.senders, window)
                    rates.setdefault((target.name, window), []).append(rate)
                    if args.json:
                        cell = {"broker": target.name, "window": window, "round": round_number}
                        print(json.dumps({**cell, "msgs": round(rate)}), flush=True)
        print()
        for window in windows:
            print(f"window {window} per sender ({args.senders * window} receipts outstanding):")
            print(f"  {'broker':<10} {'median msg/s':>13} {'spread':>17}   rounds")
            for target in targets:
                values = rates[(target.name, window)]
                spread = f"{min(values):,.0f}-{max(values):,.0f}"
                rounds = " ".join(f"{v:,.0f}" for v in values)
                median = statistics.median(values)
                print(f"  {target.name:<10} {median:>13,.0f} {spread:>17}   {rounds}")
            if ("rabbitmq", window) in rates:
                ratio = statistics.median(rates[("durable", window)]) / statistics.median(
                    rates[("rabbitmq", window)]
                )
                verdict = "met" if ratio >= 1.0 else "NOT met"
                print(f"  durable / RabbitMQ: {ratio:.2f} (target >= 1.0: {verdict})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
