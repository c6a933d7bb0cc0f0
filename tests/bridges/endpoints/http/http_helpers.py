"""Helpers for the http family's tests: a route with an http source, run on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from bridges import Context, Route, Sink
from bridges.endpoints.http import (
    HttpListener,
    HttpSource,
    HttpSourceConfig,
    ListenAddress,
    open_listener,
)
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


class Recorder:
    """An ASGI app that records requests and answers from ``script`` (then ``default``).

    Each script entry is (status, headers, body). Attributes:
      requests: (method, path, headers (lower-case, first wins), body), in arrival order.
    """

    def __init__(
        self,
        script: list[tuple[int, dict[str, str], bytes]] | None = None,
        default: int = 200,
    ) -> None:
        self.script = list(script or [])
        self.default = default
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.times: list[float] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        chunks = []
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                return  # the sender gave up mid-request: nothing was received
            chunks.append(event.get("body", b""))
            if not event.get("more_body"):
                break
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode().lower(), value.decode())
        self.requests.append((scope["method"], scope["path"], headers, b"".join(chunks)))
        self.times.append(trio.current_time())
        status, extra, body = self.script.pop(0) if self.script else (self.default, {}, b"")
        out = [(k.encode(), v.encode()) for k, v in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": out})
        await send({"type": "http.response.body", "body": body})

    def ids(self) -> list[str]:
        return [headers.get("webhook-id", "") for _, _, headers, _ in self.requests]


@asynccontextmanager
async def receiver(
    recorder: Recorder, path: str = "/in", port: int = 0
) -> AsyncIterator[HttpListener]:
    """A real HTTP server on 127.0.0.1 serving ``recorder`` at ``path``."""
    async with open_listener(ListenAddress("127.0.0.1", port)) as listener:
        with listener.mount(path, recorder):
            yield listener
