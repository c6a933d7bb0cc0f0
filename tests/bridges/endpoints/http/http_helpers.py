"""Helpers for the http family's tests: a route with an http source, run on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from bridges import Context, Route, Sink
from bridges.endpoints.http import HttpListener, HttpSource, HttpSourceConfig
from bridges.testing import wait_until


@asynccontextmanager
async def running_source(
    sink: Sink,
    *,
    context: Context | None = None,
    route_options: dict[str, Any] | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[str, Route, HttpSource]]:
    """An http source on 127.0.0.1 (a free port) -> ``sink``, running; yields (base URL, route,
    source). Leaving the block stops the route and waits for it."""
    settings.setdefault("listen", "127.0.0.1:0")
    settings.setdefault("path", "/hooks")
    source = HttpSource(HttpSourceConfig(**settings), context or Context(route="h"))
    options = {"batch_time": 0.0, **(route_options or {})}
    route = Route("h", source, sink, **options)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route.run)
        await wait_until(lambda: source.listener is not None)
        listener = source.listener
        assert isinstance(listener, HttpListener)
        try:
            yield listener.url, route, source
        finally:
            route.stop()
            with trio.move_on_after(5):
                await route.finished.wait()
            nursery.cancel_scope.cancel()
