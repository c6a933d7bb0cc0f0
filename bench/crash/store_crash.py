"""Crash test of the durable embedded broker: ``trio-stomp broker --data-dir`` killed mid-stream.

    .venv/bin/python bench/crash/store_crash.py [--kills 10] [--senders 4] [--seed N] [--json]

One data dir (fresh, temporary). ``kills`` times: the broker is started,
``senders`` connections send receipted messages (each body unique) to one
queue, each keeping up to 16 receipts outstanding, while (in half of the
rounds, at random, so the queue also grows) one consumer takes messages and
ACKs each with a receipt; after a random 0.2-1.5 s the broker is
killed with SIGKILL mid-stream. Then the broker is started once more and the
queue drained.

Checked:

- false alarms: a start refused (the store called damaged, or any other
  failure to listen) after a SIGKILL of an undamaged store. Must be 0;
- lost: a message whose RECEIPT came, whose ACK's RECEIPT did not, and that
  the final drain does not deliver. Must be 0.

Printed: messages receipted, ACKs receipted, delivered again (ACKed, but the
ACK's commit had not been confirmed at a kill: the at-least-once repeats),
left (receipted, never ACKed, delivered by the final drain), lost and false
alarms. Exit 1 when anything was lost or a start was refused.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from _crash import HOST, BenchError, Target, start_embedded_broker, stop_process

QUEUE = "/queue/crash"
WINDOW = 16
_RECEIPT = re.compile(rb"receipt-id:([^\n]+)")
_BODY = re.compile(rb"\n\n(m[0-9-]+)\0")
_ACK = re.compile(rb"\nack:([^\n]+)")


def _connect(target: Target) -> socket.socket:
    sock = socket.create_connection((HOST, target.port), timeout=10)
    sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")
    data = b""
    while b"\0" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise BenchError("the broker closed the connection at CONNECT")
        data += chunk
    return sock


def _frames(sock: socket.socket, tail: bytes) -> tuple[list[bytes], bytes]:
    """Whole frames read from ``sock`` (bodies hold no NUL), and what is left over."""
    data = sock.recv(65536)
    if not data:
        raise OSError("closed")
    parts = (tail + data).split(b"\0")
    return [p + b"\0" for p in parts[:-1]], parts[-1]


def _sender(target: Target, name: str, receipted: set[bytes], stop: threading.Event) -> None:
    try:
        sock = _connect(target)
        sent = answered = 0
        tail = b""
        while not stop.is_set():
            frames = []
            while sent - answered < WINDOW:
                body = f"m{name}-{sent}".encode()
                head = f"SEND\ndestination:{QUEUE}\nreceipt:{body.decode()}\n"
                frames.append(f"{head}content-length:{len(body)}\n\n".encode() + body + b"\0")
                sent += 1
            sock.sendall(b"".join(frames))
            got, tail = _frames(sock, tail)
            for frame in got:
                if found := _RECEIPT.search(frame):
                    receipted.add(found.group(1).strip())
                    answered += 1
    except OSError:
        pass  # (the broker was killed)


def _consumer(target: Target, acked: set[bytes], stop: threading.Event) -> None:
    try:
        sock = _connect(target)
        sub = f"SUBSCRIBE\ndestination:{QUEUE}\nid:0\nack:client-individual\n"
        sock.sendall(f"{sub}prefetch-count:{WINDOW}\n\n\0".encode())
        tail = b""
        while not stop.is_set():
            got, tail = _frames(sock, tail)
            acks = []
            for frame in got:
                if frame.startswith(b"MESSAGE"):
                    body = _BODY.search(frame)
                    ack = _ACK.search(frame)
                    if body and ack:
                        receipt = b"a" + body.group(1)
                        acks.append(b"ACK\nid:%s\nreceipt:%s\n\n\0" % (ack.group(1), receipt))
                elif found := _RECEIPT.search(frame):
                    acked.add(found.group(1).strip()[1:])
            if acks:
                sock.sendall(b"".join(acks))
    except OSError:
        pass


def _drain(target: Target) -> set[bytes]:
    sock = _connect(target)
    sock.sendall(f"SUBSCRIBE\ndestination:{QUEUE}\nid:0\nack:auto\n\n\0".encode())
    sock.settimeout(1.5)
    bodies: set[bytes] = set()
    tail = b""
    try:
        while True:
            got, tail = _frames(sock, tail)
            bodies.update(m.group(1) for f in got if (m := _BODY.search(f)))
    except TimeoutError:
        pass
    sock.close()
    return bodies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    receipted: set[bytes] = set()
    acked: set[bytes] = set()
    false_alarms = 0
    with tempfile.TemporaryDirectory(prefix="store-crash-") as tmp:
        data_dir = Path(tmp) / "data"
        for kill in range(args.kills):
            try:
                proc, target = start_embedded_broker(data_dir)
            except BenchError as exc:
                print(f"refused after a SIGKILL: {exc}", file=sys.stderr)
                false_alarms += 1
                break
            stop = threading.Event()
            threads = [
                threading.Thread(target=_sender, args=(target, f"{kill}-{i}", receipted, stop))
                for i in range(args.senders)
            ]
            if rng.random() < 0.5:  # (else the queue grows: the store holds thousands)
                threads.append(threading.Thread(target=_consumer, args=(target, acked, stop)))
            for thread in threads:
                thread.start()
            time.sleep(rng.uniform(0.2, 1.5))
            proc.kill()
            proc.wait()
            stop.set()
            for thread in threads:
                thread.join()
        try:
            proc, target = start_embedded_broker(data_dir)
        except BenchError as exc:
            print(f"refused after the last SIGKILL: {exc}", file=sys.stderr)
            return 1
        try:
            drained = _drain(target)
        finally:
            stop_process(proc)
    lost = receipted - acked - drained
    figures = {
        "seed": seed,
        "kills": args.kills,
        "receipted": len(receipted),
        "acks_receipted": len(acked),
        "delivered_again": len(drained & acked),
        "left": len(drained - acked),
        "lost": len(lost),
        "false_alarms": false_alarms,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(" ".join(f"{name}={value}" for name, value in figures.items()))
    return 0 if not lost and not false_alarms else 1


if __name__ == "__main__":
    sys.exit(main())
