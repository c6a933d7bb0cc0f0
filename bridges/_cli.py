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

    print(f"{PROG}: {redact(message)}", file=sys.stderr, flush=True)


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
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Move messages between STOMP and other systems, at least once.",
        epilog="The config format: docs/reference/config.rst (scripts/docs builds the site).",
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
    commands.add_parser("unit", help="print the systemd unit bridges@.service for this install")
    return parser


def _status_line(args: argparse.Namespace) -> StatusLine | None:
    """A status line when stdout is a terminal, unless ``--quiet``."""
    if args.quiet or not sys.stdout.isatty():
        return None
    try:
        from .service._status import StatusLine  # (rich only on a terminal)
    except ImportError:  # installed without the service extra: logs only
        return None
    return StatusLine()


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


def _plugins(registry: Registry) -> None:
    for plugin in registry.plugins():
        print(f"{plugin.kind:<9} {plugin.name:<15} {plugin.doc}")
    for missing in registry.unavailable():
        print(f"{'-':<9} {missing.family:<15} unavailable: {missing.reason}")


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
    if args.command == "plugins":
        _plugins(registry)
        return EXIT_OK
    if args.command == "unit":
        from .service._unit import print_unit

        return print_unit(say)
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
        run = partial(run_bridge, config, registry, say=say, hard_stop=hard_stop, status=status)
        stopped = trio.run(partial(run, notifier=Notifier()))
        if not stopped.clean:
            return stopped.exit_status
    except ConfigError as exc:
        for problem in exc.problems:
            say(str(problem))
        return EXIT_CONFIG
    except StoreError as exc:  # the embedded broker's store failed while running
        say(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        secrets.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
