"""SIGHUP reloads the config: unchanged routes untouched, changed ones swapped, nothing lost."""

from __future__ import annotations

import os
import re
import signal
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from notify_kit import http_url, metric, running_bridge

import trio_stomp
from bridges import default_registry, load_config, run_bridge
from bridges.testing import wait_until

COUNT = 5000  # per route: 10,000 in all

CONFIG = """
[broker]
embedded = true
listen = "127.0.0.1:0"

[routes.same]
source = {{ type = "stomp", url = "embedded", destination = "/queue/a" }}
sink = {{ type = "stomp", url = "embedded", destination = "/queue/a-out" }}

[routes.changes]
source = {{ type = "stomp", url = "embedded", destination = "/queue/b" }}
sink = {{ type = "stomp", url = "embedded", destination = "/queue/b-out", headers = {{v = "{v}"}} }}
"""


async def send(url: str, destination: str) -> None:
    async with trio_stomp.connect(url) as client:
        for i in range(COUNT):
            await client.send(destination, str(i), headers={"n": str(i)}, receipt=i % 500 == 499)


async def receive_all(url: str, destination: str) -> list[tuple[str, str | None]]:
    """Every message in ``destination``: (its n, its v header)."""
    got: list[tuple[str, str | None]] = []
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(destination, ack="client-individual") as sub:
            with trio.move_on_after(10):
                async for message in sub:
                    await message.ack()
                    got.append((message.headers["n"], message.headers.get("v")))
                    if len(got) == COUNT:
                        break
            with trio.move_on_after(0.3):
                async for message in sub:  # (a duplicate would come now)
                    got.append((message.headers["n"], message.headers.get("v")))
    return got


@pytest.mark.deadline(60)
async def test_a_reload_while_10000_messages_flow_loses_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bridge.toml"
    path.write_text(CONFIG.format(v="1"))
    registry = default_registry(plugins=False)
    config = load_config(path, registry)
    said: list[str] = []
    async with trio.open_nursery() as nursery:
        routes = await nursery.start(partial(run_bridge, config, registry, say=said.append))
        same, changes = routes
        for route in routes:
            await route.ready.wait()
        url = next(m.group(1) for line in said if (m := re.search(r"listening on (\S+)", line)))
        async with trio.open_nursery() as senders:
            senders.start_soon(send, url, "/queue/a")
            senders.start_soon(send, url, "/queue/b")
            await wait_until(lambda: changes.stats.written >= 1000, 0.01)
            path.write_text(CONFIG.format(v="2"))
            os.kill(os.getpid(), signal.SIGHUP)
            await wait_until(lambda: any(line.startswith("reloaded") for line in said), 0.01)
        assert routes[0] is same  # the unchanged route is the same object...
        assert routes[1] is not changes  # ...the changed one was swapped
        new = routes[1]
        await wait_until(
            lambda: (
                same.stats.written == COUNT and changes.stats.written + new.stats.written >= COUNT
            ),
            0.02,
        )
        a_out = await receive_all(url, "/queue/a-out")
        b_out = await receive_all(url, "/queue/b-out")
        os.kill(os.getpid(), signal.SIGTERM)
    assert same.stats.restarts == 0  # never reconnected, never handed anything back
    assert same.stats.handed_back == 0
    assert changes.stats.nacked == 0
    assert sorted(int(n) for n, _ in a_out) == list(range(COUNT))  # none lost, none twice
    assert sorted(int(n) for n, _ in b_out) == list(range(COUNT))
    versions = [v for _, v in b_out]
    assert versions.count("1") == changes.stats.written >= 1000
    assert versions.count("2") == new.stats.written > 0
    assert any("1 route(s) unchanged, 1 stopping, 1 starting" in line for line in said)


INVALID = """
[bridge]
http = "127.0.0.1:0"

[routes.files]
source = { type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }
sink = { type = "file", path = "outbox", format = "files" }
"""


@pytest.mark.deadline(30)
async def test_sighup_with_a_bad_config_keeps_the_old_one_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "inbox").mkdir()
    config = tmp_path / "bridge.toml"
    config.write_text(INVALID)
    async with running_bridge(config) as (process, notify, output):
        await notify.wait_for(lambda f: f.get("READY") == "1")
        config.write_text(
            INVALID.replace('format = "files"', 'format = "nope"') + "\n[routes.x]\nsource = 1\n"
        )
        process.send_signal(signal.SIGHUP)
        failed = await notify.wait_for(lambda f: "reload failed" in f.get("STATUS", ""))
        assert failed["STATUS"].startswith("reload failed (3 problems in the config; still")
        assert "1 route: 1 running" in failed["STATUS"]
        (tmp_path / "inbox" / "a").write_text("still running")
        await wait_until(lambda: any((tmp_path / "outbox").glob("*_a@*")), 0.05)
        # A good config again: the route changes (a new outbox), READY=1 after RELOADING=1.
        config.write_text(INVALID.replace('"outbox"', '"outbox2"'))
        before = len(notify.messages)
        process.send_signal(signal.SIGHUP)
        await notify.wait_for(lambda f: f.get("READY") == "1", after=before)
        news = [f for _, f in notify.messages[before:]]
        assert "RELOADING" in news[0]
        assert next(f for f in news if "READY" in f)["STATUS"] == "1 route: 1 running"
        (tmp_path / "inbox" / "b").write_text("moved")
        await wait_until(lambda: any((tmp_path / "outbox2").glob("*_b@*")), 0.05)
        # The swapped route's metrics go on from the old one's counts.
        url = await http_url(output)
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"{url}/metrics")).text
            while metric(metrics, "bridges_route_acked_total", "files") < 2:
                await trio.sleep(0.05)
                metrics = (await http.get(f"{url}/metrics")).text
        assert metric(metrics, "bridges_route_received_total", "files") == 2
        assert metric(metrics, "bridges_route_written_total", "files") == 2
        assert metric(metrics, "bridges_route_batch_size_count", "files") == 2
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            await process.wait()
    text = output.decode()
    assert f"reload: {config}: route 'files': sink.format: expected one of" in text, text
    assert f"reload: {config}: route 'x': source: expected a table" in text, text
    assert f"reload: {config}: route 'x': sink: missing (required)" in text, text
    assert process.returncode == 0, text
