"""The client's own cost per received MESSAGE: recorded broker bytes, no socket.

    .venv/bin/python bench/speed/receive.py [--count 50000] [--rounds 7] [--profile FILE]
        [--json PATH]

Feeds the bytes a broker sends (RabbitMQ's MESSAGE header set: subscription,
destination, message-id, redelivered, ack, content-length; 100-byte bodies;
the EOL RabbitMQ puts after each frame) in 64 KiB reads, and times what the
client does with them, in one process, CPU time (``time.process_time``):

- ``parse``: :class:`~trio_stomp.frame.FrameParser` alone (``feed`` per read).
- ``client auto`` / ``client client-individual``: the whole client path from
  the stream's ``receive_some`` to the user's ``async for`` (and
  ``await message.ack()``, whose ACK bytes go to the stream's ``send_all``):
  ``wrap_stream`` over a stream stub that answers CONNECT and DISCONNECT and
  hands out the recorded reads once SUBSCRIBE arrives. Trio's scheduling
  (the reader task, the consumer task, the writer task) is in it.
- ``batches auto`` / ``batches client-individual``: the same with ``async
  for batch in sub.batches()``, client-individual settling each batch with
  ``await batch.ack()`` (one ACK per message, in one write).
- ``stomp.py parse`` and ``stomp.py dispatch``: stomp.py 9's receive loop
  (its ``BaseTransport.__read`` split and ``utils.parse_frame``, as in
  ``bench/speed/codec.py``), then ``process_frame`` to a listener's ``on_message``;
  ``stomp.py dispatch + ack`` adds ``conn.ack(frame.headers["ack"])``
  through a transport whose ``send`` drops the bytes.

Rows run interleaved, ``--rounds`` times each, and the best (lowest CPU) is
kept: on a shared machine the minimum is the cost, the rest is noise. The
first line says whether the codec ran compiled (``scripts/compile-codec``).
The stream stub keeps to the prefetch window (``DEFAULT_PREFETCH``) as a
broker does: with acks, a read goes out only while fewer than the window's
messages are unacked; an ``auto`` subscription gets every read at once, and
so a buffer for every message.
Garbage collection stays on (a receive loop runs with it). ``--profile``
runs the client auto row once under cProfile into FILE. ``--json PATH``
writes the rows (``bench/_base.write_report``: CPU us per message, series
trio_stomp and stomp.py, each trio_stomp row beside the stomp.py row it is
compared with).
"""

from __future__ import annotations

import argparse
import cProfile
import math
import re
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import stomp
import stomp.protocol
import stomp.transport
import trio
from _common import bench_command, environment_line, write_report
from codec import StompPyReceiver

import trio_stomp
from trio_stomp.frame import FrameParser

READ: Final = 64 * 1024
SESSION: Final = "session-sk6IWufXN4R__fsP0pWCcw"
DESTINATION: Final = "/queue/bench-receive"
_WINDOW: Final = re.compile(rb"\nprefetch-count:(\d+)\n")
_RECEIPT: Final = re.compile(rb"DISCONNECT\n(?:[^\n]*\n)*?receipt:([^\n]*)\n")


def recorded_messages(count: int, size: int = 100) -> bytes:
    """``count`` MESSAGE frames as RabbitMQ 3.10 sends them (headers in its order)."""
    body = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    frames = []
    for n in range(1, count + 1):
        tag = f"T_1@@{SESSION}@@{n}"
        head = (
            f"MESSAGE\nsubscription:1\ndestination:{DESTINATION}\nmessage-id:{tag}\n"
            f"redelivered:false\nack:{tag}\ncontent-length:{size}\n\n"
        )
        frames.append(head.encode() + body + b"\0\n")
    return b"".join(frames)


def reads_of(data: bytes) -> list[bytes]:
    """``data`` cut into 64 KiB reads, at whatever byte the cut falls on."""
    return [data[i : i + READ] for i in range(0, len(data), READ)]


