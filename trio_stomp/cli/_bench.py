"""``trio-stomp bench``: message throughput through any broker."""

from __future__ import annotations

import argparse
import secrets
import ssl
import sys
from typing import Any, Final, TextIO

import attrs
import trio

from .._connect import connect
from .._errors import ConnectionLost
from .._url import Endpoint
from . import _common as common

#: On RabbitMQ a /queue/ outlives its consumers unless declared auto-delete.
#: SEND and SUBSCRIBE must declare it alike or the broker refuses. (Not
#: durable:false: RabbitMQ then also makes it exclusive to one connection,
#: and RabbitMQ 4 deprecates transient non-exclusive queues.)
_RABBITMQ_TEMPORARY: Final = (("auto-delete", "true"),)
_BAR_WIDTH: Final = 30

_DESCRIPTION = """\
Measure message throughput through a broker: send COUNT messages of SIZE
bytes to a fresh queue on one connection while receiving them on another,
then print a table (on stdout) of the messages per second and MB per second
(1 MB = 10^6 bytes of bodies) each way.

"sent" runs from the first SEND until the broker's RECEIPT for the last one
(the others are sent without a receipt); "received" from the first SEND until
the last message arrived (and, with a client ack mode, was acknowledged).
Both connections run in this one process and share one CPU core with each
other (and, on the same machine, with the broker).

Progress goes to stderr: a live bar on a terminal, a line every second
otherwise. The queue is named /queue/trio-stomp-bench-<random> unless --dest
is given. On RabbitMQ it is declared auto-delete, so it goes away afterwards;
other brokers (ActiveMQ) may keep the empty queue."""

_EPILOG = f"""\
examples:
  trio-stomp bench
  trio-stomp bench --count 100000 --size 1024 --ack client-individual
  trio-stomp bench -u stomp://guest:guest@127.0.0.1:61613/?vhost=/

{common.EXIT_STATUS_HELP}"""


def _size(text: str) -> int:
    """argparse ``type`` for --size: a whole number of bytes, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a size in bytes (0 or more), got {text!r}")
    return value


def add_bench(subcommands: Any) -> None:
    """Add ``trio-stomp bench`` to the subcommands."""
    parser = subcommands.add_parser(
        "bench",
        help="measure message throughput through a broker",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common.add_broker_options(parser)
    parser.add_argument(
        "-n",
        "--count",
        metavar="N",
        type=common.positive_int,
        default=10_000,
        help="how many messages (default 10000)",
    )
    parser.add_argument(
        "-s",
        "--size",
        metavar="BYTES",
        type=_size,
        default=100,
        help="the size of each message body (default 100)",
    )
    parser.add_argument(
        "--ack",
        choices=("auto", "client", "client-individual"),
        default="auto",
        help="the consumer's acknowledgement mode (default auto); client modes ack every message",
    )
    parser.add_argument(
        "--dest",
        metavar="DEST",
        help="the destination to use instead of a fresh queue (it should be empty)",
    )
    parser.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    """Run ``trio-stomp bench`` with the parsed ``args``; return the exit status."""
    return common.run("bench", args.url, lambda: _bench(args))


@attrs.define
class _Counts:
    count: int
    start: float = 0.0
    sent: int = 0
    received: int = 0
    sent_time: float | None = None
    received_time: float | None = None


async def _bench(args: argparse.Namespace) -> int:
    common.check_url(args.url)
    ssl_context = common.tls_context("bench", args)
    endpoint = Endpoint.from_url(args.url)
    destination = args.dest or f"/queue/trio-stomp-bench-{secrets.token_hex(4)}"
    counts = _Counts(args.count)
    progress = _Progress(counts, sys.stderr)
    try:
        await _run(args, destination, endpoint, ssl_context, counts, progress)
    finally:
        progress.finish()
    print(_table(counts, args.size), flush=True)
    return common.EXIT_OK


async def _run(
    args: argparse.Namespace,
    destination: str,
    endpoint: Endpoint,
    ssl_context: ssl.SSLContext | None,
    counts: _Counts,
    progress: _Progress,
) -> None:
    body = b"x" * args.size
    async with (
        connect(args.url, ssl_context=ssl_context) as consumer,
        connect(args.url, ssl_context=ssl_context) as producer,
    ):
        server = consumer.server or "unknown server"
        headers: tuple[tuple[str, str], ...] = ()
        if server.startswith("RabbitMQ/") and destination.startswith("/queue/"):
            headers = _RABBITMQ_TEMPORARY
        common.say(
            f"bench: {args.count} messages of {args.size} bytes to {destination} "
            f"(ack {args.ack}) on {endpoint.host}:{endpoint.port} ({server})"
        )
        # RabbitMQ ignores the prefetch window of auto subscriptions: room
        # for every message, so that a consumer running behind cannot overflow.
        buffer_size = max(args.count, 10_000) if args.ack == "auto" else None
        async with consumer.subscribe(
            destination, ack=args.ack, headers=headers, buffer_size=buffer_size, receipt=True
        ) as messages:
            counts.start = trio.current_time()

            all_sent = trio.Event()

            async def produce() -> None:
                last = args.count - 1
                for i in range(args.count):
                    await producer.send(destination, body, headers=headers, receipt=i == last)
                    counts.sent += 1
                counts.sent_time = trio.current_time() - counts.start
                all_sent.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(produce)
                nursery.start_soon(progress.run)
                acking = args.ack != "auto"
                async for message in messages:
                    if acking:
                        await message.ack()
                    counts.received += 1
                    if counts.received == args.count:
                        break
                else:
                    raise ConnectionLost(f"the subscription ended after {counts.received} messages")
                counts.received_time = trio.current_time() - counts.start
                await all_sent.wait()  # the last RECEIPT can come after the last MESSAGE
                nursery.cancel_scope.cancel()
                progress.show()


def _table(counts: _Counts, size: int) -> str:
    rows = [f"{'':10}{'messages':>10}{'elapsed s':>11}{'msgs/s':>12}{'MB/s':>10}"]
    for name, seconds in (("sent", counts.sent_time), ("received", counts.received_time)):
        assert seconds is not None
        rate = counts.count / seconds if seconds > 0 else float("inf")
        rows.append(
            f"{name:10}{counts.count:>10}{seconds:>11.3f}{rate:>12,.0f}{rate * size / 1e6:>10.2f}"
        )
    return "\n".join(rows)


class _Progress:
    """Progress on stderr: a bar redrawn in place on a terminal, else a line a second."""

    def __init__(self, counts: _Counts, stream: TextIO) -> None:
        self._counts = counts
        self._stream = stream
        self._tty = stream.isatty()
        self._drawn = False

    async def run(self) -> None:
        interval = 0.1 if self._tty else 1.0
        while True:
            await trio.sleep(interval)
            self.show()

    def show(self) -> None:
        """Draw the bar, or write a line."""
        counts = self._counts
        elapsed = trio.current_time() - counts.start
        if self._tty:
            done = counts.received * _BAR_WIDTH // counts.count
            bar = "#" * done + "-" * (_BAR_WIDTH - done)
            self._stream.write(
                f"\r[{bar}] {counts.received * 100 // counts.count:3d}%  sent {counts.sent}  "
                f"received {counts.received} of {counts.count}  {elapsed:.1f} s "
            )
            self._drawn = True
        else:
            self._stream.write(
                f"{common.PROG}: bench: {elapsed:.1f} s: sent {counts.sent}, "
                f"received {counts.received} of {counts.count}\n"
            )
        self._stream.flush()

    def finish(self) -> None:
        """End the bar's line, so that what follows starts on a line of its own."""
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False
