"""``trio-stomp listen``: print the messages of a destination as they arrive."""

from __future__ import annotations

import argparse
import base64
import json
from typing import Any, Final

import trio

from .._connect import connect
from .._errors import SubscriptionOverflow
from .._message import Message
from ..frame import PREFETCH_HEADERS
from ..util import printable
from . import _common as common

#: Headers the command sets itself; -H may not give them.
_RESERVED: Final = {
    "id": "the command numbers its subscription",
    "destination": "it is the DEST argument",
    "ack": "use --ack",
    "receipt": "the command asks for receipts itself",
}
#: MESSAGE headers left out of the --verbose line: bookkeeping, not content.
#: (RabbitMQ passes the SEND's ``receipt`` on.)
_QUIET_HEADERS: Final = frozenset(
    {"destination", "subscription", "ack", "content-length", "receipt"}
)
#: The largest prefetch window --count asks for.
_MAX_WINDOW: Final = 1000
#: The most messages written (then acked) at once: small enough that acks
#: flow back while the broker still has window left, so it never pauses.
_MAX_BATCH: Final = 100

_DESCRIPTION = """\
Subscribe to DEST and print each message as it arrives, until Ctrl-C (or
until --count messages were printed).

Output: each body as text (decoded with the charset of its content-type,
UTF-8 by default; undecodable bytes are shown as \\xNN escapes), followed by a
line break unless the body ends with one. --verbose puts a header line
"-- DEST name:value ..." before each body. --json prints one JSON object per
line instead:

  {"destination": "/queue/a", "message_id": "...", "headers": {...},
   "body": "hello", "base64": false}

where "headers" keeps the first value of a repeated header, and "body" is
the body as UTF-8 text, or base64 with "base64": true when it is not valid
UTF-8. Output is flushed after every message, so pipes work
(`trio-stomp listen /queue/a --json | jq .body`); when the reader of the pipe
goes away (`| head`), listen stops quietly with exit status 0.

Acknowledgement (--ack): by default (client-individual) each message is
acknowledged once it was printed, and the broker sends at most 1000 messages
ahead of the printing (the prefetch window; with --count N at most N), so a
slow terminal or pipe slows the broker down and nothing is lost: messages not
printed when listen stops go back to the queue. "client" does the same with
one cumulative ACK per write. "auto" lets the broker count a message as
consumed as soon as it sends it: the fastest, but a deep queue can then
arrive faster than it is printed, and listen stops with an error (status 1)
once 10000 messages wait; those are lost, as are any not yet printed at
Ctrl-C."""

_EPILOG = f"""\
examples:
  trio-stomp listen /queue/a
  trio-stomp listen /queue/a --count 1
  trio-stomp listen /topic/news --json | jq -r .body
  trio-stomp listen /queue/a -H prefetch-count:10          (RabbitMQ)
  trio-stomp listen /queue/a -H "selector:kind = 'urgent'" (ActiveMQ)
  trio-stomp listen /queue/a -u stomp+ssl://broker.example:61614 --cafile ca.pem

{common.EXIT_STATUS_HELP}"""


