"""The long-running bridge process: routes built once, the embedded broker, signals, shutdown.

:func:`run_bridge` is ``bridges run``; :func:`build_routes` is what both
``run`` and ``check`` build routes with. Health, metrics, systemd
notification and reload will land here.
"""

from __future__ import annotations

from ._embedded import open_embedded
from ._process import STOP_NOW_WITHIN, Stopped, freeze_heap, run_bridge, shutdown, volatile_backlog
from ._routes import build_routes

__all__ = [
    "STOP_NOW_WITHIN",
    "Stopped",
    "build_routes",
    "freeze_heap",
    "open_embedded",
    "run_bridge",
    "shutdown",
    "volatile_backlog",
]
