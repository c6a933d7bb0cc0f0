"""What the client subcommands of ``trio-stomp`` (send, listen, bench) share.

- The broker address: ``-u/--url``, else ``$STOMP_URL``, else
  ``stomp://127.0.0.1:61613``. The environment variable keeps a passcode out
  of the shell history and of ``ps``.
- TLS trust for ``stomp+ssl://`` and ``wss://``: the system's CAs, or
  ``--cafile PATH``, or ``--insecure`` (:func:`tls_context`).
- ``-H NAME:VALUE`` headers.
- :func:`run`: runs a command under ``trio.run`` and turns every expected
  failure into one line on stderr and an exit status (:data:`EXIT_USAGE`,
  :data:`EXIT_FAILED`, :data:`EXIT_INTERRUPTED`). Anything else is a bug
  and keeps its traceback.
- :class:`Output`: stdout written line by line from a worker thread, so a
  slow reader of the pipe stalls the command but not the connection (its
  heart-beats and acks go on), and a closed pipe (``| head``) ends the
  command quietly.- :class:`UsageError`: the one expected-failure type of every subcommand.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import quote

import trio

from .._errors import (
    ConnectFailed,
    ConnectionLost,
    LocalProtocolError,
    ServerError,
    StompError,
)
from .._transport import WEBSOCKET_EXTRA_HINT
from .._url import typed_passcode
from ..frame import Frame
from ..util import Endpoint, printable, unwrap_group

PROG: Final = "trio-stomp"
URL_ENV: Final = "STOMP_URL"
DEFAULT_URL: Final = "stomp://127.0.0.1:61613"

#: Success.
EXIT_OK: Final = 0
#: The connection failed, the broker refused or sent ERROR.
EXIT_FAILED: Final = 1
#: Bad arguments or input: a bad URL, header or file.
EXIT_USAGE: Final = 2
#: Stopped by SIGINT (Ctrl-C): 128 + SIGINT, as shells report it.
EXIT_INTERRUPTED: Final = 130
#: Stopped by SIGTERM (kill, systemd, timeout): 128 + SIGTERM.
EXIT_TERMINATED: Final = 143

URL_HELP: Final = (
    "the broker: SCHEME://[LOGIN[:PASSCODE]@]HOST[:PORT][/PATH][?vhost=NAME], where "
    "SCHEME is stomp, stomp+ssl (TLS), ws or wss (WebSocket, with a PATH such as /ws) "
    f"(default ${URL_ENV}, else {DEFAULT_URL})"
)

EXIT_STATUS_HELP: Final = """\
exit status: 0 success, 1 connection or broker error (refused, bad
credentials, ERROR frame, connection lost), 2 bad usage or input (a bad URL,
header or file), 130 interrupted (Ctrl-C)."""


class UsageError(Exception):
    """An expected failure found after argument parsing (a bad URL, header or file; a port
    in use): one line on stderr and ``status`` (:data:`EXIT_USAGE` unless given)."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


class StdoutClosed(Exception):
    """Whoever read our stdout has gone (``| head``): stop quietly, status 0."""


class PrintableFormatter(logging.Formatter):
    """Log records with every control character escaped (:func:`~trio_stomp.util.printable`):
    the message whole, its line breaks too, so that a destination a client chose can
    neither drive the terminal nor forge a line; only a traceback spans lines."""

    def format(self, record: logging.LogRecord) -> str:
        safe = logging.makeLogRecord(record.__dict__)
        safe.msg, safe.args = printable(record.getMessage()), None
        return printable(super().format(safe), keep="\n")


def say(message: str) -> None:
    """One line on stderr, prefixed with the program name, flushed at once."""
    print(f"{PROG}: {printable(message)}", file=sys.stderr, flush=True)


def add_broker_options(parser: argparse.ArgumentParser) -> None:
    """Where and how to connect: ``-u/--url``, defaulting to ``$STOMP_URL``
    (checked by :func:`check_url`), and ``--cafile``/``--insecure`` (see
    :func:`tls_context`)."""
    parser.add_argument(
        "-u",
        "--url",
        default=os.environ.get(URL_ENV) or DEFAULT_URL,
        help=URL_HELP,
    )
    tls = parser.add_argument_group(
        "TLS (stomp+ssl:// and wss:// URLs)",
        "By default the broker's certificate must be signed by a CA that the\n"
        "system trusts, and must name the URL's host.",
    ).add_mutually_exclusive_group()
    tls.add_argument(
        "--cafile",
        metavar="PATH",
        help="trust the CA certificates in PATH (PEM) instead of the system's; the "
        "certificate must still name the URL's host",
    )
    tls.add_argument(
        "--insecure",
        action="store_true",
        help="verify neither the broker's certificate nor its host name (for tests only: "
        "anyone on the path could read and change the traffic)",
    )


