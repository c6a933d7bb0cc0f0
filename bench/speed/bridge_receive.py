"""The bridge's own cost per message: recorded broker bytes -> STOMP route -> file, no broker.

    .venv/bin/python bench/speed/bridge_receive.py [--count 50000] [--rounds 5]
        [--window 4000] [--profile FILE]

The same recorded RabbitMQ MESSAGE frames as ``bench/speed/receive.py`` (its header
set, 100-byte bodies, 64 KiB reads), handed out by a stream stub that keeps
the prefetch window (it sends the next read only while the client holds
fewer than ``--window`` unacked messages), timed in CPU seconds of the whole
process (every thread: the file sink's writes and fsyncs run in a worker
thread), in one process, rows interleaved, the best of ``--rounds`` kept:

- ``client batches client-individual``: ``async for batch in
  sub.batches()`` and ``await batch.ack()``: what the client itself costs
  a consumer that acks every message, as the bridge's source does;
- ``bridge, fsync``: a :class:`bridges.Route` from a ``stomp`` source
  (client-individual, prefetch and in-flight window ``--window``) to a
  ``file`` sink (JSON lines, each batch of up to 1000 fsynced before its
  messages are acked), as ``bench/speed/bridge_throughput.py`` runs it against a
  broker, the heap frozen as ``bridges run`` does;
- ``bridge, no fsync``: the same with ``fsync = false``: what the route
  costs without the disk.

The gap between the bridge rows and the client row is the route's and the
sink's cost per message, the part of ``bench/speed/bridge_throughput.py``'s
figure that does not depend on a broker sharing the cores. ``--profile``
runs the ``bridge, fsync`` row once under cProfile into FILE. ``--row NAME``
runs only that row (for instruction counts: callgrind over two ``--count``
values, the difference divided by the difference of the counts: start-up
cancels out; making the recorded bytes, about 5.6k instructions a message,
stays in).

The route reaches the stub through the stomp family's connector (patched
for the run): everything above the stream is the code ``bridges run`` uses.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Final

import trio
from receive import (
    RecordedStream,
    best_of_rounds,
    profile_into,
    reads_of,
    recorded_messages,
    recorded_parser,
)

import trio_stomp
from bridges import Context, Route
from bridges.endpoints.file import FileSink, FileSinkConfig
from bridges.endpoints.stomp import StompSource, StompSourceConfig
from bridges.endpoints.stomp import _connection as stomp_connection
from bridges.service import freeze_heap

DESTINATION: Final = "/queue/bench-receive"


def client_batches(reads: list[bytes], count: int, window: int) -> float:
    spent = 0.0

    async def main() -> None:
        nonlocal spent
        stream = RecordedStream(reads, window)
        async with trio_stomp.wrap_stream(stream, heartbeat=(0, 0)) as conn:
            got = 0
            start = time.process_time()
            sub = conn.subscribe(
                DESTINATION, ack="client-individual", headers={"prefetch-count": str(window)}
            )
            async with sub:
                async for batch in sub.batches():
                    await batch.ack()
                    got += len(batch)
                    if got >= count:
                        spent = time.process_time() - start
                        break
            assert got == count, got

    trio.run(main)
    return spent


def bridge(reads: list[bytes], count: int, window: int, fsync: bool) -> float:
    spent = 0.0

    @contextlib.asynccontextmanager
    async def recorded(self: object) -> AsyncIterator[trio_stomp.Client]:
        async with trio_stomp.wrap_stream(
            RecordedStream(reads, window), heartbeat=(0, 0)
        ) as client:
            yield client

    with tempfile.TemporaryDirectory(prefix="bridge-receive-") as out:
        context = Context(route="bench", role="source", base_dir=Path(out))
        original = stomp_connection.Connector.connect
        stomp_connection.Connector.connect = recorded  # type: ignore[method-assign]
        try:
            source = StompSource(
                StompSourceConfig(
                    url="stomp://127.0.0.1:61613",
                    destination=DESTINATION,
                    prefetch=window,
                    heartbeat=(0, 0),
                ),
                context,
            )
            sink = FileSink(FileSinkConfig(path=".", fsync=fsync), context)
            route = Route(
                "bench",
                source,
                sink,
                in_flight=window,
                batch_count=min(window // 2, 1000),
                batch_time=0.005,
            )
            freeze_heap()

            async def main() -> None:
                nonlocal spent
                async with trio.open_nursery() as nursery:
                    start = time.process_time()
                    nursery.start_soon(route.run)
                    while route.stats.written < count:  # noqa: ASYNC110 - a counter
                        await trio.sleep(0.05)  # (CPU time: a wait costs none)
                    spent = time.process_time() - start
                    route.stop()

            trio.run(main)
        finally:
            stomp_connection.Connector.connect = original  # type: ignore[method-assign]
        lines = sum(p.read_bytes().count(b"\n") for p in Path(out).glob("messages-*.jsonl*"))
        assert lines == count, (lines, count)
    return spent


Row = Callable[[list[bytes], int, int], float]
ROWS: Final[dict[str, Row]] = {
    "client batches client-individual": client_batches,
    "bridge, fsync": lambda r, n, w: bridge(r, n, w, fsync=True),
    "bridge, no fsync": lambda r, n, w: bridge(r, n, w, fsync=False),
}


def main(argv: list[str]) -> int:
    parser = recorded_parser(__doc__ or "", rounds=5)
    parser.add_argument("--window", type=int, default=4000)
    parser.add_argument("--row", choices=list(ROWS), help="run only this row")
    args = parser.parse_args(argv)
    reads = reads_of(recorded_messages(args.count))
    if args.profile:
        profile_into(args.profile, bridge, reads, args.count, args.window, True)
        return 0
    rows = {args.row: ROWS[args.row]} if args.row else ROWS
    best = best_of_rounds(rows, args.rounds, reads, args.count, args.window)
    compiled = getattr(trio_stomp.frame, "compiled", False)
    print(
        f"bridge cost per received MESSAGE: {args.count:,} recorded RabbitMQ frames of "
        f"100 B, window {args.window}, best of {args.rounds}; codec "
        f"{'compiled' if compiled else 'pure Python'}"
    )
    client = best.get("client batches client-individual")
    print(f"{'row':<36}{'us/msg':>8}{'over client':>13}")
    for name, spent in best.items():
        extra = (
            ""
            if client is None or spent is client
            else f"{(spent - client) / args.count * 1e6:.2f}"
        )
        print(f"{name:<36}{spent / args.count * 1e6:>8.2f}{extra:>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
