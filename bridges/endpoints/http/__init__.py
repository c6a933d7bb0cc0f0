"""The ``http`` family: inbound webhooks (source) and outbound webhooks (sink).

:mod:`.source` (requests in, answered 2xx once durable), :mod:`.sink` (one
request per message, durable on a 2xx), :mod:`.listener` (one server
per listen address, shared by every route and the service; the HTTP/1.1
server itself is :mod:`.server`) and
:mod:`.signatures` (Standard Webhooks and GitHub HMAC, both directions).

Other code that wants a path on a bridge's HTTP server (the service's
``/metrics``) uses :func:`listen` and :meth:`HttpListener.mount`.
"""

from __future__ import annotations

from bridges import Registry

from .listener import App, HttpListener, ListenAddress, listen, open_listener, respond
from .signatures import SignatureError
from .sink import HttpSink, HttpSinkConfig, HttpTransient
from .source import HttpSource, HttpSourceConfig

__all__ = [
    "App",
    "HttpListener",
    "HttpSink",
    "HttpSinkConfig",
    "HttpSource",
    "HttpSourceConfig",
    "HttpTransient",
    "ListenAddress",
    "SignatureError",
    "listen",
    "open_listener",
    "register",
    "respond",
]


def register(registry: Registry) -> None:
    """Register the ``http`` source and sink."""
    registry.register("source", "http", HttpSourceConfig, HttpSource.build)
    registry.register("sink", "http", HttpSinkConfig, HttpSink.build)
