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

The new config is read, checked and built off the event loop, in a worker
thread (:func:`bridges.blocking`, as at start), within
:data:`RELOAD_TIMEOUT` s: the running routes, ``/healthz``
and the signals never wait on it, whatever its files are (a FIFO, a
device, a file system that hangs). Each file is read by
:func:`bridges._readfile.read_file` (a regular file, at most its size cap,
within :data:`~bridges._readfile.READ_TIMEOUT` s). A load that overruns the
deadline, or is still running when the process is told to stop, is
abandoned (``abandon=True``): its thread is a daemon thread that holds
no lock and no resource of the process, cannot hold up its exit, and its
result is thrown away. Any failure (a config problem, an unreadable file,
the deadline, any exception an endpoint raised while being built) keeps the
routes that run, says why, and marks ``STATUS=`` until the next good reload.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

import attrs
import trio

from .._blocking import blocking
from .._config import Config, load_config
from .._convert import ConfigError
from .._engine import Route
from .._flow import one_line
from .._redact import Secrets, too_short
from .._registry import Registry
from .._shared import Shared
from ._health import route_state
from ._logs import log_counters
from ._reload_answer import Answer, write_answer
from ._routes import build_routes
from ._service import Service

Say = Callable[[str], None]

log = logging.getLogger("bridges.service")

#: The longest a reload may take to read, check and build the new config, s.
RELOAD_TIMEOUT: Final = 10.0


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
    #: Where a new config's secrets go, to be redacted (see :mod:`bridges._redact`).
    secrets: Secrets | None = None
    #: The deadline of a load, s (None: :data:`RELOAD_TIMEOUT`, as it is at the load).
    timeout: float | None = None
    #: Where a failed reload's lines go (None: ``say``). ``bridges run`` logs them
    #: at warning, so that ``journalctl -p warning`` shows a refused config.
    warn: Say | None = None
    #: Where each reload's outcome is written for ``bridges reload --wait``
    #: (see :mod:`._reload_answer`); None: nowhere.
    answers: Path | None = None
    _finished: int = 0
    _lock: trio.Lock = attrs.field(factory=trio.Lock)
    _loading: trio.CancelScope | None = None

    def cancel(self) -> None:
        """Abandon a load under way (the process is stopping)."""
        if self._loading is not None:
            self._loading.cancel()

    def request(self) -> None:
        """Reload now, in the background (one reload at a time, in order)."""
        try:
            self.nursery.start_soon(self.reload, name="reload")
        except RuntimeError:  # the routes have all ended: the process is stopping
            self.say("not reloading: no route is running")

    async def reload(self) -> bool:
        """Read the config file again and apply it; True when it was applied.

        Never raises (but Cancelled): whatever fails keeps the running routes.
        """
        async with self._lock:
            if self.is_stopping():
                return False
            self.service.reloading()
            warn = self.warn or self.say
            try:
                applied = await self._apply()
            except ConfigError as exc:
                for problem in exc.problems:
                    warn(f"reload: {problem}")
                await self._failed(_problems(exc), refused=True)
                return False
            except Exception as exc:  # any failure at all keeps the running routes
                log.error("reload of %s failed: %s", self.config.file, one_line(exc))
                await self._failed(one_line(exc, limit=200), refused=False)
                return False
            self.service.reloaded(None)
            if applied:
                await self._answer(Answer(os.getpid(), self._finished + 1, ok=True))
            return applied

    async def _failed(self, why: str, *, refused: bool) -> None:
        note = f"reload failed ({why}; still running the previous config)"
        (self.warn or self.say)(note)
        self.service.reloaded(note)
        await self._answer(Answer(os.getpid(), self._finished + 1, False, refused, note))

    async def _answer(self, answer: Answer) -> None:
        """Count a finished reload and write its outcome to :attr:`answers`."""
        self._finished = answer.reloads
        if self.answers is None:
            return
        try:  # (a small file in the service's runtime folder, a tmpfs)
            await trio.to_thread.run_sync(write_answer, self.answers, answer)
        except OSError as exc:
            log.warning("cannot write the reload's answer to %s: %s", self.answers, exc)

    async def _load(self) -> tuple[Config, list[Route]] | None:
        """The new config and its new routes, read and built in a worker thread,
        or None when the process started stopping meanwhile."""
        file = self.config.file
        if file is None:
            raise ConfigError([])
        base_dir, registry, old = self.config.base_dir, self.registry, self.config

        def load() -> tuple[Config, list[Route]]:
            new = load_config(file, registry, base_dir=base_dir)
            starting = set(plan_reload(old, new).start)
            wanted = tuple(spec for spec in new.routes if spec.name in starting)
            fresh = build_routes(attrs.evolve(new, routes=wanted), registry, shared=self.shared)
            return new, fresh

        timeout = self.timeout if self.timeout is not None else RELOAD_TIMEOUT
        with trio.move_on_after(timeout) as scope:
            self._loading = scope
            try:
                loaded = await blocking(load, what="reload", abandon=True)
            finally:
                self._loading = None
            if self.is_stopping():
                return None
            return loaded
        if self.is_stopping():
            return None
        raise TimeoutError(f"{file}: not read and checked within {timeout:g} s")

    async def _apply(self) -> bool:
        loaded = await self._load()
        if loaded is None:
            return False
        new, fresh = loaded
        if self.secrets is not None:
            self.secrets.add(new.secrets)
        if warning := too_short(new.secrets):
            self.say(f"reload: {warning}")
        plan = plan_reload(self.config, new)
        for warning in plan.warnings:
            self.say(f"reload: {warning}")
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