class RecordedStream(trio.abc.Stream):
    """A broker made of recorded bytes: CONNECTED for CONNECT, the reads after
    SUBSCRIBE, a RECEIPT for DISCONNECT; what the client writes is counted.

    Like a broker, it keeps to the subscription's prefetch window when it
    acks: no further read goes out while ``window`` messages (the
    SUBSCRIBE's ``prefetch-count`` unless given) are unacked, a read's
    messages counted by the frames it ends. ``auto``: every read at once, as
    a broker pushes an auto subscription's messages. A write of ACKs alone
    needs no answer, and costs the client no more than a checkpoint."""

    def __init__(self, reads: list[bytes], window: int | None = None) -> None:
        self._reads = reads
        self._next = 0  # the next read to hand out
        self._send, self._receive = trio.open_memory_channel[bytes](math.inf)
        self.written = 0
        self.subscribed = False
        self._window = window  # None until SUBSCRIBE: then None for auto
        self._unacked = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        data = bytes(data)
        self.written += len(data)
        if data.startswith(b"ACK\n") and b"DISCONNECT\n" not in data:
            self._unacked -= data.count(b"ACK\nid:")
            self._release()
            return
        if data.startswith(b"CONNECT\n"):
            self._send.send_nowait(
                f"CONNECTED\nserver:RabbitMQ/3.10.8\nsession:{SESSION}\n"
                "heart-beat:0,0\nversion:1.2\n\n\0\n".encode()
            )
        if b"SUBSCRIBE\n" in data and not self.subscribed:
            self.subscribed = True
            window = _WINDOW.search(data)
            if b"\nack:auto\n" in data:
                self._window = None
            elif self._window is None and window:
                self._window = int(window.group(1))
        self._unacked -= data.count(b"ACK\nid:")
        self._release()
        match = _RECEIPT.search(data)
        if match:
            self._send.send_nowait(b"RECEIPT\nreceipt-id:" + match.group(1) + b"\n\n\0")

    def _release(self) -> None:
        """Hand out the next reads while the window has room (all of them for auto)."""
        while self.subscribed and self._next < len(self._reads):
            if self._window is not None and self._unacked >= self._window:
                break
            chunk = self._reads[self._next]
            self._next += 1
            self._unacked += chunk.count(b"\0")
            self._send.send_nowait(chunk)

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await self._receive.receive()

    async def aclose(self) -> None:
        self._send.close()
        await trio.lowlevel.checkpoint()


# -- the rows: each returns the CPU seconds of its timed part ----------------------


def parse_only(reads: list[bytes], count: int) -> float:
    parser = FrameParser("1.2")
    feed = parser.feed
    got = 0
    start = time.process_time()
    for chunk in reads:
        got += len(feed(chunk))
    spent = time.process_time() - start
    assert got == 2 * count, got  # each frame and the EOL after it
    return spent


def client(reads: list[bytes], count: int, ack: str, batches: bool = False) -> float:
    spent = 0.0

    async def main() -> None:
        nonlocal spent
        stream = RecordedStream(reads)
        async with trio_stomp.wrap_stream(stream, heartbeat=(0, 0)) as conn:
            got = 0
            start = time.process_time()
            # The stub ignores the prefetch window: a buffer for every message.
            subscription = conn.subscribe(DESTINATION, ack=ack, buffer_size=count)
            async with subscription as sub:
                if batches:
                    async for batch in sub.batches():
                        if ack != "auto":
                            await batch.ack()
                        got += len(batch)
                        if got >= count:
                            spent = time.process_time() - start
                            break
                else:
                    async for message in sub:
                        if ack != "auto":
                            await message.ack()
                        got += 1
                        if got == count:
                            spent = time.process_time() - start
                            break
            assert got == count, got

    trio.run(main)
    return spent


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, protocol: Any) -> None:
        self.got = 0
        self.protocol = protocol

    def on_message(self, frame: Any) -> None:
        if self.protocol is not None:
            self.protocol.ack(frame.headers["ack"])
        self.got += 1


class _NullTransport(stomp.transport.BaseTransport):  # type: ignore[misc]
    def send(self, encoded_frame: bytes) -> None:
        pass


def stomp_py(reads: list[bytes], count: int, dispatch: bool, ack: bool) -> float:
    receiver = StompPyReceiver()
    transport = _NullTransport()
    protocol = stomp.protocol.Protocol12(transport, (0, 0)) if ack else None
    listener = _Listener(protocol)
    transport.set_listener("bench", listener)
    got = 0
    start = time.process_time()
    for chunk in reads:
        for frame in receiver.feed(chunk):
            if dispatch:
                transport.process_frame(frame, None)
            elif frame.cmd == "MESSAGE":
                got += 1
    spent = time.process_time() - start
    assert (listener.got if dispatch else got) == count
    return spent


