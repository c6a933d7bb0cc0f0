"""``trio-stomp send``: send files, stdin, or each of their lines as messages."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import trio

from .._connect import connect
from . import _common as common

#: Headers the command sets itself; -H may not give them.
_RESERVED: Final = {
    "destination": "it is the DEST argument",
    "receipt": "use --receipt/--no-receipt",
    "transaction": "send does not use transactions",
    "content-length": "it is always the body's length",
}
_CHUNK: Final = 64 * 1024

_DESCRIPTION = """\
Send messages to DEST (for example /queue/orders or /topic/news).

Each FILE is one message, its bytes unchanged; "-" (or no FILE at all) is
standard input. With --lines, every non-empty line of the input is a message
of its own (without its line ending), sent as soon as it is read, so
`tail -f app.log | trio-stomp send --lines /topic/logs` works.

Each message waits for the broker's RECEIPT before the next is sent, so when
the command exits 0 every message has reached the broker. --no-receipt sends
without waiting, which is much faster for many messages; the receipt of the
final DISCONNECT then still confirms that all of them arrived.

The number of messages sent is reported on stderr (not with -q)."""

_EPILOG = f"""\
examples:
  trio-stomp send /queue/a order.json --content-type application/json
  echo hello | trio-stomp send /queue/a
  trio-stomp send /queue/a --body hello --body world
  seq 1000 | trio-stomp send --lines --no-receipt /queue/numbers
  STOMP_URL=stomp://guest:guest@127.0.0.1:61613/?vhost=/ trio-stomp send /queue/a -b hi

{common.EXIT_STATUS_HELP}"""


class _IntermixedParser(argparse.ArgumentParser):
    """Lets options come between DEST and the FILEs: ``send DEST -H k:v FILE``.

    Plain argparse takes DEST and FILE... at their first position, so a FILE
    after an option would be "unrecognized". ``parse_known_intermixed_args``
    parses options first; it calls ``parse_known_args`` itself, hence the flag.
    """

    _intermixing = False

    def parse_known_args(  # type: ignore[override]  # narrower than argparse's overloads
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def add_send(subcommands: Any) -> None:
    """Add ``trio-stomp send`` to the subcommands."""
    parser = subcommands.add_parser(
        "send",
        help="send files, stdin or lines as messages",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("destination", metavar="DEST", help="where to send, e.g. /queue/a")
    parser.add_argument(
        "files",
        metavar="FILE",
        nargs="*",
        help='a file to send as one message; "-" is standard input (the default)',
    )
    common.add_broker_options(parser)
    parser.add_argument(
        "-b",
        "--body",
        metavar="TEXT",
        action="append",
        default=[],
        help="send TEXT (UTF-8) as a message, instead of files; may be repeated",
    )
    parser.add_argument(
        "--lines",
        action="store_true",
        help="send each non-empty line of the input as a message of its own",
    )
    common.add_header_option(
        parser, "add a header to every message, e.g. -H persistent:true; may be repeated"
    )
    parser.add_argument(
        "--content-type",
        metavar="TYPE",
        help="the content-type header, e.g. application/json (default: none)",
    )
    parser.add_argument(
        "--receipt",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait for the broker to confirm each message before the next (default: on)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="do not report the number of messages sent"
    )
    parser.set_defaults(run=run_send)
    parser.__class__ = _IntermixedParser  # add_parser has no per-parser class


def run_send(args: argparse.Namespace) -> int:
    """Run ``trio-stomp send`` with the parsed ``args``; return the exit status."""
    return common.run("send", args.url, lambda: _send(args))


def _check(args: argparse.Namespace) -> None:
    """Reject bad input before connecting, so that nothing is half sent.

    Raises:
      UsageError: a bad URL, header or file.
    """
    common.check_url(args.url)
    for name, _ in args.headers:
        if name in _RESERVED:
            raise common.UsageError(f"-H {name}: not allowed here ({_RESERVED[name]})")
        if name == "content-type" and args.content_type is not None:
            raise common.UsageError("content-type given both with -H and --content-type")
    if args.body and args.files:
        raise common.UsageError("give FILEs or --body, not both")
    if args.body and args.lines:
        raise common.UsageError("--lines splits FILEs and standard input, not --body")
    if args.files.count("-") > 1:
        raise common.UsageError('standard input ("-") can be read only once')
    for path in args.files:
        if path != "-":
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise common.UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


async def _send(args: argparse.Namespace) -> int:
    _check(args)
    ssl_context = common.tls_context("send", args)
    sent = 0
    async with connect(args.url, ssl_context=ssl_context) as client:

        async def send_one(body: bytes) -> None:
            nonlocal sent
            await client.send(
                args.destination,
                body,
                headers=args.headers,
                content_type=args.content_type,
                receipt=args.receipt,
            )
            sent += 1

        if args.body:
            for text in args.body:
                await send_one(text.encode("utf-8"))
        else:
            for path in args.files or ["-"]:
                await _each_message(path, args.lines, send_one)
    if not args.quiet:
        plural = "" if sent == 1 else "s"
        how = " (each confirmed by a receipt)" if args.receipt and sent else ""
        common.say(f"send: sent {sent} message{plural} to {args.destination}{how}")
    return common.EXIT_OK


async def _each_message(
    path: str, lines: bool, send_one: Callable[[bytes], Awaitable[None]]
) -> None:
    """Call ``send_one`` with the whole content of ``path``, or with each of its lines."""
    if path == "-":
        try:
            fd = sys.stdin.fileno()
        except (AttributeError, ValueError, OSError):
            raise common.UsageError("there is no standard input to read") from None
        if os.isatty(fd) and not lines:
            common.say("send: reading one message from the terminal; end it with Ctrl-D")
        await _each_message_from(fd, lines, send_one)
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise common.UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        await _each_message_from(fd, lines, send_one)
    finally:
        os.close(fd)


async def _each_message_from(
    fd: int, lines: bool, send_one: Callable[[bytes], Awaitable[None]]
) -> None:
    """Read ``fd`` to its end and send its content, or each of its lines.

    Reads with ``os.read`` in a worker thread: a terminal or a pipe may not
    answer for a long time, and Ctrl-C must not wait for it. (Not through
    ``sys.stdin.buffer``: a thread abandoned while holding its lock aborts the
    interpreter at exit.)
    """

    async def read() -> bytes:
        return await trio.to_thread.run_sync(os.read, fd, _CHUNK, abandon_on_cancel=True)

    if not lines:
        chunks = []
        while chunk := await read():
            chunks.append(chunk)
        await send_one(b"".join(chunks))
        return
    pending = b""
    while chunk := await read():
        *complete, pending = (pending + chunk).split(b"\n")
        for line in complete:
            if line := line.removesuffix(b"\r"):
                await send_one(line)
    if line := pending.removesuffix(b"\r"):
        await send_one(line)
