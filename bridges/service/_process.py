"""A bridge process: the embedded broker, every route, signals and graceful shutdown.

Shutdown (first SIGTERM or SIGINT) runs in two phases within
``[bridge] shutdown_timeout``:

1. Routes that do not read from the embedded broker stop taking messages
   and finish what they have in flight.
2. Routes that read from the embedded broker keep going until its queues
   they read are empty and nothing is in flight, then stop the same way.

Once every route has stopped, the embedded broker is asked what each of its
destinations still holds (queued or delivered and unacknowledged), whether
a route reads it or not: a queue that only receives, for a reader outside
the process, counts as much as one a route drains. That is lost with a
volatile broker (no ``[broker] data_dir``: it keeps messages in memory
only), and kept in the store, for the next start, with a data dir (except
a topic subscription's messages, which are never stored).

When the deadline passes (or at a second signal), every route is aborted:
in-flight messages are nacked, shielded and bounded, and connections close.
The embedded broker stops last.

Stopping is bounded whatever a peer does: each cleanup on the wire is
bounded (a route's hand-back, an endpoint's DISCONNECT), and
:func:`run_bridge` takes a ``hard_stop`` that ``bridges run`` uses as the
last resort: if the process is still not done ``STOP_NOW_WITHIN`` s
after the abort (a thread stuck on a hung disk, a plugin ignoring
cancellation), it prints what was left and exits at once. Nothing is lost
either way: whatever was not acknowledged stays with its source.

:func:`run_bridge` returns a :class:`Stopped`: how many messages were
handed back to their sources, and, by destination, kept in the embedded
broker's store or lost with it; ``bridges run`` makes its exit status
(:attr:`Stopped.exit_status`) and last line (``Stopped.summary()``) of
those, e.g. ``bridges: stopped; 3 message(s) lost in /queue/a (2),
/queue/b (1) (set [broker] data_dir to keep them)``.
"""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Final

import attrs
import trio

from trio_stomp.broker import Broker, StoreError
from trio_stomp.util import printable

from .._blocking import blocking
from .._config import Config
from .._convert import ConfigError
from .._engine import Route
from .._flow import sole
from .._redact import Secrets, redacting
from .._registry import Registry
from .._shared import Shared, open_shared
from ..endpoints.stomp import EMBEDDED_BROKER
from . import _routes
from ._embedded import open_embedded, volatile_backlog
from ._logs import log_counters
from ._notify import Notifier
from ._reload import Reloader
from ._reload_answer import answer_path
from ._routes import build_routes
from ._service import Service
from ._tasks import open_service

if TYPE_CHECKING:
    from ._status import StatusLine

log = logging.getLogger("bridges")

Say = Callable[[str], None]

#: After the shutdown deadline or a second signal: how long what is left may
#: take (handing back, closing connections, stopping the embedded broker)
#: before ``hard_stop`` is called, s.
STOP_NOW_WITHIN: Final = 0.8
#: Exit status: messages were handed back to their sources, or kept in the
#: embedded broker's store (delivered at the next start).
EXIT_LEFT_BEHIND: Final = 3
#: Exit status: messages were lost: held by a volatile embedded broker (no
#: ``data_dir``), or by a topic subscription of the embedded broker.
EXIT_LOST: Final = 4

#: Destinations of the embedded broker with what each held at the stop, by name.
Held = tuple[tuple[str, int], ...]


def _named(held: Held) -> str:
    # A destination is whatever a client SENT to: escaped (it may hold ESC ] 52 ...).
    return ", ".join(f"{printable(destination)} ({count})" for destination, count in held)


