"""The ``bridges`` command line.

    bridges check CONFIG     validate the config (no connection, nothing created)
    bridges check --probe CONFIG
                             also connect to each route's source and sink and print the
                             guarantee each route will give (see ``EXIT_WEAKER``)
    bridges run CONFIG       run until SIGTERM/SIGINT (--engine spark: as Spark queries)
    bridges plugins          list the source, sink and transform types
    bridges unit             print the systemd unit bridges@.service for this install
    bridges --version        the installed version (pyproject.toml's, from the package metadata)
                             and the codec's build: ``(compiled codec)`` or ``(pure Python)``

Config problems are printed one per line (file, route, key) with status 2;
nothing is printed as a traceback for an expected failure. ``run`` exits 0
when it stopped with every message it took written, 3 when its last line
says that messages were handed back to their sources or kept in the
embedded broker's store (data_dir), and 4 when messages were lost with the
embedded broker (volatile, or a topic's); see ``Stopped``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import TYPE_CHECKING, Final

import trio

import trio_stomp
from trio_stomp.util import printable

if TYPE_CHECKING:
    from ._config import Config
    from ._engine import Route
    from ._registry import Registry
    from .service import Stopped
    from .service._status import StatusLine

PROG = "bridges"

#: Exit status: done; ``run``: stopped with every message it took written.
EXIT_OK: Final = 0
#: Exit status: ``run`` failed while running (the embedded broker's store failed).
EXIT_FAILED: Final = 1
#: Exit status: the config cannot be used (each problem printed: file, route, key).
EXIT_CONFIG: Final = 2
#: Exit status: ``check --probe``: every source and sink answered, and some route
#: gives less than durable (at most once across a restart of a server it uses).
#: A source or sink that could not be reached gives 1 (``EXIT_FAILED``).
EXIT_WEAKER: Final = 5
#: Exit status: interrupted by SIGINT (Ctrl-C) before ``run`` handles the signal itself.
EXIT_INTERRUPTED: Final = 130


def _say(message: str) -> None:
    from ._redact import redact

    print(f"{PROG}: {printable(redact(message))}", file=sys.stderr, flush=True)


def _exit_now(status: StatusLine | None, stopped: Stopped) -> None:
    """``bridges run``'s last resort when cleanup overruns its bound: exit without waiting.

    Safe for the data: nothing unacknowledged was acknowledged to its source.
    """
    if status is not None:
        status.stop()
    sys.stderr.flush()
    os._exit(stopped.exit_status)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``bridges``."""
    from .service._reload_answer import WAIT_TIMEOUT

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Move messages between STOMP and other systems, at least once.",
        epilog="Config keys: 'bridges plugins' lists the endpoint and transform types, and "
        "'bridges check CONFIG' names every key a table accepts when one is wrong; the "
        "documentation's config reference describes each.",
    )
    codec = "compiled codec" if trio_stomp.frame.compiled else "pure Python"
    version = f"%(prog)s {trio_stomp.__version__} ({codec})"
    parser.add_argument("--version", action="version", version=version)
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    commands.required = True
    check = commands.add_parser("check", help="validate a config without connecting")
    check.add_argument("config", metavar="CONFIG", help="the TOML config file")
    check.add_argument(
        "--probe",
        action="store_true",
        help="connect to each route's source and sink and print the guarantee each route "
        "gives (exit 1: one could not be reached; 5: a route is weaker than durable)",
    )
    run = commands.add_parser("run", help="run the routes of a config")
    run.add_argument("config", metavar="CONFIG", help="the TOML config file")
    for command in (check, run):
        command.add_argument(
            "--engine",
            choices=("local", "spark"),
            help="override [bridge] engine: local (this process) or spark (Spark queries)",
        )
    run.add_argument(
        "-v", "--verbose", action="store_true", help="log at debug level (a line per batch written)"
    )
    run.add_argument(
        "-q", "--quiet", action="store_true",
        help="no status line (shown, refreshed each second, when stdout is a terminal)",
    )  # fmt: skip
    run.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines (default) or one JSON object per line; under journald "
        "($JOURNAL_STREAM) each line starts with its syslog priority (<3>...)",
    )
    commands.add_parser("plugins", help="list the endpoint and transform types")
    unit = commands.add_parser(
        "unit", help="print the systemd unit bridges@.service for this install"
    )
    unit.add_argument(
        "--paths",
        metavar="CONFIG",
        help="print instead the drop-in that lets bridges@NAME write CONFIG's paths outside "
        "its state directory (ReadWritePaths=); NAME is CONFIG's file name without .toml",
    )
    reload = commands.add_parser(
        "reload",
        help="make a running bridges re-read its config (SIGHUP); with --wait, exit "
        "with its outcome (the unit's ExecReload)",
    )
    reload.add_argument("pid", type=int, metavar="PID", help="the bridges run process")
    reload.add_argument(
        "--wait",
        action="store_true",
        help="wait for the outcome, from $RUNTIME_DIRECTORY/reload: exit 0 when applied, "
        "2 when the new config was refused, 1 when the reload failed or did not answer",
    )
    reload.add_argument(
        "--timeout",
        type=float,
        default=WAIT_TIMEOUT,
        metavar="S",
        help=f"with --wait, the longest wait (default {WAIT_TIMEOUT:g} s)",
    )
    return parser


def _status_line(args: argparse.Namespace) -> StatusLine | None:
    """A status line when stdout is a terminal, unless ``--quiet``; when only stderr
    is one (or ``--quiet``), a screen without status lines: the logs still go to the
    terminal off the event loop (a terminal paused with Ctrl-S must not stop routes)."""
    drawn = not args.quiet and sys.stdout.isatty()
    if not drawn and not sys.stderr.isatty():
        return None
    try:
        from .service._status import StatusLine
        from .service._terminal import Screen
    except ImportError:  # installed without the service extra: logs only
        return None
    return StatusLine() if drawn else StatusLine(Screen(sys.stderr), lines=False)


