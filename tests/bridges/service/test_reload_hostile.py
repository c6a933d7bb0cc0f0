"""A reload never blocks or kills the running bridge, whatever the new config's files are."""

from __future__ import annotations

import os
import signal
import threading
import time
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from notify_kit import http_url, running_bridge

from bridges import default_registry, load_config, run_bridge
from bridges.service import _reload
from bridges.testing import wait_until

CONFIG = """
[bridge]
http = "127.0.0.1:0"

[routes.files]
source = { type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }
sink = { type = "file", path = "outbox", format = "files" }
"""

WITH_SECRET = """
[routes.more]
source = {{ type = "file", path = "inbox2", settle = 0 }}
sink = {{ type = "stomp", destination = "/queue/x", login = "u", passcode_file = "{path}" }}
"""


async def still_moving(tmp_path: Path, name: str, url: str) -> None:
    """A file dropped now reaches the outbox, and /healthz answers 200."""
    (tmp_path / "inbox" / name).write_text(name)
    with trio.fail_after(5):
        await wait_until(lambda: any((tmp_path / "outbox").glob(f"*_{name}@*")), 0.05)
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{url}/healthz")).status_code == 200


@pytest.mark.deadline(40)
async def test_sighup_with_a_fifo_or_dev_zero_keeps_the_routes_moving_and_sigterm_works(
    tmp_path: Path,
) -> None:
    (tmp_path / "inbox").mkdir()
    os.mkfifo(tmp_path / "fifo")
    config = tmp_path / "bridge.toml"
    config.write_text(CONFIG)
    async with running_bridge(config) as (process, notify, output):
        await notify.wait_for(lambda f: f.get("READY") == "1")
        url = await http_url(output)
        await still_moving(tmp_path, "a", url)
        for n, secret in enumerate((tmp_path / "fifo", Path("/dev/zero"))):
            config.write_text(CONFIG + WITH_SECRET.format(path=secret))
            before = len(notify.messages)
            started = trio.current_time()
            process.send_signal(signal.SIGHUP)
            failed = await notify.wait_for(lambda f: "reload failed" in f.get("STATUS", ""), before)
            assert trio.current_time() - started < 3  # refused by name at once, not by a timeout
            assert failed["STATUS"].startswith("reload failed (1 problem in the config; still")
            await still_moving(tmp_path, f"b{n}", url)
        # The config file itself a FIFO: the same.
        config.unlink()
        os.mkfifo(config)
        before = len(notify.messages)
        process.send_signal(signal.SIGHUP)
        await notify.wait_for(lambda f: "reload failed" in f.get("STATUS", ""), before)
        await still_moving(tmp_path, "c", url)
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            await process.wait()
    text = output.decode()
    assert process.returncode == 0, text
    fifo, zero = str(tmp_path / "fifo"), "/dev/zero"
    assert f"route 'more': sink.passcode_file: cannot read {fifo!r}: a FIFO, not a regular" in text
    assert f"cannot read {zero!r}: a character device, not a regular file" in text, text
    assert f"reload: {config}: cannot read: a FIFO, not a regular file" in text, text
    assert text.rstrip().endswith("bridges: stopped"), text


@pytest.mark.deadline(30)
async def test_a_load_that_hangs_is_abandoned_and_sigterm_stops_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A secret file on a file system that does not answer: open() blocks in the
    # kernel. No unprivileged test can make one, so open() waits on an event.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inbox").mkdir()
    (tmp_path / "hung").write_text("x")
    release = threading.Event()
    hanging = threading.Event()
    real_open = os.open

    def hanging_open(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith("hung"):
            hanging.set()
            release.wait(30)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", hanging_open)
    path = tmp_path / "bridge.toml"
    path.write_text(CONFIG.replace('http = "127.0.0.1:0"', ""))
    registry = default_registry(plugins=False)
    said: list[str] = []
    try:
        async with trio.open_nursery() as nursery:
            routes = await nursery.start(
                partial(run_bridge, load_config(path, registry), registry, say=said.append)
            )
            (files,) = routes
            await files.ready.wait()
            # The first reload: the read times out, by name, and the route went on.
            path.write_text(CONFIG + WITH_SECRET.format(path=tmp_path / "hung"))
            os.kill(os.getpid(), signal.SIGHUP)
            (tmp_path / "inbox" / "a").write_text("a")
            await wait_until(lambda: files.stats.written == 1, 0.02)
            await wait_until(lambda: any("reload failed" in line for line in said), 0.02)
            # The second: the whole load's deadline passes first.
            monkeypatch.setattr(_reload, "RELOAD_TIMEOUT", 0.3)
            os.kill(os.getpid(), signal.SIGHUP)
            await wait_until(lambda: sum("reload failed" in line for line in said) == 2, 0.02)
            monkeypatch.setattr(_reload, "RELOAD_TIMEOUT", 10.0)
            (tmp_path / "inbox" / "b").write_text("b")
            await wait_until(lambda: files.stats.written == 2, 0.02)
            # The third: SIGTERM while its read hangs.
            hanging.clear()
            os.kill(os.getpid(), signal.SIGHUP)
            await trio.to_thread.run_sync(hanging.wait)
            stopped_at = time.monotonic()
            os.kill(os.getpid(), signal.SIGTERM)
        took = time.monotonic() - stopped_at
    finally:
        release.set()
    assert took < 3.0, took  # not held up by the read (RELOAD_TIMEOUT is 10 s here)
    assert said[-1] == "stopped", said
    text = "\n".join(said)
    hung = str(tmp_path / "hung")
    assert f"sink.passcode_file: cannot read {hung!r}: not read within 1 s" in text, text
    assert "reload failed (TimeoutError: " in text, text
    assert f"{path}: not read and checked within 0.3 s; still running the previous" in text
    assert files.stats.written == 2
