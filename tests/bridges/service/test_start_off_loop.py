"""``bridges run`` builds its routes off the event loop: a hung file system never hangs the start.

A file endpoint checks at construction that it may write its folder
(``statvfs``, ``access``). On a network mount that does not answer, that
call blocks in the kernel; no unprivileged test can make such a mount, so
``os.statvfs`` waits on an event instead.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio

from bridges import Config, Registry, default_registry, load_config, run_bridge
from bridges.service import _routes
from bridges.testing import wait_until

CONFIG = """
[routes.files]
source = { type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }
sink = { type = "file", path = "outbox/hung", format = "files" }
"""


@attrs.frozen
class Hung:
    """A config whose file sink's folder check hangs: ``os.statvfs`` of ``outbox``
    blocks until released (at most 5 s)."""

    path: Path
    registry: Registry
    config: Config  # (loaded before the check hangs: load_config checks it too)
    hanging: threading.Event  # set once a statvfs blocks
    release: threading.Event  # set: it returns (and every later one at once)


@pytest.fixture
def hung(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Hung]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inbox").mkdir()
    (tmp_path / "outbox").mkdir()
    path = tmp_path / "bridge.toml"
    path.write_text(CONFIG)
    registry = default_registry(plugins=False)
    config = load_config(path, registry)
    release, hanging = threading.Event(), threading.Event()
    real_statvfs = os.statvfs

    def statvfs(path: object) -> os.statvfs_result:
        if str(path).endswith("outbox"):
            hanging.set()
            release.wait(5)
        return real_statvfs(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "statvfs", statvfs)
    try:
        yield Hung(path, registry, config, hanging, release)
    finally:
        release.set()


async def longest_stall(done: trio.Event) -> float:
    """The longest the event loop went without running this task until ``done``, s."""
    worst = 0.0
    while not done.is_set():
        before = time.monotonic()
        await trio.sleep(0.01)
        worst = max(worst, time.monotonic() - before - 0.01)
    return worst


@pytest.mark.deadline(20)
async def test_a_hung_file_system_at_start_leaves_the_loop_running_and_sigterm_stops_it(
    hung: Hung,
) -> None:
    said: list[str] = []
    done = trio.Event()
    stalls: list[float] = []

    async def watch() -> None:
        stalls.append(await longest_stall(done))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)

        async def run() -> None:
            stopped = await run_bridge(hung.config, hung.registry, say=said.append)
            assert stopped.clean, stopped
            done.set()

        nursery.start_soon(run)
        await trio.to_thread.run_sync(hung.hanging.wait)
        await trio.sleep(0.3)  # (the loop keeps running while the check hangs)
        started = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        await done.wait()
        took = time.monotonic() - started
    assert stalls[0] < 0.5, stalls  # 5 s when the routes are built on the loop
    assert took < 1, took  # not held up by the hung check
    assert said == ["SIGTERM: stopping (the routes were being built)", "stopped"], said


@pytest.mark.deadline(20)
async def test_a_start_that_cannot_build_its_routes_in_time_fails_by_name(
    hung: Hung, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_routes, "BUILD_TIMEOUT", 0.3)
    started = time.monotonic()
    with pytest.raises(TimeoutError) as raised:
        await run_bridge(hung.config, hung.registry, say=lambda _: None)
    assert time.monotonic() - started < 2
    assert str(raised.value).startswith("routes not built within 0.3 s (an endpoint blocked"), (
        raised.value
    )
    assert hung.hanging.is_set()


@pytest.mark.deadline(20)
async def test_a_sighup_while_the_routes_are_built_reloads_once_they_run(hung: Hung) -> None:
    said: list[str] = []
    async with trio.open_nursery() as nursery:
        run = partial(run_bridge, hung.config, hung.registry, say=said.append)
        nursery.start_soon(run)
        await trio.to_thread.run_sync(hung.hanging.wait)
        hung.path.write_text(CONFIG.replace("outbox/hung", "outbox/new"))
        os.kill(os.getpid(), signal.SIGHUP)
        await trio.sleep(0.2)
        hung.release.set()
        await wait_until(lambda: "reloaded: running 1 route(s)" in said, 0.02)
        os.kill(os.getpid(), signal.SIGTERM)
    assert said[-1] == "stopped", said
    assert any(line.startswith("reloading ") and "1 starting" in line for line in said), said