@attrs.frozen
class Stopped:
    """How a bridge process stopped: what it did not finish, and where that is now.

    Every message the process accepted and did not write is in one of these
    (the design's rule: nothing disappears without a line saying so).

    Attributes:
      handed_back: messages in flight when the routes were aborted (at the
        deadline or a second signal) from sources other than the embedded
        broker: handed back to them, which deliver them again.
      lost: each destination of the embedded broker (queue or topic
        subscription, read by a route or not) that held messages at the
        stop that the stop loses: every one of a volatile broker (no
        ``[broker] data_dir``), and topics, which are never stored.
      kept: each queue of the embedded broker with a data dir that held
        messages: on disk in :attr:`data_dir`, delivered at the next start.
      data_dir: the embedded broker's data dir, None when it is volatile
        (or there is none).
      at_most_once: the routes whose sink, as configured, gives at most once
        across a restart of its target (a ``stomp`` sink with ``persistent =
        false``): what they wrote is counted as written, and the last line
        names them. It does not change the exit status.
    """

    handed_back: int = 0
    lost: Held = ()
    kept: Held = ()
    data_dir: str | None = None
    at_most_once: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """True when every message taken was written and nothing was left behind."""
        return not (self.handed_back or self.lost or self.kept)

    @property
    def exit_status(self) -> int:
        """``bridges run``'s exit status: 0 when clean, else :data:`EXIT_LOST` or
        :data:`EXIT_LEFT_BEHIND` (lost first: it is the one to act on)."""
        if self.lost:
            return EXIT_LOST
        return 0 if self.clean else EXIT_LEFT_BEHIND

    def summary(self) -> str:
        """The last line ``bridges run`` prints: ``stopped``, then one part per kind
        of message left, joined by ``"; "``, each naming where they are."""
        parts = ["stopped"]
        if self.handed_back:
            parts.append(
                f"{self.handed_back} message(s) handed back to their sources (which deliver "
                "them again)"
            )
        if self.kept:
            count = sum(n for _, n in self.kept)
            parts.append(f"{count} message(s) kept in {self.data_dir}: {_named(self.kept)}")
        if self.lost:
            count = sum(n for _, n in self.lost)
            fix = (
                "set [broker] data_dir to keep them"
                if self.data_dir is None
                else "topic messages are never stored"
            )
            parts.append(f"{count} message(s) lost in {_named(self.lost)} ({fix})")
        if self.at_most_once:
            names = ", ".join(self.at_most_once)
            parts.append(
                f"route(s) {names} wrote AT MOST ONCE across a restart of their target "
                "(a stomp sink with persistent = false: `bridges check` says why)"
            )
        return "; ".join(parts)


@attrs.define
class _Stopping:
    """The shutdown's state, shared by the signal watcher, :func:`shutdown` and the guard."""

    routes: Sequence[Route] = ()
    signalled: bool = False
    service: Service | None = None
    reloader: Reloader | None = None
    #: Where a failed reload's lines go (None: ``say``; see :class:`Reloader`).
    warn: Say | None = None
    notifier: Notifier | None = None
    #: Set when the routes are aborted, or have stopped after a signal: the last stretch.
    final: trio.Event = attrs.field(factory=trio.Event)
    handed_back: int | None = None
    #: The embedded broker, while it runs; what it holds is counted at the stop.
    broker: Broker | None = None
    #: Its data dir (None: volatile).
    data_dir: str | None = None
    #: What the embedded broker held once every route had stopped (None: not counted yet).
    held: tuple[Held, Held] | None = None
    #: The secrets redacted while the process runs (a reload adds its config's).
    secrets: Secrets | None = None
    #: A SIGHUP came while the routes were being built: reload once they run.
    hup_while_building: bool = False

    def abort(self) -> None:
        if self.handed_back is None:
            # What a route reading the embedded broker hands back goes back to
            # its queue: the broker's count has it.
            self.handed_back = sum(
                route.in_flight for route in self.routes if volatile_backlog(route) is None
            )
        for route in self.routes:
            route.abort()
        self.final.set()

    def count_broker(self) -> tuple[Held, Held]:
        """What the embedded broker holds now: (lost, kept), each by destination."""
        lost: list[tuple[str, int]] = []
        kept: list[tuple[str, int]] = []
        for depth in self.broker.depths() if self.broker is not None else ():
            if depth.held:
                (kept if depth.durable else lost).append((depth.label, depth.held))
        return tuple(lost), tuple(kept)

    def result(self) -> Stopped:
        lost, kept = self.held if self.held is not None else self.count_broker()
        weaker = tuple(route.name for route in self.routes if _weaker(route.sink) is not None)
        return Stopped(self.handed_back or 0, lost, kept, self.data_dir, weaker)


def _weaker(sink: object) -> str | None:
    """Why ``sink`` is at most once across its target's restart (its ``weaker_guarantee``)."""
    weaker = getattr(sink, "weaker_guarantee", None)
    return weaker() if callable(weaker) else None


#: The youngest generation's collection threshold while routes run (CPython's default: 700).
GC_THRESHOLD: Final = 50_000


