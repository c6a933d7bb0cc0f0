"""``bridges run``'s status line on a terminal: what each route is doing, once a second.

When stdout is a terminal (and not ``--quiet``), ``bridges run`` shows, at
the bottom of the screen and redrawn about once a second, one line per route
and one for the embedded broker (here cut to fit)::

    orders  running   received 1,204  written 1,200  412.0 msg/s  in flight 4 ...
    embedded broker: /queue/from-mqtt 12, /queue/orders 0

The words are the counters' own (:data:`~bridges._flow.COUNTERS`), as the
metrics and the stop summary use them; the broker's figures are what each
destination holds (:meth:`trio_stomp.broker.Broker.depths`: queued and
unacknowledged). The rate is of messages written over the last refresh.

The drawing is rich's ``Live``, refreshed by this module's own task (no
thread of rich's): the task lives in the process's nursery and ends with
it, and the lines vanish when it does, so that the stop summary is the last
line on the screen. Log records and status lines print through the same
console while it runs (:attr:`StatusLine.log_stream`), above the status
lines, never through them. Off a terminal (journald, a pipe) none of this
runs: systemd gets ``STATUS=`` and the logs as before.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final, TextIO

import trio
from rich.console import Console
from rich.file_proxy import FileProxy
from rich.live import Live
from rich.text import Text

from trio_stomp.broker import Broker, DestinationDepth
from trio_stomp.util import printable

from .._engine import Route
from ._health import route_state
from ._logs import TextOut

#: How often the status line is redrawn, s.
REFRESH_EVERY: Final = 1.0


def route_line(route: Route, rate: float, width: int = 0) -> str:
    """One route's status: its state, counters and the rate written (msg/s).

    Args:
      width: pad the route's name to this many characters (aligns the lines).
    """
    stats = route.stats
    return (
        f"{printable(route.name):<{width}}  {route_state(route):<8}  received {stats.received:,}  "
        f"written {stats.written:,}  {rate:,.1f} msg/s  in flight {route.in_flight:,}  "
        f"retries {stats.retries:,}  dead-lettered {stats.dead_lettered:,}"
    )


def broker_line(depths: Sequence[DestinationDepth]) -> str:
    """The embedded broker's destinations with what each holds (queued + unacknowledged)."""
    # A destination is whatever a client SENT to: escaped (it may hold ESC ] 52 ...).
    held = ", ".join(f"{printable(depth.label)} {depth.held:,}" for depth in depths)
    return f"embedded broker: {held or 'no queues yet'}"


class Rates:
    """Messages written per second by each route, between two looks."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[int, float]] = {}

    def update(self, routes: Sequence[Route], now: float) -> list[float]:
        """The rate of each of ``routes`` since the previous call (0 at the first)."""
        rates = []
        seen: dict[int, tuple[int, float]] = {}
        for route in routes:
            written = route.stats.written
            before = self._last.get(id(route))
            elapsed = now - before[1] if before is not None else 0.0
            rates.append((written - before[0]) / elapsed if before and elapsed > 0 else 0.0)
            seen[id(route)] = (written, now)
        self._last = seen  # (routes a reload replaced are forgotten)
        return rates


def status_text(routes: Sequence[Route], rates: Sequence[float], broker: Broker | None) -> Text:
    """The status lines, cropped to the terminal's width rather than wrapped
    (a wrapped line would throw off the redraw)."""
    width = max((len(route.name) for route in routes), default=0)
    lines = [route_line(route, rate, width) for route, rate in zip(routes, rates, strict=True)]
    if broker is not None:
        lines.append(broker_line(broker.depths()))
    return Text("\n".join(lines), no_wrap=True, overflow="ellipsis")


class StatusLine:
    """The status lines of one ``bridges run`` on a terminal.

    Args:
      console: where to draw; by default a console on stdout.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.console = console if console is not None else Console(file=sys.stdout)
        self._live: Live | None = None

    def log_stream(self, stderr: TextIO | None = None) -> TextOut | None:
        """Where log records and status lines should go while the status line
        shows: through its console when stderr is a terminal too (the same
        screen: printed above the status lines), else None (stderr as usual,
        a file or a pipe that the drawing does not touch)."""
        stderr = stderr if stderr is not None else sys.stderr
        if not stderr.isatty():
            return None
        return FileProxy(self.console, stderr)

    async def run(self, routes: Sequence[Route], broker: Broker | None) -> None:
        """Redraw every :data:`REFRESH_EVERY` s until cancelled, then erase the lines.

        Args:
          routes: the process's routes (a live list: a reload changes it).
          broker: the embedded broker, or None.
        """
        rates = Rates()
        with Live(
            console=self.console, auto_refresh=False, transient=True, redirect_stdout=False,
            redirect_stderr=False,
        ) as live:  # fmt: skip
            self._live = live
            while True:
                shown = list(routes)
                text = status_text(shown, rates.update(shown, trio.current_time()), broker)
                live.update(text, refresh=True)
                await trio.sleep(REFRESH_EVERY)

    def stop(self) -> None:
        """Erase the lines and show the cursor again now, without waiting for
        :meth:`run` to be cancelled: ``bridges run``'s hard stop calls it just
        before ``os._exit``, which would leave the terminal's cursor hidden."""
        if self._live is not None:
            self._live.stop()
