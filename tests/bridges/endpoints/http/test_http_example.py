"""examples/webhook-to-stomp.toml runs as written (on free ports): in, through STOMP, out, in."""

from __future__ import annotations

import datetime
import socket
import tomllib
from pathlib import Path

import httpx
import pytest
import standardwebhooks
import trio

import trio_stomp
from bridges import default_registry, parse_config
from bridges.service import run_bridge

EXAMPLE = Path(__file__).parents[4] / "examples" / "webhook-to-stomp.toml"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.deadline(30)
async def test_the_webhook_example_carries_a_signed_webhook_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORDERS_SECRET", SECRET)
    http_port, stomp_port = free_port(), free_port()
    text = EXAMPLE.read_text().replace("8080", str(http_port)).replace("61634", str(stomp_port))
    registry = default_registry(plugins=False)
    config = parse_config(tomllib.loads(text), registry, file=str(EXAMPLE))
    base = f"http://127.0.0.1:{http_port}"
    body = '{"order": 17}'
    now = datetime.datetime.now(datetime.UTC)
    headers = {
        "webhook-id": "msg_17",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": standardwebhooks.Webhook(SECRET).sign("msg_17", now, body),
        "content-type": "application/json",
    }
    said: list[str] = []
    async with trio.open_nursery() as nursery:
        routes = await nursery.start(
            lambda task_status: run_bridge(
                config, registry, say=said.append, task_status=task_status
            )
        )
        for route in routes:
            await route.ready.wait()
        async with httpx.AsyncClient(trust_env=False) as client:
            assert (await client.get(f"{base}/healthz")).status_code == 200
            tampered = await client.post(
                f"{base}/hooks/orders", content=body + " ", headers=headers
            )
            assert tampered.status_code == 401
            answer = await client.post(f"{base}/hooks/orders", content=body, headers=headers)
            assert answer.status_code == 204
        async with trio_stomp.connect(f"stomp://127.0.0.1:{stomp_port}") as stomp:
            async with stomp.subscribe("/queue/orders.delivered") as sub:
                with trio.fail_after(10):
                    message = await sub.__anext__()
        nursery.cancel_scope.cancel()
    assert message.body == body.encode()
    # The id went all the way round, under each webhook route's name in turn: an
    # http source namespaces the webhook-id it is given (a sender's header is
    # not trusted to name another route's ids), so each hop adds its own.
    assert message.headers["bridge-id"] == "echo-in/orders-in/msg_17"
    assert message.headers["content-type"] == "application/json"
    assert message.headers["http-path"] == "/hooks/echo"


def test_check_names_the_file_route_and_key_of_bad_http_settings() -> None:
    from bridges import ConfigError

    text = """
[routes.in]
source = { type = "http", listen = "0.0.0.0:8080", path = "/x", max_bdy = 5 }
sink = { type = "http", url = "http://127.0.0.1:9/{header:x}", concurrency = 0 }

[routes.open]
source = { type = "http", listen = "0.0.0.0:8080", path = "/y" }
sink = { type = "http", url = "ftp://nowhere/", signature = "github" }
"""
    registry = default_registry(plugins=False)
    with pytest.raises(ConfigError) as info:
        parse_config(tomllib.loads(text), registry, file="w.toml")
    problems = {str(problem) for problem in info.value.problems}
    assert "w.toml: route 'in': source.max_bdy: unknown key; did you mean 'max_body'?" in {
        p.split(" (known")[0] for p in problems
    }
    assert any(p.startswith("w.toml: route 'in': sink.concurrency: must be >= 1") for p in problems)
    assert any(
        p.startswith("w.toml: route 'open': source.signature: 0.0.0.0:8080 is not loopback")
        for p in problems
    )
    assert any(p.startswith("w.toml: route 'open': sink.url: expected http(s)") for p in problems)
