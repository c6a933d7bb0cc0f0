"""``trio-stomp listen``: print the messages of a destination as they arrive."""

from __future__ import annotations

import argparse
import base64
import json
from typing import Any, Final

import trio

from . import _cli_common as common
from ._client import connect
from ._message import Message
from ._subscription import WINDOW_HEADERS

#: Headers the command sets itself; -H may not give them.
_RESERVED: Final = {
    "id": "the command numbers its subscription",
    "destination": "it is the DEST argument",
    "ack": "use --ack",
    "receipt": "the command asks for receipts itself",
}
#: MESSAGE headers left out of the --verbose line: bookkeeping, not content.
_QUIET_HEADERS: Final = frozenset({"destination", "subscription", "ack", "content-length"})
#: The largest prefetch window --count asks for.
_MAX_WINDOW: Final = 1000

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

Acknowledgement (--ack): with "auto" (the default) the broker counts a
message as consumed once it is sent to us. With "client-individual" (or
"client") each message is acknowledged only after it was printed; messages
not printed when listen stops go back to the queue. With --count N and
"auto", listen acknowledges after printing too, and asks the broker for at
most N messages at a time, so exactly N messages are taken off a queue."""

_EPILOG = f"""\
examples:
  trio-stomp listen /queue/a
  trio-stomp listen /queue/a --count 1 --ack client-individual
  trio-stomp listen /topic/news --json | jq -r .body
  trio-stomp listen /queue/a -H prefetch-count:10          (RabbitMQ)
  trio-stomp listen /queue/a -H "selector:priority > 5"    (ActiveMQ)

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
    common.add_url_option(parser)
    parser.add_argument(
        "--ack",
        choices=("auto", "client", "client-individual"),
        default="auto",
        help="acknowledgement mode (default auto); client modes ack each message after printing it",
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
    return common.run("listen", lambda: _listen(args))


def _subscription(args: argparse.Namespace) -> tuple[str, list[tuple[str, str]]]:
    """The ack mode and headers of the SUBSCRIBE.

    Raises:
      UsageError: a reserved header.
    """
    headers: list[tuple[str, str]] = list(args.headers)
    for name, _ in headers:
        if name in _RESERVED:
            raise common.UsageError(f"-H {name}: not allowed here ({_RESERVED[name]})")
    ack: str = args.ack
    if args.count is not None and ack == "auto":
        # An auto subscription takes everything the broker sends, prefetched
        # or not: --count 1 could empty a queue and print one message.
        ack = "client-individual"
        if not any(name in WINDOW_HEADERS for name, _ in headers):
            window = str(min(args.count, _MAX_WINDOW))
            headers += [(name, window) for name in WINDOW_HEADERS]
    return ack, headers


async def _listen(args: argparse.Namespace) -> int:
    common.check_url(args.url)
    ack, headers = _subscription(args)
    formatter = _json if args.json else _verbose if args.verbose else _plain
    acking = ack != "auto"
    async with connect(args.url) as client:
        async with client.subscribe(args.destination, ack=ack, headers=headers) as messages:
            send, receive = trio.open_memory_channel[tuple[bytes, Message]](_MAX_WINDOW)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_print, receive, acking)
                async with send:
                    taken = 0
                    async for message in messages:
                        await send.send((formatter(message), message))
                        taken += 1
                        if taken == args.count:
                            break
    return common.EXIT_OK


async def _print(receive: trio.MemoryReceiveChannel[tuple[bytes, Message]], acking: bool) -> None:
    """Write what arrived (all of it at once: one thread hop each), then ack it.

    Nothing waits for more to come: each message is flushed as soon as the
    writer is free, so the output goes line by line, but a burst of messages
    costs one write, not one each.
    """
    output = common.Output()
    async with receive:
        async for first in receive:
            batch = [first]
            while True:
                try:
                    batch.append(receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            await output.write(b"".join(data for data, _ in batch))
            if acking:
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
    """A header value as is when it is one plain word, else as a JSON string."""
    if value and value.isprintable() and not any(c.isspace() for c in value):
        return value
    return json.dumps(value, ensure_ascii=False)


def _verbose(message: Message) -> bytes:
    fields = " ".join(
        f"{name}:{_compact(value)}"
        for name, value in message.headers.items()
        if name not in _QUIET_HEADERS
    )
    line = f"-- {message.destination} {fields}".rstrip() + "\n"
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
    return json.dumps(record, ensure_ascii=False).encode("utf-8", "backslashreplace") + b"\n"