ROWS: Final[dict[str, Callable[[list[bytes], int], float]]] = {
    "trio_stomp parse": parse_only,
    "trio_stomp client auto": lambda r, n: client(r, n, "auto"),
    "trio_stomp client client-individual": lambda r, n: client(r, n, "client-individual"),
    "stomp.py parse": lambda r, n: stomp_py(r, n, dispatch=False, ack=False),
    "stomp.py dispatch (auto)": lambda r, n: stomp_py(r, n, dispatch=True, ack=False),
    "stomp.py dispatch + ack": lambda r, n: stomp_py(r, n, dispatch=True, ack=True),
}
BATCH_ROWS: Final[dict[str, Callable[[list[bytes], int], float]]] = {
    "trio_stomp batches auto": lambda r, n: client(r, n, "auto", batches=True),
    "trio_stomp batches client-individual": lambda r, n: client(
        r, n, "client-individual", batches=True
    ),
}


def best_of_rounds(
    rows: Mapping[str, Callable[..., float]], rounds: int, *args: Any
) -> dict[str, float]:
    """Each row's lowest CPU seconds over ``rounds`` rounds, the rows interleaved in each:
    on a shared machine the minimum is the cost, the rest is noise."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, row in rows.items():
            spent = row(*args)
            best[name] = min(best.get(name, spent), spent)
    return best


def recorded_parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """The options of a bench on recorded frames: --count, --rounds, --profile, --json."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--profile", metavar="FILE")
    parser.add_argument("--json", metavar="PATH", help="write the figures there as JSON")
    return parser


def profile_into(path: str, row: Callable[..., object], *args: Any) -> None:
    """``row(*args)`` once under cProfile, its statistics written to ``path``."""
    profiler = cProfile.Profile()
    profiler.runcall(row, *args)
    profiler.dump_stats(path)


def main(argv: list[str]) -> int:
    args = recorded_parser(__doc__ or "", rounds=7).parse_args(argv)
    reads = reads_of(recorded_messages(args.count))
    if args.profile:
        profile_into(args.profile, client, reads, args.count, "auto")
        return 0
    rows = dict(ROWS)
    if hasattr(trio_stomp.Subscription, "batches"):
        rows.update(BATCH_ROWS)
    best = best_of_rounds(rows, args.rounds, reads, args.count)
    print(environment_line())
    print(
        f"client cost per received MESSAGE: {args.count:,} recorded RabbitMQ frames of "
        f"100 B in 64 KiB reads, best of {args.rounds}; CPU us per message"
    )
    print(f"{'row':<40}{'us/msg':>8}{'vs stomp.py':>13}")
    for name, spent in best.items():
        us = spent / args.count * 1e6
        other = PEERS.get(name)
        shown = f"{spent / best[other]:.2f}x" if other else ""
        print(f"{name:<40}{us:>8.2f}{shown:>13}")
    if args.json:
        write_report(
            args.json,
            bench="receive",
            command=bench_command(__file__, argv),
            unit="CPU us per message",
            rows=report_rows(best, args.count),
        )
    return 0


#: The stomp.py row each trio_stomp row is compared with.
PEERS: Final = {
    "trio_stomp parse": "stomp.py parse",
    "trio_stomp client auto": "stomp.py dispatch (auto)",
    "trio_stomp batches auto": "stomp.py dispatch (auto)",
    "trio_stomp client client-individual": "stomp.py dispatch + ack",
    "trio_stomp batches client-individual": "stomp.py dispatch + ack",
}


def report_rows(best: dict[str, float], count: int) -> list[dict[str, Any]]:
    """One position per trio_stomp row (``label``: what it does), with a trio_stomp bar and
    the bar of the stomp.py row it is compared with."""
    rows: list[dict[str, Any]] = []
    for name, peer in PEERS.items():
        if name not in best:
            continue
        label = name.removeprefix("trio_stomp ")
        ours = best[name] / count * 1e6
        theirs = best[peer] / count * 1e6
        rows.append(
            {
                "series": "trio_stomp",
                "label": label,
                "value": round(ours, 3),
                "vs_stomp_py": round(ours / theirs, 3),
            }
        )
        rows.append(
            {"series": "stomp.py 9", "label": label, "value": round(theirs, 3), "row": peer}
        )
    return rows


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
