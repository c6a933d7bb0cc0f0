"""``bridges run``'s output: text or JSON lines, with syslog priorities under journald.

Two kinds of lines go to stderr: log records (``logging``) and status lines
(what :func:`~bridges.run_bridge`'s ``say`` prints: started, stopping,
stopped). With ``--log-format json`` both are one JSON object per line::

    {"time": "...", "level": "warning", "logger": "bridges.route",
     "event": "route %r: writing %d message(s) to %s failed ...",
     "message": "route 'orders': writing 3 message(s) to ... failed ...",
     "route": "orders"}

``event`` is the record's message before its arguments are put in: one
stable key per kind of event, to count and alert on. ``route`` is there when
the record is about one route; ``counters`` (the route's
:class:`~bridges.RouteStats` counters) on the ``route.counters`` event
logged for each route when the process stops or a reload replaces it.

Under journald (``$JOURNAL_STREAM`` set: systemd connected stderr to the
journal) each line starts with its syslog priority, ``<3>`` for errors to
``<7>`` for debug, which journald strips and keeps as the entry's priority.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from trio_stomp.util import printable

from .._flow import COUNTERS
from .._redact import redact

if TYPE_CHECKING:
    from .._engine import Route

#: logging level -> syslog priority.
PRIORITIES: Final = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}
#: The priority of status lines (``say``): notice.
STATUS_PRIORITY: Final = 5

LogFormat = Literal["text", "json"]


class TextOut(Protocol):
    """Where lines are written: a text file, or a console's stand-in for one."""

    def write(self, text: str, /) -> int:
        """Write ``text``; return how much was taken."""

    def flush(self) -> None:
        """Push out what is buffered."""


def priority(level: int) -> int:
    """The syslog priority of a logging level."""
    for known in sorted(PRIORITIES, reverse=True):
        if level >= known:
            return PRIORITIES[known]
    return 7


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object (see the module docs)."""

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "time": _now(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or str(record.msg),
            "message": record.getMessage(),
        }
        route = getattr(record, "route", None)
        args = record.args
        if (
            route is None
            and isinstance(args, tuple)
            and args
            and str(record.msg).startswith("route %r")
        ):
            route = args[0]
        if route is not None:
            fields["route"] = str(route)
        counters = getattr(record, "counters", None)
        if counters is not None:
            fields["counters"] = counters
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info)
        return json.dumps(fields, ensure_ascii=False, default=str)


def _redacted(value: Any) -> Any:
    """A decoded JSON value with every secret masked in its strings."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(key): _redacted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    return value


class RedactingFormatter(logging.Formatter):
    """Another formatter's lines with every secret of the process masked
    (:mod:`bridges._redact`) and every control character escaped
    (:func:`trio_stomp.util.printable`): the message, its arguments and its
    traceback alike.

    In text, the message (its arguments in) is escaped whole, line breaks too:
    a name holding a newline cannot forge a log line; only the traceback after
    it spans lines. In JSON, ``json.dumps`` already escapes C0 controls and line
    breaks; the rest (DEL, C1, bidi controls, U+2028) is escaped as ``\\uXXXX``
    inside the strings, so that the line still decodes to what was logged; secrets
    are masked in the decoded strings.

    Args:
      json_lines: the inner formatter writes JSON lines.
    """

    def __init__(self, inner: logging.Formatter, *, json_lines: bool = False) -> None:
        super().__init__()
        self.inner = inner
        self.json_lines = json_lines

    def format(self, record: logging.LogRecord) -> str:
        if self.json_lines:
            # Redacted in the decoded fields, not in the line: a secret's backslash is
            # doubled in JSON, and masking half of it would leave the line invalid.
            fields = _redacted(json.loads(self.inner.format(record)))
            return printable(json.dumps(fields, ensure_ascii=False), style="json")
        safe = logging.makeLogRecord(record.__dict__)
        safe.msg = printable(redact(record.getMessage()))
        safe.args = None
        return printable(redact(self.inner.format(safe)), keep="\n")


class JournalFormatter(logging.Formatter):
    """Another formatter's lines, each prefixed with the record's syslog priority."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{priority(record.levelno)}>"
        return "\n".join(prefix + line for line in self.inner.format(record).splitlines())


def under_journald(environ: Mapping[str, str] | None = None) -> bool:
    """True when stderr goes to the journal (systemd sets ``$JOURNAL_STREAM``)."""
    return bool((os.environ if environ is None else environ).get("JOURNAL_STREAM"))


def configure_logging(
    level: str,
    log_format: LogFormat = "text",
    *,
    journal: bool | None = None,
    stream: TextOut | None = None,
    prog: str = "bridges",
) -> Callable[[str], None]:
    """Set up the root logger on stderr; return the matching ``say`` for status lines.

    Args:
      level: "debug", "info", "warning" or "error".
      journal: prefix syslog priorities (default: :func:`under_journald`).
      stream: where both kinds of lines go (default: stderr); ``bridges run``
        passes its status line's console here, so that they print above it.
    """
    journal = under_journald() if journal is None else journal
    out = stream if stream is not None else sys.stderr
    formatter: logging.Formatter
    if log_format == "json":
        formatter = JsonFormatter()
    else:
        formatter = logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
        )
    formatter = RedactingFormatter(formatter, json_lines=log_format == "json")
    if journal:
        formatter = JournalFormatter(formatter)
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    prefix = f"<{STATUS_PRIORITY}>" if journal else ""

    def say(message: str) -> None:
        message = redact(message)
        if log_format == "json":  # (escaped as the records are: the line decodes to it)
            line = printable(
                json.dumps(
                    {"time": _now(), "level": "notice", "logger": prog, "event": "status",
                     "message": message},
                    ensure_ascii=False,
                ),
                style="json",
            )  # fmt: skip
        else:
            line = f"{prog}: {printable(message)}"
        print(prefix + line, file=out, flush=True)

    return say


def log_counters(routes: Iterable[Route], logger: logging.Logger) -> None:
    """One ``route.counters`` record per route (at info), with its counters
    (:data:`~bridges._flow.COUNTERS`, named as the metrics name them)."""
    for route in routes:
        stats = route.stats
        counters = {name: getattr(stats, name) for name in COUNTERS}
        text = " ".join(f"{k}={v}" for k, v in counters.items())
        logger.info(
            "route %r: counters %s",
            route.name,
            text,
            extra={"route": route.name, "counters": counters, "event": "route.counters"},
        )
