"""The ``trio-stomp`` command line: one subcommand per tool.

``trio-stomp send``, ``listen`` and ``bench`` are clients for any broker
(:mod:`._send`, :mod:`._listen`, :mod:`._bench`; what they share is in
:mod:`._common`). ``trio-stomp broker`` runs the embedded
broker until SIGINT or SIGTERM.

Adding a subcommand: write ``_add_NAME(subcommands)`` that adds a parser and
sets ``run=`` (a function of the parsed arguments returning the exit status),
and list it in :data:`_SUBCOMMANDS`. A subcommand reports expected failures
(a bad file, a port in use) as one line on stderr and a non-zero status,
never as a traceback.
"""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from .._version import build, version
from ..util import parse_host_port
from ._bench import add_bench
from ._common import (
    EXIT_FAILED,
    EXIT_STATUS_HELP,
    PROG,
    URL_ENV,
    PrintableFormatter,
    UsageError,
    say,
)
from ._listen import add_listen
from ._send import add_send
from ._subscriptions import add_subscription_options, run_subscriptions

if TYPE_CHECKING:
    from ..broker import Limits

Subparsers = Any  # argparse's _SubParsersAction is private


# -- broker ----------------------------------------------------------------------

_USERS_HELP = """\
users file format: one "login:passcode" per line; the passcode is everything
after the first colon; blank lines and lines starting with "#" are ignored.
Without --users the broker accepts any login.

durable topic subscriptions (as ActiveMQ names them): a SUBSCRIBE to a /topic/
with an activemq.subscriptionName header, from a connection whose CONNECT has a
client-id header, keeps what is sent to the topic while its client is away (on
disk with --data-dir, across restarts). A plain UNSUBSCRIBE keeps it; one with
activemq.subscriptionName removes it, as do --remove-subscription (on a stopped
broker's --data-dir). A client-id is held by one connection at a time."""