def add_listen(subcommands: Any) -> None:
    """Add ``trio-stomp listen`` to the subcommands."""
    parser = subcommands.add_parser(
        "listen",
        help="print the messages of a destination as they arrive",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("destination", metavar="DEST", help="what to subscribe to, e.g. /queue/a")
    common.add_broker_options(parser)
    parser.add_argument(
        "--ack",
        choices=("client-individual", "client", "auto"),
        default="client-individual",
        help="acknowledgement mode (default client-individual: each message once printed)",
    )
    parser.add_argument(
        "-n",
        "--count",
        metavar="N",
        type=common.positive_int,
        help="exit (status 0) after N messages",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json", action="store_true", help="print one JSON object per message and line"
    )
    output.add_argument(
        "-v", "--verbose", action="store_true", help="print a header line before each body"
    )
    common.add_header_option(
        parser,
        "add a SUBSCRIBE header, e.g. -H prefetch-count:10 (RabbitMQ) or "
        "-H \"selector:type = 'a'\" (ActiveMQ); may be repeated",
    )
    parser.set_defaults(run=run_listen)


def run_listen(args: argparse.Namespace) -> int:
    """Run ``trio-stomp listen`` with the parsed ``args``; return the exit status."""
    return common.run("listen", args.url, lambda: _listen(args))


def _subscription(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The headers of the SUBSCRIBE.

    Raises:
      UsageError: a reserved header.
    """
    headers: list[tuple[str, str]] = list(args.headers)
    for name, _ in headers:
        if name in _RESERVED:
            raise common.UsageError(f"-H {name}: not allowed here ({_RESERVED[name]})")
    given = any(name in PREFETCH_HEADERS for name, _ in headers)
    if args.count is not None and args.ack != "auto" and not given:
        # The rest of a queue stays with the broker, for other consumers.
        window = str(min(args.count, _MAX_WINDOW))
        headers += [(name, window) for name in PREFETCH_HEADERS]
    return headers


async def _listen(args: argparse.Namespace) -> int:
    common.check_url(args.url)
    headers = _subscription(args)
    ssl_context = common.tls_context("listen", args)
    formatter = _json if args.json else _verbose if args.verbose else _plain
    async with connect(args.url, ssl_context=ssl_context) as client:
        async with client.subscribe(args.destination, ack=args.ack, headers=headers) as messages:
            send, receive = trio.open_memory_channel[tuple[bytes, Message]](_MAX_WINDOW)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_print, receive, args.ack)
                async with send:
                    taken = 0
                    try:
                        async for message in messages:
                            await send.send((formatter(message), message))
                            taken += 1
                            if taken == args.count:
                                break
                    except SubscriptionOverflow:
                        raise SubscriptionOverflow(
                            f"{messages.buffer_size} messages arrived faster than they could "
                            "be printed, and --ack auto cannot slow the broker down; the "
                            "default --ack client-individual can"
                        ) from None
    return common.EXIT_OK


async def _print(receive: trio.MemoryReceiveChannel[tuple[bytes, Message]], ack: str) -> None:
    """Write what has arrived (all of it in one write: one thread hop), then ack it.

    Nothing waits for more to come: each message is flushed as soon as the
    writer is free, so the output goes line by line, but a burst of messages
    costs one write, not one each.
    """
    output = common.Output()
    async with receive:
        async for first in receive:
            batch = [first]
            while len(batch) < _MAX_BATCH:
                try:
                    batch.append(receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            await output.write(b"".join(data for data, _ in batch))
            if ack == "client":
                await batch[-1][1].ack()  # cumulative: covers the whole batch
            elif ack == "client-individual":
                for _, message in batch:
                    await message.ack()


def _text(message: Message) -> str:
    try:
        return message.text
    except (UnicodeDecodeError, LookupError):
        return message.body.decode("utf-8", "backslashreplace")


def _plain(message: Message) -> bytes:
    text = _text(message)
    if not text.endswith("\n"):
        text += "\n"
    return text.encode("utf-8", "backslashreplace")


def _compact(value: str) -> str:
    """A header value as is when it is one plain word, else as a JSON string
    (with every control character escaped: see :func:`~trio_stomp.util.printable`)."""
    if value and value.isprintable() and not any(c.isspace() for c in value):
        return value
    return printable(json.dumps(value, ensure_ascii=False), style="json")


def _verbose(message: Message) -> bytes:
    # Names and values are the sender's: a header name may hold ESC ] 52 ... too.
    fields = " ".join(
        f"{printable(name)}:{_compact(value)}"
        for name, value in message.headers.items()
        if name not in _QUIET_HEADERS and (name, value) != ("redelivered", "false")
    )
    line = f"-- {printable(message.destination)} {fields}".rstrip() + "\n"
    return line.encode("utf-8", "backslashreplace") + _plain(message)


def _json(message: Message) -> bytes:
    headers: dict[str, str] = {}
    for name, value in message.headers.items():
        headers.setdefault(name, value)
    try:
        body, is_base64 = message.body.decode("utf-8"), False
    except UnicodeDecodeError:
        body, is_base64 = base64.b64encode(message.body).decode("ascii"), True
    record = {
        "destination": message.destination,
        "message_id": message.message_id,
        "headers": headers,
        "body": body,
        "base64": is_base64,
    }
    line = printable(json.dumps(record, ensure_ascii=False), style="json")  # (C1, bidi too)
    return line.encode("utf-8", "backslashreplace") + b"\n"
