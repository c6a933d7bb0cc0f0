"""``[bridge] http``: /metrics, /healthz, /readyz from the real process; secrets shown nowhere."""

from __future__ import annotations

import os
import re
import signal
import socket
from pathlib import Path

import httpx
import pytest
import trio
from family_kit import bridges_command, free_port
from notify_kit import drop, http_url, metric, running_bridge

from bridges.testing import wait_until
from trio_stomp.testing import open_raw_client

SECRET = "s3cr3t-token-7f3a9c41d2"


@pytest.mark.deadline(30)
async def test_metrics_count_what_was_sent(tmp_path: Path) -> None:
    (tmp_path / "inbox").mkdir()
    config = tmp_path / "bridge.toml"
    config.write_text(
        """
[bridge]
http = "127.0.0.1:0"

[routes.files]
source = { type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }
sink = { type = "file", path = "outbox", format = "files" }
batch = { count = 10, time = 0.01 }
"""
    )
    async with running_bridge(config) as (process, notify, output), httpx.AsyncClient() as http:
        await notify.wait_for(lambda f: f.get("READY") == "1")
        url = await http_url(output)
        assert (await http.get(f"{url}/readyz")).status_code == 200
        health = await http.get(f"{url}/healthz")
        assert (health.status_code, health.text) == (200, "ok\n")
        for i in range(60):
            drop(tmp_path / "inbox" / f"m{i:02d}", str(i))
        await wait_until(lambda: len(list((tmp_path / "outbox").glob("*"))) == 60, 0.05)

        async def acked() -> float:
            text = (await http.get(f"{url}/metrics")).text
            return metric(text, "bridges_route_acked_total", "files")

        while await acked() < 60:  # (the last acks follow the writes)  # noqa: ASYNC110
            await trio.sleep(0.05)
        text = (await http.get(f"{url}/metrics")).text
        assert metric(text, "bridges_route_received_total", "files") == 60
        assert metric(text, "bridges_route_written_total", "files") == 60
        assert metric(text, "bridges_route_nacked_total", "files") == 0
        assert metric(text, "bridges_route_in_flight", "files") == 0
        assert metric(text, "bridges_route_batch_size_sum", "files") == 60
        batches = metric(text, "bridges_route_batches_total", "files")
        assert metric(text, "bridges_route_write_seconds_count", "files") == batches
        assert metric(text, "bridges_route_durable_seconds_count", "files") == batches
        assert 'bridges_route_state{route="files",state="running"} 1.0' in text
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            await process.wait()
    assert process.returncode == 0


@pytest.mark.deadline(30)
async def test_metrics_name_what_each_embedded_destination_holds(tmp_path: Path) -> None:
    """Also a queue no route reads: what a stop would lose is on /metrics beforehand."""
    (tmp_path / "inbox").mkdir()
    config = tmp_path / "bridge.toml"
    config.write_text(
        """
[bridge]
http = "127.0.0.1:0"

[broker]
embedded = true
listen = "127.0.0.1:0"

[routes.in]
source = { type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }
sink = { type = "stomp", url = "embedded", destination = "/queue/unread" }
"""
    )
    async with running_bridge(config) as (process, notify, output), httpx.AsyncClient() as http:
        await notify.wait_for(lambda f: f.get("READY") == "1")
        url = await http_url(output)
        for i in range(3):
            drop(tmp_path / "inbox" / f"m{i}", str(i))

        async def held() -> str:
            return (await http.get(f"{url}/metrics")).text

        pattern = 'bridges_embedded_held{destination="/queue/unread"} 3.0'
        while pattern not in await held():  # noqa: ASYNC110 (a gauge: nothing to wait on)
            await trio.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await process.wait() == 4  # and the stop names the same queue
    assert "3 message(s) lost in /queue/unread (3)" in output.decode()


async def refuse(stream: trio.SocketStream, seen: list[bytes]) -> None:
    """An HTTP server that records each request's head and answers 401."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        data += chunk
    seen.append(data.split(b"\r\n\r\n")[0])
    await stream.send_all(
        b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 7\r\nconnection: close\r\n\r\ndenied\n"
    )
    await stream.aclose()


@pytest.mark.deadline(30)
async def test_a_credential_is_used_and_shown_nowhere(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    name = "token"
    (creds / name).write_text(SECRET + "\n")
    (tmp_path / "inbox").mkdir()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    hook = f"http://127.0.0.1:{port}/hook"
    config = tmp_path / "bridge.toml"
    config.write_text(
        f"""
[bridge]
http = "127.0.0.1:0"

