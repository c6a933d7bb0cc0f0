"""How the process is doing: each route's state, stuck routes, the event loop's lag.

One :class:`Health` per process, ticked by its own task (:meth:`Health.run`).
It feeds the systemd status line and watchdog (:mod:`._notify`), and
``/healthz`` and ``/readyz`` (:mod:`._metrics`).

A route is *stuck* when it has had messages in flight and settled none of
them (acked, nacked, dead-lettered, handed back) for ``stall_timeout`` s: a
sink that hangs without failing, a peer that never confirms. A route that
fails is not stuck: it says so and retries. The process is *healthy* while
its event loop keeps its ticks (a tick late by more than :data:`LAG_LIMIT` s
means the loop was blocked) and no route is stuck; systemd's watchdog is fed
only then, so that it restarts a wedged bridge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import trio

from .._engine import Route

#: How often the health task ticks, s.
TICK: Final = 0.25
#: A tick later than this means the event loop was not responsive, s.
LAG_LIMIT: Final = 2.0
#: Longest error text per route in the status line.
_ERROR_CHARS: Final = 80


def route_state(route: Route) -> str:
    """``starting``, ``running``, ``retrying`` or ``stopped``."""
    if route.finished.is_set():
        return "stopped"
    return route.stats.state


class Health:
    """The process's health, from its (live) list of routes.

    Args:
      routes: the routes now running; a reload changes the list in place.
      stall_timeout: how long a route with messages in flight may settle
        none before it is stuck, s.
    """

    def __init__(self, routes: Sequence[Route], stall_timeout: float) -> None:
        self.routes = routes
        self.stall_timeout = stall_timeout
        #: How late the last tick was, s.
        self.lag = 0.0
        #: A line prefixed to the status (a failed reload says so), or None.
        self.note: str | None = None
        self._progress: dict[int, tuple[int, float]] = {}
        self._stuck: list[str] = []
        self._last_tick = trio.current_time()

    async def run(self) -> None:
        """Tick forever (run it in the process's nursery)."""
        while True:
            before = trio.current_time()
            await trio.sleep(TICK)
            now = trio.current_time()
            self.lag = max(0.0, now - before - TICK)
            self._last_tick = now
            self.check(now)

    def check(self, now: float) -> None:
        """Update which routes are stuck, as of ``now`` (trio clock)."""
        progress: dict[int, tuple[int, float]] = {}
        stuck = []
        for route in self.routes:
            settled = route.stats.settled
            last = self._progress.get(id(route))
            if last is None or last[0] != settled or route.in_flight == 0:
                last = (settled, now)
            progress[id(route)] = last
            if not route.finished.is_set() and now - last[1] >= self.stall_timeout:
                stuck.append(route.name)
        self._progress = progress
        self._stuck = stuck

    @property
    def stuck(self) -> list[str]:
        """Names of the routes that are stuck."""
        return list(self._stuck)

    @property
    def responsive(self) -> bool:
        """The event loop kept its last tick (within :data:`LAG_LIMIT` s)."""
        return self.lag < LAG_LIMIT and trio.current_time() - self._last_tick < TICK + LAG_LIMIT

    @property
    def healthy(self) -> bool:
        """Responsive, and no route is stuck: what the watchdog is fed on."""
        return self.responsive and not self._stuck

    @property
    def ready(self) -> bool:
        """Every route has opened, or failed once and is retrying."""
        return all(route_state(route) != "starting" for route in self.routes)

    def not_ready(self) -> list[str]:
        """Routes that are not running (for ``/readyz``), each with its state."""
        return [
            f"{route.name}: {route_state(route)}"
            for route in self.routes
            if route_state(route) != "running"
        ]

    def status(self) -> str:
        """One line: ``3 routes: 2 running, 1 retrying (orders: broker refused)``."""
        counts: dict[str, list[Route]] = {}
        for route in self.routes:
            counts.setdefault(route_state(route), []).append(route)
        parts = []
        for state in ("running", "starting", "retrying", "stopped"):
            routes = counts.get(state, [])
            if not routes:
                continue
            part = f"{len(routes)} {state}"
            if state == "retrying":
                part += " (" + "; ".join(_why(route) for route in routes) + ")"
            parts.append(part)
        if self._stuck:
            parts.append(f"{len(self._stuck)} stuck ({', '.join(self._stuck)})")
        line = f"{len(self.routes)} route{'s' if len(self.routes) != 1 else ''}: "
        line += ", ".join(parts) if parts else "none"
        return line if self.note is None else f"{self.note}; {line}"


def _why(route: Route) -> str:
    error = route.stats.error or "?"
    if len(error) > _ERROR_CHARS:
        error = error[: _ERROR_CHARS - 3] + "..."
    return f"{route.name}: {error}"
