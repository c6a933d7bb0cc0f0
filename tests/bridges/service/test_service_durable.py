"""``bridges run`` with the embedded broker volatile (exit 4, one line) or durable (data_dir).

The config: files go from ./inbox to the embedded broker's /queue/q; a
second route reads /queue/q, one message at a time, into a STOMP broker that
does not listen, so the queue keeps what the first route sent. The last
tests send to queues that no route reads, and to a topic a client holds:
the stop counts them all, by name.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
from family_kit import bridges_command, free_port, read_until

from bridges import default_registry, load_config, run_bridge
from bridges.service import Stopped
from bridges.testing import wait_until
from trio_stomp.broker import StoreError
from trio_stomp.testing import open_raw_client

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
    found = re.fullmatch(
        r"bridges: stopped; (\d+) message\(s\) lost in /queue/q \((\d+)\) "
        r"\(set \[broker\] data_dir to keep them\)",
        last,
    )
    assert found, last
    assert found.group(1) == found.group(2)
    assert FILES - 1 <= int(found.group(1)) <= FILES  # (one may be in flight)


@pytest.mark.deadline(60)
async def test_a_durable_broker_keeps_the_queue_across_a_stop(tmp_path: Path) -> None:
    config = _write_config(tmp_path, data_dir=True, sink=NOWHERE)
    status, output = await _run_until_queued(tmp_path, config)
    assert "volatile" not in output
    assert "lost" not in output
    assert status == 3, output
    last = output.strip().splitlines()[-1]
    found = re.fullmatch(
        r"bridges: stopped; (\d+) message\(s\) kept in (.+): /queue/q \((\d+)\)", last
    )
    assert found, last
    assert found.group(1) == found.group(3)
    assert found.group(2) == str(tmp_path / "state")
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
    assert Stopped().summary() == "stopped"
    assert Stopped(handed_back=2).exit_status == 3
    kept = Stopped(kept=(("/queue/a", 1), ("/queue/b", 2)), data_dir="/var/lib/b")
    assert kept.exit_status == 3
    assert kept.summary() == "stopped; 3 message(s) kept in /var/lib/b: /queue/a (1), /queue/b (2)"
    lost = Stopped(handed_back=2, lost=(("/queue/a", 5),))
    assert lost.exit_status == 4
    assert lost.summary() == (
        "stopped; 2 message(s) handed back to their sources (which deliver them again); "
        "5 message(s) lost in /queue/a (5) (set [broker] data_dir to keep them)"
    )
    both = Stopped(kept=(("/queue/a", 1),), lost=(("/topic/t", 2),), data_dir="d")
    assert both.exit_status == 4
    assert both.summary() == (
        "stopped; 1 message(s) kept in d: /queue/a (1); "
        "2 message(s) lost in /topic/t (2) (topic messages are never stored)"
    )


# -- every destination counts, read by a route or not --------------------------------------


UNREAD = """
[broker]
embedded = true
listen = "127.0.0.1:{port}"
{data_dir}

[routes.b]
source = {{ type = "file", path = "b", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "stomp", url = "embedded", destination = "/queue/b" }}

[routes.a]
source = {{ type = "file", path = "a", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "stomp", url = "embedded", destination = "/queue/a" }}

[routes.t]
source = {{ type = "file", path = "t", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "stomp", url = "embedded", destination = "/topic/t" }}
"""


async def _stop_with_unread(tmp_path: Path, *, data_dir: bool, files: dict[str, int]) -> Stopped:
    """Run UNREAD in this process with ``files`` in each inbox, a client holding
    (never acking) what /topic/t gets, and SIGINT once every file is done."""
    port = free_port()
    path = tmp_path / "bridge.toml"
    path.write_text(UNREAD.format(port=port, data_dir='data_dir = "state"' if data_dir else ""))
    registry = default_registry(plugins=False)
    config = load_config(path, registry, base_dir=tmp_path)
    for name in ("a", "b", "t"):
        (tmp_path / name).mkdir()
    said: list[str] = []
    async with trio.open_nursery() as nursery:
        stopped: list[Stopped] = []

        async def run() -> None:
            stopped.append(await run_bridge(config, registry, say=said.append))

        nursery.start_soon(run)
        await wait_until(lambda: any("running 3 route(s)" in line for line in said))
        async with open_raw_client(port) as holder:
            await holder.subscribe("/topic/t", ack="client-individual")
            for name, count in files.items():
                for i in range(count):
                    (tmp_path / name / f"f{i}").write_text(f"{name}{i}")
            every = {tmp_path / name / "done": count for name, count in files.items()}
            await wait_until(
                lambda: all(d.exists() and len(list(d.iterdir())) == n for d, n in every.items())
            )
            if files.get("t"):
                await holder.expect("MESSAGE")
            os.kill(os.getpid(), signal.SIGINT)
            await wait_until(lambda: bool(stopped))
    assert said[-1] == stopped[0].summary()
    return stopped[0]


@pytest.mark.deadline(20)
async def test_a_queue_no_route_reads_is_counted_lost_by_name(tmp_path: Path) -> None:
    stopped = await _stop_with_unread(tmp_path, data_dir=False, files={"b": 3, "a": 2})
    assert stopped.exit_status == 4
    assert stopped.summary() == (
        "stopped; 5 message(s) lost in /queue/a (2), /queue/b (3) "
        "(set [broker] data_dir to keep them)"
    )


@pytest.mark.deadline(20)
async def test_a_durable_broker_keeps_unread_queues_and_loses_a_held_topic_message(
    tmp_path: Path,
) -> None:
    stopped = await _stop_with_unread(tmp_path, data_dir=True, files={"b": 2, "t": 1})
    assert stopped == Stopped(
        lost=(("/topic/t", 1),), kept=(("/queue/b", 2),), data_dir=str(tmp_path / "state")
    )
    assert stopped.exit_status == 4


@pytest.mark.deadline(20)
async def test_a_store_that_cannot_write_stops_the_bridge_with_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def commit(self: Any, adds: Any, removes: Any, *rest: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr("trio_stomp.broker._store_database.Database.commit", commit)
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