[routes.hook]
source = {{ type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "http", url = "{hook}", bearer_token = "${{credential:{name}}}" }}
dead_letter = {{ type = "file", path = "dead" }}
retry = {{ attempts = 1 }}
"""
    )
    env = {"CREDENTIALS_DIRECTORY": str(creds)}
    checked = await trio.run_process(
        [*bridges_command(), "check", str(config)],
        capture_stdout=True,
        capture_stderr=True,
        env={**os.environ, **env},
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    check_output = (checked.stdout + checked.stderr).decode()
    seen: list[bytes] = []
    async with trio.open_nursery() as server:
        server.start_soon(trio.serve_listeners, lambda s: refuse(s, seen), listeners)
        async with (
            running_bridge(config, env, args=("-v", "--log-format", "json")) as running,
            httpx.AsyncClient() as http,
        ):
            process, notify, output = running
            await notify.wait_for(lambda f: f.get("READY") == "1")
            url = await http_url(output)
            drop(tmp_path / "inbox" / "a.txt", "hello")
            await wait_until(lambda: any((tmp_path / "dead").glob("*")), 0.05)
            await wait_until(lambda: b"dead-lettered" in output, 0.05)
            metrics = (await http.get(f"{url}/metrics")).text
            assert metric(metrics, "bridges_route_dead_lettered_total", "hook") == 1
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                await process.wait()
        server.cancel_scope.cancel()
    assert seen
    assert f"authorization: bearer {SECRET}".encode() in seen[0].lower()
    dead = "".join(p.read_text() for p in (tmp_path / "dead").glob("*"))
    assert "401" in dead  # the dead letter says why
    everywhere = {
        "bridges run output": output.decode(),
        "bridges check output": check_output,
        "notify messages": notify.text(),
        "/metrics": metrics,
        "dead letters": dead,
    }
    for where, text in everywhere.items():
        assert text, where
        assert SECRET not in text, where


async def test_an_http_address_in_use_is_a_config_error(tmp_path: Path) -> None:
    from bridges import ConfigError, default_registry, parse_config, run_bridge

    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    (tmp_path / "inbox").mkdir()
    data = {
        "bridge": {"http": f"127.0.0.1:{port}"},
        "routes": {
            "r": {
                "source": {"type": "file", "path": str(tmp_path / "inbox")},
                "sink": {"type": "file", "path": str(tmp_path / "out")},
            }
        },
    }
    registry = default_registry(plugins=False)
    config = parse_config(data, registry, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=f"bridge.http: cannot listen on 127.0.0.1:{port}"):
        await run_bridge(config, registry, say=lambda _: None)
    await listener.aclose()


@pytest.mark.deadline(30)
async def test_refused_webhooks_are_counted_by_reason_and_logged(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "bridge.toml"
    config.write_text(
        f"""
[bridge]
http = "127.0.0.1:{port}"

[routes.hooks]
source = {{ type = "http", listen = "127.0.0.1:{port}", path = "/hooks", bearer_token = "t" }}
sink = {{ type = "file", path = "outbox", format = "files" }}
"""
    )
    async with running_bridge(config) as (process, notify, output), httpx.AsyncClient() as http:
        await notify.wait_for(lambda f: f.get("READY") == "1")
        url = f"http://127.0.0.1:{port}"
        for _ in range(3):
            assert (await http.post(f"{url}/hooks", content=b"x")).status_code == 401
        ok = await http.post(f"{url}/hooks", content=b"x", headers={"authorization": "Bearer t"})
        assert ok.status_code == 204
        text = (await http.get(f"{url}/metrics")).text
        pattern = r'^bridges_http_refused_total\{reason="(\w+)",route="hooks"\} (\S+)$'
        refused = dict(re.findall(pattern, text, re.MULTILINE))
        assert refused["unauthorized"] == "3.0"
        assert refused["max_per_peer"] == refused["evicted"] == "0.0"
        await wait_until(lambda: b"refused 1 request" in output, 0.05)
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            await process.wait()
    lines = [line for line in output.decode().splitlines() if "bridges.http: http /hooks" in line]
    # The first at once, the other two when the route stopped: one line per interval.
    assert len(lines) == 2, lines
    assert "refused 1 request(s): 1 x 401 unauthorized (last: 127.0.0.1: " in lines[0]
    assert "refused 2 request(s): 2 x 401 unauthorized" in lines[1]


@pytest.mark.deadline(30)
async def test_what_the_duplicate_window_drops_is_counted_per_destination(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "bridge.toml"
    config.write_text(
        f"""
[bridge]
http = "127.0.0.1:0"

[broker]
embedded = true
listen = "127.0.0.1:{port}"

[routes.in]
source = {{ type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "stomp", url = "embedded", destination = "/queue/in" }}
"""
    )
    (tmp_path / "inbox").mkdir()
    async with running_bridge(config) as (process, notify, output), httpx.AsyncClient() as http:
        await notify.wait_for(lambda f: f.get("READY") == "1")
        url = await http_url(output)
        async with open_raw_client(port) as client:
            for n in range(3):  # one message, sent again twice: 2 dropped by the window
                headers = {"destination": "/queue/x", "bridge-id": "order-1", "receipt": f"{n}"}
                await client.send("SEND", headers, b"once")
                await client.receipt(f"{n}")
        text = (await http.get(f"{url}/metrics")).text
        assert 'bridges_duplicates_dropped_total{destination="/queue/x"} 2.0' in text
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            await process.wait()
    said = output.decode()
    # Logged at INFO, sampled: the first drop to a destination, with its id.
    assert said.count("duplicate window: dropped a SEND to '/queue/x'") == 1
    assert "'order-1'" in said