def check_url(url: str) -> str:
    """Return ``url`` if :func:`trio_stomp.connect` can use it.

    Checked here rather than as an argparse ``type`` so that a bad URL is
    one line on stderr (argparse would add the whole usage), and so that a
    bad ``$STOMP_URL`` is reported the same way.

    Raises:
      UsageError: the URL cannot be parsed.
    """
    try:
        Endpoint.from_url(url)
    except ValueError as exc:
        raise UsageError(f"bad URL: {exc}") from None
    return url


def tls_context(command: str, args: argparse.Namespace) -> ssl.SSLContext | None:
    """The ``ssl_context=`` for :func:`trio_stomp.connect`, from --cafile or --insecure.

    None without either (``connect`` then trusts the system's CAs), and for a
    URL without TLS, which takes no context (``connect`` would refuse one).
    --cafile is loaded even then, so a bad path is reported whatever the URL;
    --insecure always prints a warning on stderr. Call after :func:`check_url`.

    Raises:
      UsageError: the --cafile file is missing, unreadable or holds no PEM
        certificate.
    """
    context: ssl.SSLContext | None = None
    if args.cafile is not None:
        try:
            context = ssl.create_default_context(cafile=args.cafile)
        except ssl.SSLError as exc:  # before OSError: SSLError is one
            raise UsageError(
                f"cannot load --cafile {args.cafile}: not a PEM CA bundle ({exc.reason or exc})"
            ) from None
        except OSError as exc:
            raise UsageError(f"cannot load --cafile {args.cafile}: {exc.strerror or exc}") from None
    elif args.insecure:
        say(
            f"{command}: warning: --insecure: the broker's TLS certificate and host name "
            "are not verified"
        )
        context = ssl.create_default_context()
        context.check_hostname = False  # before verify_mode: CERT_NONE needs it off
        context.verify_mode = ssl.CERT_NONE
    return context if Endpoint.from_url(args.url).tls else None


def header(text: str) -> tuple[str, str]:
    """Parse ``-H NAME:VALUE`` (argparse ``type``).

    Like ``curl -H``, whitespace around the name and before the value is
    dropped, so ``-H "prefetch-count: 10"`` works.
    """
    name, colon, value = text.partition(":")
    name = name.strip()
    if not colon or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE, got {text!r}")
    return name, value.lstrip()


def add_header_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument(
        "-H",
        "--header",
        metavar="NAME:VALUE",
        type=header,
        action="append",
        default=[],
        dest="headers",
        help=help,
    )


