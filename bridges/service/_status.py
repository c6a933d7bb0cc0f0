"""``bridges run``'s status line on a terminal: what each route is doing, once a second.

When stdout is a terminal (and not ``--quiet``), ``bridges run`` shows, at
the bottom of the screen and redrawn about once a second, one line per route
and one for the embedded broker::

    orders  running   received 1,204  written 1,200  412.0 msg/s  in flight 4  retries 0  dead-lettered 0
    embedded broker: /queue/from-mqtt 12, /queue/orders 0

The words are the counters' own (:data:`~bridges._flow.COUNTERS`), as the
metrics and the stop summary use them; the broker's figures are what each
destination holds (:meth:`trio_stomp.broker.Broker.depths`: queued and
unacknowledged). The rate is of messages written over the last refresh.

On a narrower terminal (80 columns) the line keeps what matters when
something is wrong: the labels shorten and the numbers are abbreviated::

    orders  running   in 1.2k  out 1.2k  412/s  flight 4  retries 0  dead 0

and if that still does not fit, the rate and then the count in flight give
way before the retries and dead letters do. Names are escaped
(:func:`trio_stomp.util.printable`): a destination is whatever a client sent
to.

The drawing is :class:`~bridges.service._terminal.Screen`'s: written off the
loop (a terminal paused with Ctrl-S drops frames, never a route), redrawn in
place with the width read per frame, so a resize leaves no stale line. Log
records and status lines print through it while it runs
(:attr:`StatusLine.log_stream`), above the status lines, never through them;
the lines vanish when the task ends, so that the stop summary is the last line
on the screen. Off a terminal (journald, a pipe) none of this runs: systemd
gets ``STATUS=`` and the logs as before.
"""  # noqa: E501 - the example line is as wide as it is

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final, TextIO

import trio

from trio_stomp.broker import Broker, DestinationDepth
from trio_stomp.util import printable

from .._engine import Route
from ._health import route_state
from ._logs import TextOut
from ._terminal import Screen

#: How often the status line is redrawn, s.
REFRESH_EVERY: Final = 1.0


def abbreviated(count: float) -> str:
    """``count`` in at most 4 characters or so: 999, 1.2k, 12k, 1.2M, 12M, 1.2G."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            value = count / size
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    return f"{count:.0f}"


def route_fields(route: Route, rate: float, short: bool) -> list[str]:
    """One route's figures, long or short: received, written, rate, in flight,
    retries, dead-lettered."""
    stats = route.stats
    if not short:
        return [
            f"received {stats.received:,}", f"written {stats.written:,}",
            f"{rate:,.1f} msg/s", f"in flight {route.in_flight:,}",
            f"retries {stats.retries:,}", f"dead-lettered {stats.dead_lettered:,}",
        ]  # fmt: skip
    return [
        f"in {abbreviated(stats.received)}", f"out {abbreviated(stats.written)}",
        f"{abbreviated(rate)}/s", f"flight {abbreviated(route.in_flight)}",
        f"retries {abbreviated(stats.retries)}", f"dead {abbreviated(stats.dead_lettered)}",
    ]  # fmt: skip


#: Which of :func:`route_fields` give way first when a short line is still too wide.
_GIVE_WAY: Final = (3, 2, 0)


def route_line(route: Route, rate: float, width: int = 0, columns: int | None = None) -> str:
    """One route's status: its state, counters and the rate written (msg/s).

    Args:
      width: pad the route's name to this many characters (aligns the lines).
      columns: the room there is: the long words when they fit, else the short
        ones, then fewer fields (see the module docs); None: the long words.
    """
    head = f"{printable(route.name):<{width}}  {route_state(route):<8}"
    line = "  ".join([head, *route_fields(route, rate, short=False)])
    if columns is None or len(line) <= columns:
        return line
    fields = route_fields(route, rate, short=True)
    for drop in (None, *_GIVE_WAY):
        if drop is not None:
            fields[drop] = ""
        line = "  ".join([head, *filter(None, fields)])
        if len(line) <= columns:
            break
    return line


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


def status_lines(
    routes: Sequence[Route], rates: Sequence[float], broker: Broker | None, columns: int
) -> list[str]:
    """The status lines for a terminal ``columns`` wide (each is cut to fit when drawn)."""
    width = min(max((len(printable(route.name)) for route in routes), default=0), 24)
    lines = [
        route_line(route, rate, width, columns) for route, rate in zip(routes, rates, strict=True)
    ]
    if broker is not None:
        lines.append(broker_line(broker.depths()))
    return lines


class StatusLine:
    """The status lines of one ``bridges run`` on a terminal.

    Args:
      screen: where to draw; by default a :class:`Screen` on stdout.
      lines: False: draw nothing, only carry the log lines to the terminal off the
        loop (``bridges run --quiet`` on a terminal, or stdout not one but stderr).
    """

    def __init__(self, screen: Screen | None = None, *, lines: bool = True) -> None:
        self.screen = screen if screen is not None else Screen(sys.stdout)
        self.lines = lines

    def log_stream(self, stderr: TextIO | None = None) -> TextOut | None:
        """Where log records and status lines should go while the status line
        shows: through its screen when stderr is a terminal too (the same
        screen: printed above the status lines, and off the loop), else None
        (stderr as usual, a file or a pipe that the drawing does not touch)."""
        stderr = stderr if stderr is not None else sys.stderr
        if not stderr.isatty() and self.lines:
            return None
        return self.screen

    async def run(self, routes: Sequence[Route], broker: Broker | None) -> None:
        """Redraw every :data:`REFRESH_EVERY` s until cancelled, then erase the lines.

        Args:
          routes: the process's routes (a live list: a reload changes it).
          broker: the embedded broker, or None.
        """
        rates = Rates()
        async with trio.open_nursery() as nursery:
            await nursery.start(self.screen.pump)
            while not self.lines:
                await trio.sleep_forever()
            while True:
                shown = list(routes)
                columns = self.screen.columns() - 1
                self.screen.draw(
                    status_lines(shown, rates.update(shown, trio.current_time()), broker, columns)
                )
                await trio.sleep(REFRESH_EVERY)

    def stop(self) -> None:
        """Erase the lines and show the cursor again now, without waiting for
        :meth:`run` to be cancelled: ``bridges run``'s hard stop calls it just
        before ``os._exit``, which would leave the terminal's cursor hidden."""
        self.screen.clear()