def _listen_address(text: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[v6]:PORT`` for IPv6; an empty host is loopback)."""
    try:
        return parse_host_port(text, default_host="127.0.0.1")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_broker(subcommands: Subparsers) -> None:
    parser = subcommands.add_parser(
        "broker",
        help="run the embedded STOMP broker",
        description="Run the embedded STOMP broker (1.0, 1.1, 1.2) until SIGINT or "
        "SIGTERM. Without --data-dir it is volatile: queued messages (and what durable "
        "topic subscriptions keep) live in memory and are lost when it stops. Besides "
        "plain STOMP it can listen for STOMP over TLS "
        "(--tls-listen, with --cert) and over WebSocket (--ws-listen; --wss-listen "
        "for WebSocket over TLS); all listeners serve the same destinations.",
        epilog=_USERS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        type=_listen_address,
        default=("127.0.0.1", 61613),
        help="address to listen on (default 127.0.0.1:61613; port 0 picks a free one)",
    )
    parser.add_argument(
        "--users", metavar="FILE", help="accept only the logins listed in FILE (format below)"
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep queue messages, and durable topic subscriptions (client-id + "
        "activemq.subscriptionName) with what they hold, on disk in DIR (SQLite, created "
        "when missing): each RECEIPT comes after an fsync, and what is not consumed is "
        "delivered again (redelivered:true) at the next start",
    )
    parser.add_argument(
        "--accept-damage",
        action="store_true",
        help="start even when the store in --data-dir is damaged (it lost messages since "
        "the broker last wrote it: a damaged WAL, an emptied file, a damaged row); what "
        "was lost is logged. Without it such a store is refused: exit 1, with what was "
        "lost (how many, from which store key on)",
    )
    parser.add_argument(
        "--duplicate-window",
        metavar="N",
        type=int,
        default=0,
        help="turn the duplicate window on: remember the last N bridge-id values per "
        "destination, and answer (RECEIPT) and drop a SEND repeating one; kept in "
        "--data-dir with the messages (default 0: off, every SEND is delivered; "
        "bridges' own broker uses 10000)",
    )
    parser.add_argument(
        "--duplicate-window-seconds",
        metavar="S",
        type=float,
        default=600.0,
        help="remember a bridge-id at most S seconds (default 600)",
    )
    add_subscription_options(parser)
    parser.add_argument(
        "--tls-listen",
        metavar="HOST:PORT",
        type=_listen_address,
        help="also listen for STOMP over TLS (stomp+ssl://) here; needs --cert",
    )
    parser.add_argument(
        "--ws-listen",
        metavar="HOST:PORT",
        type=_listen_address,
        help="also listen for STOMP over WebSocket (ws://HOST:PORT/ws) here; needs the "
        "websocket extra",
    )
    parser.add_argument(
        "--wss-listen",
        metavar="HOST:PORT",
        type=_listen_address,
        help="also listen for STOMP over WebSocket over TLS (wss://) here; needs --cert",
    )
    parser.add_argument(
        "--cert", metavar="FILE", help="the TLS certificate chain (PEM) of the TLS listeners"
    )
    parser.add_argument(
        "--key",
        metavar="FILE",
        help="the private key (PEM) of --cert (default: read from the --cert file)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log every connection to stderr"
    )
    parser.set_defaults(run=_run_broker)


def _run_broker(args: argparse.Namespace) -> int:
    from ..broker import StoreError, UsersFileError, load_users

    if args.accept_damage and args.data_dir is None:
        raise UsageError("--accept-damage needs --data-dir")
    status = run_subscriptions(args)
    if status is not None:
        return status
    users = None
    if args.users is not None:
        try:
            users = load_users(args.users)
        except UsersFileError as exc:
            raise UsageError(str(exc)) from None
    host, port = args.listen
    options: dict[str, Any] = {
        "tls_port": args.tls_listen,
        "ws_port": args.ws_listen,
        "wss_port": args.wss_listen,
        "ssl_context": _broker_ssl_context(args),
        "data_dir": args.data_dir,
        "accept_damage": args.accept_damage,
        "limits": _limits(args),
    }
    if args.ws_listen is not None or args.wss_listen is not None:
        from .._transport import load_websocket

        try:
            load_websocket()
        except ImportError as exc:
            raise UsageError(str(exc)) from None
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    try:
        trio.run(_serve_until_signal, host, port, users, options)
    except OSError as exc:
        raise UsageError(str(exc.strerror or exc), status=EXIT_FAILED) from None
    except StoreError as exc:
        raise UsageError(str(exc), status=EXIT_FAILED) from None
    return 0


def _limits(args: argparse.Namespace) -> Limits:
    from ..broker import Limits

    try:
        return Limits(
            duplicate_window=args.duplicate_window,
            duplicate_window_seconds=args.duplicate_window_seconds,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _broker_ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS listeners' context from --cert/--key; None without TLS listeners."""
    tls = [
        flag
        for flag, value in (("--tls-listen", args.tls_listen), ("--wss-listen", args.wss_listen))
        if value is not None
    ]
    if not tls:
        if args.cert is not None or args.key is not None:
            raise UsageError("--cert and --key need --tls-listen or --wss-listen")
        return None
    if args.cert is None:
        raise UsageError(f"{tls[0]} needs --cert (and --key, unless the key is in that file)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(args.cert, args.key)
    except OSError as exc:  # ssl.SSLError is an OSError too
        raise UsageError(f"cannot load --cert/--key: {exc.strerror or exc}") from None
    return context


async def _serve_until_signal(
    host: str, port: int, users: Mapping[str, str] | None, options: Mapping[str, Any]
) -> None:
    from ..broker import open_broker

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_broker(host, port, users=users, **options) as broker:
            say(f"broker listening on {', '.join(broker.urls)}")
            async for signum in signals:
                say(f"broker stopping ({signal.Signals(signum).name})")
                break
    say("broker stopped")


# -- plumbing ----------------------------------------------------------------------

_SUBCOMMANDS: list[Callable[[Subparsers], None]] = [add_send, add_listen, add_bench, _add_broker]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``trio-stomp``, with every subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="STOMP tools for Trio: send and receive messages, measure a broker,\n"
        "run a broker. `trio-stomp COMMAND --help` tells more about each.",
        epilog=f"The client commands connect to -u/--url, else ${URL_ENV}, else\n"
        "stomp://127.0.0.1:61613. Over TLS (stomp+ssl://, wss://) they trust the\n"
        "system's CAs; --cafile PATH trusts the CAs in PATH (PEM) instead, and\n"
        "--insecure verifies nothing.\n\n"
        f"{EXIT_STATUS_HELP}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()} ({build()})")
    subcommands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    subcommands.required = True
    for add in _SUBCOMMANDS:
        add(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trio-stomp`` with ``argv`` (default: the process arguments).

    Returns:
      The exit status: 0 on success, 1 when the command failed, 2 for bad
      usage or input (argparse exits with 2 itself on bad arguments), 130
      when interrupted by SIGINT (Ctrl-C), 143 when stopped by SIGTERM.
    """
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except UsageError as exc:
        say(f"{args.command}: error: {exc}")
        return exc.status
    except KeyboardInterrupt:
        return 130
