"""``bridges run`` with the embedded broker volatile (exit 4, one line) or durable (data_dir).

The config: files go from ./inbox to the embedded broker's /queue/q; a
second route reads /queue/q, one message at a time, into a STOMP broker that
does not listen, so the queue keeps what the first route sent.
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
from family_kit import bridges_command, read_until

from bridges import default_registry, load_config, run_bridge
from bridges.service import Stopped
from bridges.testing import wait_until
from trio_stomp.broker import StoreError

FILES = 20


CONFIG = """
[bridge]
shutdown_timeout = {timeout}

[broker]
embedded = true
listen = "127.0.0.1:0"
{data_dir}

[routes.in]
source = {{ type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "stomp", url = "embedded", destination = "/queue/q" }}

[routes.out]
in_flight = 1
source = {{ type = "stomp", url = "embedded", destination = "/queue/q" }}
sink = {sink}
"""
NOWHERE = '{ type = "stomp", url = "stomp://127.0.0.1:1", destination = "/queue/x" }'
OUTBOX = '{ type = "file", path = "outbox", format = "files", name = "{header:file-name}" }'


def _write_config(tmp_path: Path, *, data_dir: bool, sink: str, timeout: float = 0.5) -> Path:
    path = tmp_path / "bridge.toml"
    text = CONFIG.format(
        timeout=timeout, data_dir='data_dir = "state"' if data_dir else "", sink=sink
    )
    path.write_text(text)
    return path


async def _run_until_queued(tmp_path: Path, config: Path) -> tuple[int, str]:
    """Run the bridge, drop the files, SIGTERM once they all left the inbox."""
    process = await trio.lowlevel.open_process(
        [*bridges_command(), "run", str(config)], cwd=tmp_path, stderr=subprocess.PIPE
    )
    output = bytearray()
    try:
        assert process.stderr is not None
        with trio.fail_after(15):
            await read_until(process.stderr, output, b"route 'out'")
        (tmp_path / "inbox").mkdir(exist_ok=True)
        for i in range(FILES):  # written aside, renamed in: settle = 0 relies on renames
            aside = tmp_path / "inbox" / f"f{i:02d}.tmp"
            aside.write_text(str(i))
            aside.rename(aside.with_suffix(""))
        done = tmp_path / "inbox" / "done"
        with trio.fail_after(15):
            await wait_until(lambda: done.exists() and len(list(done.iterdir())) == FILES, 0.05)
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            status = await process.wait()
            while chunk := await process.stderr.receive_some(65536):
                output += chunk
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return status, output.decode()


@pytest.mark.deadline(40)
async def test_a_volatile_broker_left_with_messages_exits_4_naming_count_and_fix(
    tmp_path: Path,
) -> None:
    config = _write_config(tmp_path, data_dir=False, sink=NOWHERE)
    status, output = await _run_until_queued(tmp_path, config)
    assert "the broker is volatile" in output
    last = output.strip().splitlines()[-1]
    assert status == 4, output
    found = re.search(r"(\d+) message\(s\) lost with the volatile embedded broker", last)
    assert found, last
    assert FILES - 1 <= int(found.group(1)) <= FILES  # (one may be in flight)
    assert "[broker] data_dir" in last


@pytest.mark.deadline(60)
async def test_a_durable_broker_keeps_the_queue_across_a_stop(tmp_path: Path) -> None:
    config = _write_config(tmp_path, data_dir=True, sink=NOWHERE)
    status, output = await _run_until_queued(tmp_path, config)
    assert "volatile" not in output
    assert "lost" not in output
    assert status == 3, output
    last = output.strip().splitlines()[-1]
    found = re.search(r"(\d+) message\(s\) left in the embedded broker's store", last)
    assert found, last
    assert FILES - 1 <= int(found.group(1)) <= FILES  # (one may be in flight)
    # Started again with a sink that works, everything arrives.
    _write_config(tmp_path, data_dir=True, sink=OUTBOX)
    process = await trio.lowlevel.open_process(
        [*bridges_command(), "run", str(config)], cwd=tmp_path, stderr=subprocess.PIPE
    )
    outbox = tmp_path / "outbox"
    try:
        with trio.fail_after(20):
            await wait_until(lambda: outbox.exists() and len(list(outbox.iterdir())) == FILES)
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert sorted(p.read_text() for p in outbox.iterdir()) == sorted(map(str, range(FILES)))


def test_exit_status_and_last_line() -> None:
    assert Stopped().exit_status == 0
    assert Stopped(unacknowledged=2).exit_status == 3
    assert Stopped(kept=2).exit_status == 3
    assert "2 message(s) left in the embedded broker's store" in Stopped(kept=2).summary()
    lost = Stopped(unacknowledged=2, lost=5)
    assert lost.exit_status == 4
    assert "5 message(s) lost" in lost.summary()
    assert "[broker] data_dir" in lost.summary()


@pytest.mark.deadline(20)
async def test_a_store_that_cannot_write_stops_the_bridge_with_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def commit(self: Any, adds: Any, removes: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr("trio_stomp.broker._store._Database.commit", commit)
    path = _write_config(tmp_path, data_dir=True, sink=OUTBOX)
    registry = default_registry(plugins=False)
    config = load_config(path, registry, base_dir=tmp_path)
    (tmp_path / "inbox").mkdir()
    for i in range(5):
        (tmp_path / "inbox" / f"f{i}").write_text(str(i))
    with pytest.raises(StoreError, match="disk is full") as info:
        await run_bridge(config, registry, say=lambda _: None)
    assert str(tmp_path / "state") in str(info.value)
    done = tmp_path / "inbox" / "done"
    assert not done.exists() or not list(done.iterdir())  # nothing was confirmed
