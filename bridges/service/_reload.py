"""Reloading the config on SIGHUP (``systemctl reload``) without losing or repeating a message.

A reload reads and checks the config file again. If it has problems, the
process keeps running the config it has: every problem is said, and the
status line (``STATUS=``) says the reload failed until the next good one.
Otherwise routes are compared by name, table by table:

- a route whose table did not change keeps running untouched: same
  connections, same in-flight messages, no reconnect;
- a route removed or changed stops taking messages and finishes its
  in-flight ones, as at shutdown (at most ``[bridge] shutdown_timeout`` s,
  then what is left is handed back to its source); then the changed one
  starts again with its new table, and a new one starts.

A message is acknowledged to its source only once its sink has it, before
and after the swap alike, so a reload loses nothing; and since the old
route has settled (or handed back) everything it took before the new one
takes anything, it acks nothing twice.

``[bridge]`` and ``[broker]`` are read once, at start: a reload that changes
them says that they need a restart, and applies the routes only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import trio

from .._config import Config, load_config
from .._convert import ConfigError
from .._engine import Route
from .._registry import Registry
from .._shared import Shared
from ._health import route_state
from ._logs import log_counters
from ._routes import build_routes
from ._service import Service

Say = Callable[[str], None]

log = logging.getLogger("bridges.service")


@attrs.frozen
class Plan:
    """What a reload does: routes by name."""

    keep: tuple[str, ...]
    stop: tuple[str, ...]  # removed or changed
    start: tuple[str, ...]  # changed or new
    warnings: tuple[str, ...]


def plan_reload(old: Config, new: Config) -> Plan:
    """Compare two configs: which routes keep running, stop, or start."""
    before = {spec.name: spec for spec in old.routes}
    after = {spec.name: spec for spec in new.routes}
    keep = tuple(name for name, spec in after.items() if before.get(name) == spec)
    stop = tuple(name for name in before if name not in keep)
    start = tuple(name for name in after if name not in keep)
    warnings = tuple(
        f"[{section}] changed: it applies at the next restart (a reload applies routes only)"
        for section in ("bridge", "broker")
        if getattr(old, section) != getattr(new, section)
    )
    return Plan(keep, stop, start, warnings)


@attrs.define(eq=False)
class Reloader:
    """Reloads the process's config in its routes' nursery.

    Args:
      routes: the live list of routes (changed in place).
      nursery: where the routes run; new ones start there.
      is_stopping: True once shutdown started (a reload then does nothing).
    """

    config: Config
    registry: Registry
    routes: list[Route]
    nursery: trio.Nursery
    service: Service
    say: Say
    shared: Shared | None = None
    is_stopping: Callable[[], bool] = lambda: False
    _lock: trio.Lock = attrs.field(factory=trio.Lock)

    def request(self) -> None:
        """Reload now, in the background (one reload at a time, in order)."""
        try:
            self.nursery.start_soon(self.reload, name="reload")
        except RuntimeError:  # the routes have all ended: the process is stopping
            self.say("not reloading: no route is running")

    async def reload(self) -> bool:
        """Read the config file again and apply it; True when it was applied."""
        async with self._lock:
            if self.is_stopping():
                return False
            self.service.reloading()
            try:
                applied = await self._apply()
            except ConfigError as exc:
                for problem in exc.problems:
                    self.say(f"reload: {problem}")
                note = f"reload failed ({_problems(exc)}; still running the previous config)"
                self.say(note)
                self.service.reloaded(note)
                return False
            self.service.reloaded(None)
            return applied

    async def _apply(self) -> bool:
        if self.config.file is None:
            raise ConfigError([])
        new = load_config(self.config.file, self.registry, base_dir=self.config.base_dir)
        plan = plan_reload(self.config, new)
        for warning in plan.warnings:
            self.say(f"reload: {warning}")
        wanted = tuple(spec for spec in new.routes if spec.name in plan.start)
        fresh = build_routes(attrs.evolve(new, routes=wanted), self.registry, shared=self.shared)
        self.say(
            f"reloading {self.config.file}: {len(plan.keep)} route(s) unchanged, "
            f"{len(plan.stop)} stopping, {len(plan.start)} starting"
        )
        old = [route for route in self.routes if route.name in plan.stop]
        await self._stop(old)
        if self.is_stopping():
            return False
        by_name = {route.name: route for route in self.routes if route.name in plan.keep}
        by_name.update((route.name, route) for route in fresh)
        # The swap and the hand-over of counts with no checkpoint between (a scrape
        # sees either the old routes or the new ones with the old counts).
        self.routes[:] = [by_name[spec.name] for spec in new.routes]
        for route in old:
            self.service.retired(route)
        for route in fresh:
            self.service.started(route)
            self.nursery.start_soon(route.run, name=f"route {route.name}")
        # [bridge] and [broker] stay as they were started (see the module docs).
        self.config = attrs.evolve(new, bridge=self.config.bridge, broker=self.config.broker)
        # READY=1 again, as at start, once the new routes are open or retrying.
        while any(route_state(route) == "starting" for route in fresh):  # noqa: ASYNC110
            await trio.sleep(0.02)
        self.say(f"reloaded: running {len(self.routes)} route(s)")
        return True

    async def _stop(self, old: list[Route]) -> None:
        for route in old:
            route.stop()
        with trio.move_on_after(self.config.bridge.shutdown_timeout):
            for route in old:
                await route.finished.wait()
        for route in old:
            if not route.finished.is_set():
                self.say(f"reload: route {route.name!r} did not finish in time: handing back")
                route.abort()
        for route in old:
            await route.finished.wait()  # (bounded: an abort's hand-back is)
        log_counters(old, log)


def _problems(exc: ConfigError) -> str:
    count = len(exc.problems)
    if not count:
        return "no config file to read"
    return f"{count} problem{'s' if count != 1 else ''} in the config"
