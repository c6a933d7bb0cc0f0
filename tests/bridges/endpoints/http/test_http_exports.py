"""The http family's public surface is pinned, and it registers what the config names."""

from __future__ import annotations

import bridges
from bridges.endpoints import http


def test_the_public_surface_is_pinned() -> None:
    assert sorted(http.__all__) == [
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
    for name in http.__all__:
        assert getattr(http, name) is not None


def test_register_adds_the_http_source_and_sink() -> None:
    registry = bridges.Registry()
    http.register(registry)
    assert registry.names("source") == ["http"]
    assert registry.names("sink") == ["http"]
    assert registry.get("source", "http").config is http.HttpSourceConfig
    assert "http" in bridges.default_registry(plugins=False).names("sink")
