"""What the process's service tasks share with the rest of the process: :class:`Service`.

The service tasks (:mod:`._tasks`: systemd notification and watchdog,
metrics and health over HTTP) and the process (signals, reloads) meet here:
the notifier, the routes' health, and hooks that follow routes a reload
starts or retires.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio

from .._engine import Route
from ._health import Health
from ._notify import Notifier


@attrs.define
class Service:
    """What the service tasks share with the process (signals, reload).

    Attributes:
      notifier: systemd's notification socket (a no-op without one).
      health: the routes' states, stuck routes, the loop's lag.
      ready: set once ``READY=1`` was first sent.
    """

    notifier: Notifier
    health: Health
    ready: trio.Event = attrs.field(factory=trio.Event)
    #: Where ``[bridge] http`` serves, once it does (its port 0 resolved).
    http_url: str | None = None
    #: Called with each route a reload starts (before it runs) and with each
    #: one it replaces or removes (after it stopped): metrics follow them.
    on_start: list[Callable[[Route], object]] = attrs.field(factory=list)
    on_retire: list[Callable[[Route], object]] = attrs.field(factory=list)

    def started(self, route: Route) -> None:
        """``route`` joins the process (a reload built it)."""
        for hook in self.on_start:
            hook(route)

    def retired(self, route: Route) -> None:
        """``route`` left the process (a reload replaced or removed it)."""
        for hook in self.on_retire:
            hook(route)

    def stopping(self) -> None:
        """Shutdown started: ``STOPPING=1``."""
        self.health.note = "stopping"
        self.notifier.stopping(self.health.status())

    def reloading(self) -> None:
        """A reload started: ``RELOADING=1``."""
        self.notifier.reloading()

    def reloaded(self, note: str | None) -> None:
        """A reload ended (``note`` says why it failed, or None): ``READY=1`` again."""
        self.health.note = note
        self.notifier.ready(self.health.status())