def freeze_heap() -> None:
    """Leave everything allocated so far out of later garbage collections
    (``gc.freeze``), and collect young objects less often (:data:`GC_THRESHOLD`).

    ``bridges run`` calls it once, before its routes start. Modules, config
    and plugins live as long as the process; without the freeze, each full
    collection walks all of them again (some 28,000 objects, about 15 ms),
    and the objects of messages in flight trigger one about twice a second
    at 20,000 messages a second. What of them ever becomes cyclic garbage
    is never collected: it is built once.

    A message in flight is a dozen small objects (frame, headers, message,
    envelope) that live until its batch is acked, then die by reference
    count. With the default threshold (a young collection every 700 objects
    allocated and not yet freed) they are walked every 70 messages or so and,
    having survived, again in the older generations: about 1 us of CPU per
    message, a fifth of what the bridge spends on one. At 50,000, a window
    of thousands fills and empties between collections. Cyclic garbage is
    still collected, after at most that many objects more (a few MB).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


def _busy(route: Route) -> bool:
    return not route.finished.is_set() and ((volatile_backlog(route) or 0) + route.in_flight) > 0


async def shutdown(
    routes: Sequence[Route], grace: float, say: Say, stopping: _Stopping | None = None
) -> None:
    """Stop ``routes`` in the two phases of the module docs; abort them after ``grace`` s.

    Args:
      stopping: where the count of what was handed back goes (run_bridge's own);
        what the embedded broker still holds is counted once every route has
        stopped, by :func:`run_bridge`.
    """
    stopping = stopping if stopping is not None else _Stopping(routes)
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
    if scope.cancelled_caught:
        left = sum(r.in_flight for r in routes)
        say(f"shutdown deadline ({grace:g} s) passed; handing back {left} in-flight message(s)")
        stopping.abort()


async def run_bridge(
    config: Config,
    registry: Registry,
    *,
    say: Say = print,
    hard_stop: Callable[[Stopped], object] | None = None,
    notifier: Notifier | None = None,
    status: StatusLine | None = None,
    warn: Say | None = None,
    task_status: trio.TaskStatus[list[Route]] = trio.TASK_STATUS_IGNORED,
) -> Stopped:
    """Run ``config`` until SIGTERM/SIGINT (then shut down gracefully) or every route ends.

    Args:
      say: prints one status line (the last one is ``Stopped.summary()``).
      notifier: tells systemd how the process is doing (``bridges run``
        passes ``Notifier()``, which reads ``$NOTIFY_SOCKET``); None: nothing
        is sent, as suits a bridge embedded in another program.
      hard_stop: called with what is left if the process is not done
        ``STOP_NOW_WITHIN`` s after its routes were aborted (or had
        stopped, after a signal); ``bridges run`` exits there. None (tests,
        embedding): wait for the bounded cleanups however long they take.
      status: the status lines to draw on a terminal while the routes run
        (``bridges run`` passes one when stdout is a terminal); None: none.
      warn: prints what a failed reload says (``bridges run`` logs it at
        warning, for ``journalctl -p warning``); None: ``say``.

    Returns:
      what was handed back, kept or lost.

    Raises:
      ConfigError: the embedded broker cannot listen, or an endpoint refused its settings.
      StoreError: the embedded broker's store failed to write (a full disk): it
        stopped, and the bridge with it; nothing unconfirmed was acknowledged.
      TimeoutError: the routes were not built within ``BUILD_TIMEOUT`` s (an
        endpoint's constructor blocked on a file system that does not answer).
        They are built off the event loop: a signal meanwhile stops the start
        at once (nothing was taken yet), and a SIGHUP reloads once they run.
    """
    data_dir = config.broker.data_dir
    stopping = _Stopping(data_dir=None if data_dir is None else str(config.base_dir / data_dir))
    with (
        redacting(config.secrets) as secrets,
        trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals,
    ):
        try:
            async with trio.open_nursery() as guard:
                if hard_stop is not None:
                    guard.start_soon(_stop_now_guard, stopping, say, hard_stop)
                stopping.notifier = notifier
                stopping.secrets = secrets
                stopping.warn = warn
                await _run(config, registry, say, signals, stopping, task_status, status)
                guard.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # A config problem found while building is one line for the user, not a group.
            single = sole(group)
            if isinstance(single, (ConfigError, StoreError, TimeoutError)):
                raise single from None
            raise
    stopped = stopping.result()
    say(stopped.summary())
    return stopped


async def _run(
    config: Config,
    registry: Registry,
    say: Say,
    signals: AsyncIterator[int],
    stopping: _Stopping,
    task_status: trio.TaskStatus[list[Route]],
    status: StatusLine | None = None,
) -> None:
    # The embedded broker outside the shared resources: it stops last.
    async with open_embedded(config) as broker:
        stopping.broker = broker
        if broker is not None:
            say(f"embedded broker listening on {broker.url}")
        async with open_shared() as shared:
            if broker is not None:
                shared.provide(EMBEDDED_BROKER, broker)
            built = await _build(config, registry, shared, signals, stopping, say)
            if built is None:  # a signal while building: nothing was taken
                return
            routes = stopping.routes = built
            service_cm = open_service(config, routes, shared, notifier=stopping.notifier)
            async with service_cm as service, trio.open_nursery() as tasks:
                stopping.service = service
                tasks.start_soon(_announce, routes, config, say)
                tasks.start_soon(_watch_signals, signals, stopping, config, say, tasks)
                if status is not None:
                    tasks.start_soon(status.run, routes, broker)
                task_status.started(routes)
                async with trio.open_nursery() as running:
                    stopping.reloader = Reloader(
                        config, registry, routes, running, service, say, shared,
                        is_stopping=lambda: stopping.signalled, secrets=stopping.secrets,
                        warn=stopping.warn, answers=answer_path(),
                    )  # fmt: skip
                    for route in routes:
                        running.start_soon(route.run, name=f"route {route.name}")
                    if stopping.hup_while_building:
                        stopping.reloader.request()
                log_counters(routes, log)
                tasks.cancel_scope.cancel()
                if not stopping.signalled:
                    service.stopping()
            if stopping.signalled:
                stopping.final.set()  # what is left: shared resources, the broker
        # Every route and shared connection closed (what they held is back in
        # its queue), the broker still up (a topic subscription's messages
        # still there): count every destination, read by a route or not.
        stopping.held = stopping.count_broker()


async def _build(
    config: Config,
    registry: Registry,
    shared: Shared,
    signals: AsyncIterator[int],
    stopping: _Stopping,
    say: Say,
) -> list[Route] | None:
    """The routes of ``config``, built off the event loop (as a reload builds them:
    an endpoint's constructor may block on a file system), or None when SIGTERM
    or SIGINT came first (the build is then abandoned)."""
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            async for signum in signals:
                if signum == signal.SIGHUP:  # reload once the routes run
                    stopping.hup_while_building = True
                    continue
                stopping.signalled = True
                say(f"{signal.Signals(signum).name}: stopping (the routes were being built)")
                nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        build = partial(build_routes, config, registry, shared=shared)
        timeout = _routes.BUILD_TIMEOUT
        with trio.move_on_after(timeout):
            built = await blocking(build, what="building the routes", abandon=True)
            nursery.cancel_scope.cancel()
            return built
        raise TimeoutError(
            f"routes not built within {timeout:g} s (an endpoint blocked checking its "
            "settings: a file system that does not answer?)"
        )
    return None  # a signal cancelled the build


async def _stop_now_guard(
    stopping: _Stopping, say: Say, hard_stop: Callable[[Stopped], object]
) -> None:
    await stopping.final.wait()
    await trio.sleep(STOP_NOW_WITHIN)
    say(f"cleanup not done {STOP_NOW_WITHIN:g} s after the stop: exiting now")
    stopped = stopping.result()
    say(stopped.summary())
    hard_stop(stopped)


async def _watch_signals(
    signals: AsyncIterator[int],
    stopping: _Stopping,
    config: Config,
    say: Say,
    nursery: trio.Nursery,
) -> None:
    async for signum in signals:
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            if stopping.reloader is not None and not stopping.signalled:
                stopping.reloader.request()
            continue
        if not stopping.signalled:
            stopping.signalled = True
            if stopping.reloader is not None:
                stopping.reloader.cancel()  # a load under way is abandoned
            if stopping.service is not None:
                stopping.service.stopping()
            timeout = config.bridge.shutdown_timeout
            say(
                f"{name}: stopping (finishing in-flight messages, at most {timeout:g} s; "
                "again to stop now)"
            )
            nursery.start_soon(shutdown, stopping.routes, timeout, say, stopping)
        else:
            say(f"{name} again: stopping now")
            stopping.abort()


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
