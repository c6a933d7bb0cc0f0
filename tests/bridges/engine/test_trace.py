"""W3C trace context: a traceparent leaves the route with the same trace and a new span id."""

from __future__ import annotations

import os
import re
import signal
from functools import partial
from pathlib import Path

import pytest
import trio

import trio_stomp
from bridges import Message, default_registry, load_config, run_bridge
from bridges._trace import hop, next_hop

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


def test_a_hop_keeps_trace_and_flags_and_changes_the_span() -> None:
    moved = next_hop(PARENT)
    assert moved is not None
    version, trace, span, flags = moved.split("-")
    assert (version, trace, flags) == ("00", "0af7651916cd43dd8448eb211c80319c", "01")
    assert re.fullmatch("[0-9a-f]{16}", span)
    assert span not in ("b7ad6b7169203331", "0" * 16)
    assert next_hop(PARENT) != moved  # a new span each time


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        "00-" + "0" * 32 + "-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
    ],
)
def test_a_malformed_traceparent_is_left_alone(bad: str) -> None:
    assert next_hop(bad) is None
    message = Message(b"x", {"traceparent": bad})
    assert hop([message])[0] is message


def test_messages_without_trace_context_are_not_copied() -> None:
    batch = [Message(b"a"), Message(b"b", {"k": "v"})]
    assert hop(batch) is batch
    traced = [Message(b"a"), Message(b"b", {"traceparent": PARENT, "tracestate": STATE})]
    out = hop(traced)
    assert out[0] is traced[0]
    assert out[1].headers["tracestate"] == STATE
    assert out[1].headers["traceparent"] != PARENT
    assert traced[1].headers["traceparent"] == PARENT  # the original is not changed


CONFIG = """
[broker]
embedded = true
listen = "127.0.0.1:0"

[routes.relay]
source = { type = "stomp", url = "embedded", destination = "/queue/in" }
sink = { type = "stomp", url = "embedded", destination = "/queue/out" }
"""


async def test_bridges_run_carries_trace_context_through_a_stomp_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bridge.toml").write_text(CONFIG)
    registry = default_registry(plugins=False)
    config = load_config(tmp_path / "bridge.toml", registry)
    said: list[str] = []
    async with trio.open_nursery() as nursery:
        routes = await nursery.start(partial(run_bridge, config, registry, say=said.append))
        await routes[0].ready.wait()
        url = next(m.group(1) for line in said if (m := re.search(r"listening on (\S+)", line)))
        async with trio_stomp.connect(url) as client:
            headers = {"traceparent": PARENT, "tracestate": STATE}
            await client.send("/queue/in", b"traced", headers=headers, receipt=True)
            async with client.subscribe("/queue/out") as sub:
                message = await anext(sub)
        os.kill(os.getpid(), signal.SIGTERM)
    assert message.headers["tracestate"] == STATE
    version, trace, span, flags = message.headers["traceparent"].split("-")
    assert (version, trace, flags) == ("00", "0af7651916cd43dd8448eb211c80319c", "01")
    assert span != "b7ad6b7169203331"


async def test_the_http_family_maps_trace_context_to_http_headers() -> None:
    import httpx

    from bridges import Context
    from bridges.endpoints.http.sink import HttpSink, HttpSinkConfig

    sink = HttpSink(HttpSinkConfig(url="http://127.0.0.1:9/hook"), Context(route="t"))
    message = Message(b"x", {"traceparent": PARENT, "tracestate": STATE, "other": "no"})
    async with httpx.AsyncClient() as client:
        request = sink.request(client, message)
    assert request.headers["traceparent"] == PARENT  # (the route's hop changed it before)
    assert request.headers["tracestate"] == STATE
    assert "other" not in request.headers


def test_the_webhook_source_keeps_trace_context_under_its_own_name() -> None:
    from bridges import Context
    from bridges.endpoints.http.source import HttpSource, HttpSourceConfig

    config = HttpSourceConfig(listen="127.0.0.1:0", path="/hook", signature="none")
    source = HttpSource(config, Context(route="t"))
    scope = {"method": "POST", "path": "/hook", "query_string": b""}
    message = source.message(scope, {"traceparent": PARENT, "tracestate": STATE}, b"x")
    assert message.headers["traceparent"] == PARENT
    assert message.headers["tracestate"] == STATE