def positive_int(text: str) -> int:
    """argparse ``type`` for counts: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


class Output:
    """A file descriptor written from a worker thread, one chunk at a time.

    Why a thread: a blocking write on the Trio thread would stop everything,
    heart-beats included, for as long as the reader of the pipe is away (a
    paused ``less``); the broker would then drop the connection. In a thread
    only the command waits.

    Why ``os.write`` rather than ``sys.stdout.buffer``: a write still blocked
    at Ctrl-C is abandoned, and a thread abandoned inside a buffered file's
    lock aborts the interpreter at exit ("could not acquire lock ... at
    interpreter shutdown"). Nothing is buffered, so nothing needs flushing.
    """

    def __init__(self, fd: int | None = None) -> None:
        self._fd = fd if fd is not None else sys.stdout.fileno()
        self._limiter = trio.CapacityLimiter(1)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except BrokenPipeError:
            _silence(self._fd)
            raise StdoutClosed from None

    async def write(self, data: bytes) -> None:
        """Write all of ``data``.

        Raises:
          StdoutClosed: the reading end of the pipe was closed.
        """
        await trio.to_thread.run_sync(
            self._write, data, abandon_on_cancel=True, limiter=self._limiter
        )


def _silence(fd: int) -> None:
    """Point ``fd`` at /dev/null, so that the interpreter's final flush of stdout
    cannot fail with a second BrokenPipeError ("Exception ignored ...")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:  # pragma: no cover - nothing more to be done
        pass


def describe(exc: BaseException) -> tuple[str, int] | None:
    """The one-line message and exit status for an expected failure, else None."""
    if isinstance(exc, UsageError):
        return str(exc), exc.status
    if isinstance(exc, LocalProtocolError):
        return str(exc), EXIT_USAGE
    if isinstance(exc, ServerError):
        return f"the broker sent ERROR: {_server_error(exc)}", EXIT_FAILED
    if isinstance(exc, ConnectionLost):
        return f"connection lost: {exc}", EXIT_FAILED
    if isinstance(exc, ConnectFailed):
        return _connect_failed(exc), EXIT_FAILED
    if isinstance(exc, StompError):
        return str(exc), EXIT_FAILED
    if isinstance(exc, ImportError) and WEBSOCKET_EXTRA_HINT in str(exc):
        return str(exc), EXIT_FAILED  # ws:// without trio-websocket installed
    return None


def _server_error(exc: ServerError) -> str:
    """One line: the ERROR's message, or the first line of its body when that says more.

    ActiveMQ's message for a bad selector is the selector alone ("priority >>> 5");
    its body starts "javax.jms.InvalidSelectorException: priority >>> 5", then a
    Java stack trace, which is all there is when the message is empty.
    """
    lines = exc.message.strip().splitlines()
    message = lines[0].strip() if lines else ""
    if isinstance(exc.frame, Frame):
        lines = exc.frame.body.decode("utf-8", "replace").strip().splitlines()
        first = lines[0].strip()[:200] if lines else ""
        if message in first:
            message = first
        elif first not in message:
            message += f": {first}"
    return message or "ERROR frame without a message"


_LIBRARY_CA_HINT: Final = "pass ssl_context= with the CA"
_CLI_CA_HINT: Final = "give --cafile with the CA"


def _connect_failed(exc: ConnectFailed) -> str:
    """The message of ``exc``, with the socket error or the ERROR body it leaves out.

    "all attempts to connect ... failed" says nothing of *why* (Trio keeps
    the reasons in the exception's cause); RabbitMQ's ERROR says "Bad
    CONNECT" in its header and the reason in its body.
    """
    # The library's hint names its argument; the command line's is an option.
    message = str(exc).replace(_LIBRARY_CA_HINT, _CLI_CA_HINT)
    reason = _socket_error(exc)
    if reason and reason.lower() not in message.lower():
        message += f" ({reason})"
    if isinstance(exc.frame, Frame):
        lines = exc.frame.body.decode("utf-8", "replace").strip().splitlines()
        if lines and lines[0] not in message:
            message += f": {lines[0][:200]}"
    return message


def _socket_error(exc: BaseException) -> str | None:
    """The first ``strerror`` ("Connection refused") among the causes of ``exc``."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        error = pending.pop(0)
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, OSError) and error.strerror:
            return error.strerror
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        pending.extend(e for e in (error.__cause__, error.__context__) if e is not None)
    return None


def _redact(message: str, url: str) -> str:
    """``message`` without the passcode of ``url``, as given or percent-escaped.

    The library's own messages show URLs without credentials; this is the
    second line of defence, for text that came from elsewhere (a broker's
    ERROR, an OS error quoting what it was given).
    """
    try:
        passcode = Endpoint.from_url(url).passcode
    except ValueError:
        passcode = typed_passcode(url)  # the URL does not parse: the passcode as typed
    for form in {passcode, quote(passcode or "", safe="")} - {None, ""}:
        assert form is not None
        message = message.replace(form, "***")
    return message


def run(command: str, url: str, main: Callable[[], Awaitable[int]]) -> int:
    """Run ``main`` under Trio; return its status or the status of its failure.

    SIGINT and SIGTERM cancel ``main`` (so the client still sends
    DISCONNECT on the way out) and give :data:`EXIT_INTERRUPTED` or
    :data:`EXIT_TERMINATED`, whatever the cancelled code raised while it
    stopped. Error messages never show the passcode of ``url``.
    """
    stopped_by: int | None = None  # the signal that stopped main

    async def supervise() -> int:
        status = EXIT_OK
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def on_signal() -> None:
                    nonlocal stopped_by
                    async for signum in signals:
                        stopped_by = signum
                        nursery.cancel_scope.cancel()
                        return

                async def body() -> None:
                    nonlocal status
                    status = await main()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(on_signal)
                nursery.start_soon(body)
        return status

    status = EXIT_OK
    try:
        status = trio.run(supervise)
    except BaseException as exc:
        leaf = unwrap_group(exc)
        if isinstance(leaf, KeyboardInterrupt):  # SIGINT before the receiver was installed
            stopped_by = signal.SIGINT
        elif stopped_by is not None:
            pass  # whatever the cancelled command raised on its way out
        elif isinstance(leaf, StdoutClosed):
            return EXIT_OK
        else:
            described = describe(leaf)
            if described is None:
                raise
            message, status = described
            say(f"{command}: error: {_redact(message, url)}")
            return status
    if stopped_by == signal.SIGTERM:
        say(f"{command}: terminated")
        return EXIT_TERMINATED
    if stopped_by is not None:
        say(f"{command}: interrupted")
        return EXIT_INTERRUPTED
    return status