def _check(path: str, routes: Sequence[Route], config: Config) -> None:
    _say(f"{path}: OK, {len(routes)} route(s)")
    for route in routes:
        _say(f"  {route.name}: {route.source.describe()} -> {route.sink.describe()}")
        for endpoint in (route.source, route.sink, route.dead_letter):
            for warning in getattr(endpoint, "check_warnings", list)():
                _say(f"  {route.name}: warning: {warning}")
    if config.bridge.engine == "spark":
        spark = config.spark
        _say(f"  engine spark: master {spark.master}, checkpoint {spark.checkpoint}")


def _probe(routes: Sequence[Route], config: Config) -> int:
    """``check --probe``: ask every source and sink; the exit status says what was found."""
    from .service._preflight import probe_routes

    _say("probing each route's source and sink (this connects):")
    unreachable, weaker = trio.run(probe_routes, routes, config.broker, _say)
    if unreachable:
        return EXIT_FAILED
    return EXIT_WEAKER if weaker else EXIT_OK


def _redacting(config: Config, say: Callable[[str], None]) -> AbstractContextManager[object]:
    """Redact the config's secrets from everything said (see ``bridges._redact``)."""
    from ._redact import redacting, too_short

    if warning := too_short(config.secrets):
        say(warning)
    return redacting(config.secrets)


def _command(args: argparse.Namespace, registry: Registry, say: Callable[[str], None]) -> int:
    """The commands that run no config: ``plugins``, ``unit`` and ``reload``."""
    if args.command == "plugins":
        _plugins(registry)
        return EXIT_OK
    if args.command == "reload":
        return _reload(args, say)
    from .service._unit import print_paths, print_unit

    if args.paths is not None:
        return print_paths(args.paths, registry, say)
    return print_unit(say)


def _reload(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    """``bridges reload [--wait] PID``: SIGHUP, and with --wait the reload's outcome."""
    import signal

    from .service._reload_answer import WaitFailed, answer_path, signal_and_wait

    if not args.wait:
        try:
            os.kill(args.pid, signal.SIGHUP)
        except ProcessLookupError:
            say(f"reload: no process {args.pid}")
            return EXIT_FAILED
        return EXIT_OK
    path = answer_path()
    if path is None:
        say("reload: cannot wait: $RUNTIME_DIRECTORY is not set (the unit sets it)")
        return EXIT_FAILED
    try:
        answer = signal_and_wait(args.pid, path, args.timeout)
    except WaitFailed as exc:
        say(f"reload: {exc}")
        return EXIT_FAILED
    if answer.ok:
        say(f"reload: process {args.pid} applied the config")
        return EXIT_OK
    say(f"reload: process {args.pid}: {answer.note}")
    return EXIT_CONFIG if answer.refused else EXIT_FAILED


def _plugins(registry: Registry) -> None:
    for plugin in registry.plugins():
        print(printable(f"{plugin.kind:<9} {plugin.name:<15} {plugin.doc}"))
    for missing in registry.unavailable():
        print(printable(f"{'-':<9} {missing.family:<15} unavailable: {missing.reason}"))
    for refused in registry.refused():
        print(printable(f"warning: {refused}"))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bridges`` with ``argv``; return the exit status (``EXIT_*`` here, and
    ``Stopped.exit_status``: 3 or 4 when ``run`` left messages behind)."""
    from trio_stomp.broker import StoreError

    from ._builtins import default_registry
    from ._config import load_config
    from ._convert import ConfigError
    from .service import Notifier, build_routes, freeze_heap, run_bridge
    from .service._logs import configure_logging

    args = build_parser().parse_args(argv)
    say: Callable[[str], None] = _say
    status = None
    if args.command == "run":
        status = _status_line(args)
        level = "debug" if args.verbose else "info"
        stream = status.log_stream() if status is not None else None
        say = configure_logging(level, args.log_format, stream=stream, prog=PROG)
    registry = default_registry()
    if args.command in ("plugins", "unit", "reload"):
        return _command(args, registry, say)
    for refused in registry.refused():  # a plugin that took a built-in's name
        say(f"warning: {refused}")
    # What the config resolved is redacted from everything said, errors included.
    secrets = contextlib.ExitStack()
    try:
        config = load_config(args.config, registry, engine=args.engine)
        secrets.enter_context(_redacting(config, say))
        if args.command == "check":
            routes = build_routes(config, registry, checking=True)
            _check(args.config, routes, config)
            return _probe(routes, config) if args.probe else EXIT_OK
        if not args.verbose:
            logging.getLogger().setLevel(config.bridge.log_level.upper())
        if config.bridge.engine == "spark":
            # The Spark engine is the layer above; imported only when asked for.
            from .spark import run_on_spark

            return run_on_spark(config, args.config, say)
        freeze_heap()
        hard_stop = partial(_exit_now, status)
        warn = partial(logging.getLogger("bridges.service").warning, "%s")
        run = partial(
            run_bridge, config, registry, say=say, hard_stop=hard_stop, status=status, warn=warn
        )
        stopped = trio.run(partial(run, notifier=Notifier()))
        if not stopped.clean:
            return stopped.exit_status
    except ConfigError as exc:
        for problem in exc.problems:
            say(str(problem))
        return EXIT_CONFIG
    # The embedded broker's store failed while running; the routes were not built in time.
    except (StoreError, TimeoutError) as exc:
        say(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        secrets.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
