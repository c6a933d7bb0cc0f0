"""The process's service tasks: systemd notification and watchdog, metrics and health over HTTP.

:func:`open_service` runs them for the ``async with`` block, beside the
routes. It sends ``READY=1`` once every route is open (or has failed once
and is retrying), keeps ``STATUS=`` current, feeds the watchdog while the
process is healthy, and serves ``[bridge] http`` when set (:mod:`._metrics`,
imported only then: prometheus-client is the ``service`` extra's).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

import trio

from .._config import Config
from .._engine import Route
from .._shared import Shared
from ._health import Health
from ._notify import Notifier
from ._service import Service

log = logging.getLogger("bridges.service")

#: How often the status line is looked at (sent only when it changed), s.
STATUS_EVERY: Final = 0.5


@asynccontextmanager
async def open_service(
    config: Config,
    routes: Sequence[Route],
    shared: Shared | None = None,
    *,
    notifier: Notifier | None = None,
) -> AsyncIterator[Service]:
    """Run the service tasks for ``routes`` (a live list) for the block.

    Args:
      notifier: systemd's socket; None sends nothing.

    Raises:
      ConfigError: ``[bridge] http`` cannot listen.
    """
    service = Service(
        notifier if notifier is not None else Notifier({}),
        Health(routes, config.bridge.stall_timeout),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.health.run)
        nursery.start_soon(_keep_status, service)
        interval = service.notifier.watchdog_interval
        if interval is not None:
            nursery.start_soon(_feed_watchdog, service, interval / 2)
        if config.bridge.http is not None:
            from ._metrics import serve_metrics  # (prometheus-client: only when asked for)

            await nursery.start(serve_metrics, config, service, shared)
        try:
            yield service
        finally:
            nursery.cancel_scope.cancel()
            service.notifier.close()


async def _keep_status(service: Service) -> None:
    health, notifier = service.health, service.notifier
    while not health.ready:  # (route states have no event to wait on)  # noqa: ASYNC110
        await trio.sleep(STATUS_EVERY / 5)
    notifier.ready(health.status())
    service.ready.set()
    while True:
        await trio.sleep(STATUS_EVERY)
        notifier.status(health.status())


async def _feed_watchdog(service: Service, every: float) -> None:
    health = service.health
    was_healthy = True
    while True:
        healthy = health.healthy
        if healthy:
            service.notifier.watchdog()
        elif was_healthy:
            log.error(
                "not feeding systemd's watchdog: %s",
                f"stuck routes: {', '.join(health.stuck)}" if health.stuck else "event loop lag",
            )
        was_healthy = healthy
        await trio.sleep(every)
