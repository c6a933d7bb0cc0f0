"""The long-running bridge process: routes built once, the embedded broker, signals, shutdown.

:func:`run_bridge` is ``bridges run``; :func:`build_routes` is what both
``run`` and ``check`` build routes with. Under systemd it notifies
readiness, status and reloads and feeds the watchdog (:class:`Notifier`);
``[bridge] http`` serves ``/metrics``, ``/healthz`` and ``/readyz``; SIGHUP
reloads the config (see ``_reload``).
"""

from __future__ import annotations

from ._embedded import open_embedded, volatile_backlog
from ._notify import Notifier
from ._process import STOP_NOW_WITHIN, Stopped, freeze_heap, run_bridge, shutdown
from ._routes import build_routes

__all__ = [
    "STOP_NOW_WITHIN",
    "Notifier",
    "Stopped",
    "build_routes",
    "freeze_heap",
    "open_embedded",
    "run_bridge",
    "shutdown",
    "volatile_backlog",
]
