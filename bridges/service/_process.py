"""A bridge process: the embedded broker, every route, signals and graceful shutdown.

Shutdown (first SIGTERM or SIGINT) runs in two phases within
``[bridge] shutdown_timeout``:

1. Routes that do not read from the embedded broker stop taking messages
   and finish what they have in flight.
2. Routes that read from the embedded broker keep going until its queues
   they read are empty and nothing is in flight (the embedded broker keeps
   messages in memory only), then stop the same way.

When the deadline passes (or at a second signal), every route is aborted:
in-flight messages are nacked, shielded and bounded, and connections close.
The embedded broker stops last.
"""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import trio

from .._config import Config
from .._convert import ConfigError
from .._engine import Route, run_routes
from .._registry import Registry
from .._shared import open_shared
from ..endpoints.stomp import EMBEDDED_BROKER
from ._embedded import open_embedded
from ._routes import build_routes

log = logging.getLogger("bridges")

Say = Callable[[str], None]


def freeze_heap() -> None:
    """Leave everything allocated so far out of later garbage collections (``gc.freeze``).

    ``bridges run`` calls it once, before its routes start. Modules, config
    and plugins live as long as the process; without this, each full
    collection walks all of them again (some 28,000 objects, about 15 ms),
    and the objects of messages in flight trigger one about twice a second
    at 20,000 messages a second. What of them ever becomes cyclic garbage
    is never collected: it is built once.
    """
    gc.collect()
    gc.freeze()


def volatile_backlog(route: Route) -> int | None:
    """What the route's source holds in the embedded broker, or None if it reads elsewhere."""
    probe: Any = getattr(route.source, "volatile_backlog", None)
    return None if probe is None else probe()


def _busy(route: Route) -> bool:
    return not route.finished.is_set() and ((volatile_backlog(route) or 0) + route.in_flight) > 0


async def shutdown(routes: Sequence[Route], grace: float, say: Say) -> None:
    """Stop ``routes`` in the two phases of the module docs; abort them after ``grace`` s."""
    feeders = [r for r in routes if volatile_backlog(r) is None]
    drainers = [r for r in routes if volatile_backlog(r) is not None]
    with trio.move_on_after(grace) as scope:
        for route in feeders:
            route.stop()
        for route in feeders:
            await route.finished.wait()
        # The embedded broker has no "queue is empty" event to wait on: poll it,
        # and twice in a row, so that a message between the broker and the
        # route's taker (in the subscription's buffer) is not missed.
        idle = 0
        while idle < 2:
            idle = 0 if any(_busy(r) for r in drainers) else idle + 1
            await trio.sleep(0.05)
        for route in drainers:
            route.stop()
        for route in drainers:
            await route.finished.wait()
    left_behind = sum(volatile_backlog(r) or 0 for r in drainers)
    if left_behind:
        say(f"{left_behind} message(s) left in the embedded broker's queues are lost")
    if scope.cancelled_caught:
        left = sum(r.in_flight for r in routes)
        say(f"shutdown deadline ({grace:g} s) passed; handing back {left} in-flight message(s)")
        for route in routes:
            route.abort()


async def run_bridge(
    config: Config,
    registry: Registry,
    *,
    say: Say = print,
    task_status: trio.TaskStatus[list[Route]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``config`` until SIGTERM/SIGINT (then shut down gracefully) or every route ends.

    Raises:
      ConfigError: the embedded broker cannot listen, or an endpoint refused its settings.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        # The embedded broker outside the shared resources: it stops last.
        async with open_embedded(config) as broker:
            if broker is not None:
                say(f"embedded broker listening on {broker.url}")
            try:
                async with open_shared() as shared:
                    if broker is not None:
                        shared.provide(EMBEDDED_BROKER, broker)
                    routes = build_routes(config, registry, shared=shared)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_announce, routes, config, say)
                        nursery.start_soon(_watch_signals, signals, routes, config, say, nursery)
                        task_status.started(routes)
                        await run_routes(routes)
                        nursery.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                # A config problem found while building is one line for the user, not a group.
                if len(group.exceptions) == 1 and isinstance(group.exceptions[0], ConfigError):
                    raise group.exceptions[0] from None
                raise
    say("stopped")


async def _watch_signals(
    signals: AsyncIterator[int],
    routes: Sequence[Route],
    config: Config,
    say: Say,
    nursery: trio.Nursery,
) -> None:
    stopping = False
    async for signum in signals:
        name = signal.Signals(signum).name
        if not stopping:
            stopping = True
            timeout = config.bridge.shutdown_timeout
            say(
                f"{name}: stopping (finishing in-flight messages, at most {timeout:g} s; "
                "again to stop now)"
            )
            nursery.start_soon(shutdown, routes, timeout, say)
        else:
            say(f"{name} again: stopping now")
            for route in routes:
                route.abort()


async def _announce(routes: Sequence[Route], config: Config, say: Say) -> None:
    for route in routes:
        say(f"route {route.name!r}: {route.source.describe()} -> {route.sink.describe()}")
    with trio.move_on_after(10):
        for route in routes:
            await route.ready.wait()
    waiting = [route.name for route in routes if not route.ready.is_set()]
    if waiting:
        say(f"not connected yet (retrying): {', '.join(waiting)}")
        for route in routes:
            await route.ready.wait()
    say(f"running {len(routes)} route(s)")
    if config.bridge.hint:
        say(config.bridge.hint)
