"""``bridges run``: the quickstart as written, graceful shutdown, the embedded broker drained."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
from functools import partial
from pathlib import Path

import pytest
import trio
from family_kit import bridges_command, read_until

from bridges import ConfigError, default_registry, load_config, run_bridge
from bridges.service import freeze_heap
from bridges.service._process import GC_THRESHOLD
from bridges.testing import wait_until

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "examples" / "quickstart.toml"


@pytest.mark.deadline(30)
async def test_the_quickstart_works_exactly_as_written(tmp_path: Path) -> None:
    process = await trio.lowlevel.open_process(
        [*bridges_command(), "run", str(QUICKSTART)],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    output = bytearray()
    try:
        assert process.stderr is not None
        await read_until(process.stderr, output, b"Ctrl-C to stop")
        assert b"drop files into ./inbox; they appear in ./outbox/" in output
        (tmp_path / "inbox" / "hello.txt.tmp").write_text("hello\n")
        (tmp_path / "inbox" / "hello.txt.tmp").rename(tmp_path / "inbox" / "hello.txt")
        (tmp_path / "inbox" / "data.bin").write_bytes(b"\x00\xff")
        outbox = tmp_path / "outbox"
        with trio.fail_after(15):
            await wait_until(lambda: (outbox / "data.bin").exists(), 0.05)
            await wait_until(lambda: (outbox / "hello.txt").exists(), 0.05)
        assert (tmp_path / "outbox" / "hello.txt").read_text() == "hello\n"
        assert (tmp_path / "outbox" / "data.bin").read_bytes() == b"\x00\xff"
        assert (tmp_path / "inbox" / "done" / "hello.txt").exists()
        process.send_signal(signal.SIGINT)
        with trio.fail_after(15):
            status = await process.wait()
        rest = await process.stderr.receive_some(65536)
        assert status == 0, bytes(output + rest)
        assert b"stopped" in rest
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def fast_quickstart(tmp_path: Path, *, volatile: bool = False) -> Path:
    text = QUICKSTART.read_text().replace('listen = "127.0.0.1:61633"', 'listen = "127.0.0.1:0"')
    text = text.replace("settle = 0.5", "settle = 0")
    assert 'listen = "127.0.0.1:0"' in text
    if volatile:
        text = text.replace('data_dir = "state/broker"', "")
        assert "data_dir" not in text
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    return path


@pytest.mark.deadline(30)
async def test_sigterm_stops_taking_and_drains_the_embedded_broker_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(fast_quickstart(tmp_path, volatile=True), default_registry(plugins=False))
    said: list[str] = []
    async with trio.open_nursery() as nursery:
        routes = await nursery.start(
            partial(run_bridge, config, default_registry(plugins=False), say=said.append)
        )
        feeder, drainer = routes
        for route in routes:
            await route.ready.wait()
        for i in range(300):
            (tmp_path / "inbox" / f"f{i:03d}").write_text(str(i))
        await wait_until(lambda: feeder.stats.written >= 100)
        os.kill(os.getpid(), signal.SIGTERM)
    assert any(line.startswith("SIGTERM: stopping") for line in said)
    done = sorted(p.name for p in (tmp_path / "inbox" / "done").iterdir())
    out = sorted(p.name for p in (tmp_path / "outbox").iterdir())
    assert out == done  # whatever left the inbox reached the outbox: the queue was drained
    assert len(done) >= 100
    assert feeder.stats.handed_back == 0
    assert drainer.stats.handed_back == 0


async def test_a_port_in_use_is_a_config_error(tmp_path: Path) -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    text = fast_quickstart(tmp_path).read_text().replace("127.0.0.1:0", f"127.0.0.1:{port}")
    (tmp_path / "bridge.toml").write_text(text)
    registry = default_registry(plugins=False)
    config = load_config(tmp_path / "bridge.toml", registry, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=f"broker.listen: cannot listen on 127.0.0.1:{port}"):
        await run_bridge(config, default_registry(plugins=False), say=lambda _: None)
    await listener.aclose()


def test_freeze_heap_freezes_what_is_there_and_collects_young_objects_less_often() -> None:
    before = gc.get_threshold()
    try:
        freeze_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_THRESHOLD, *before[1:])
        assert before[0] < GC_THRESHOLD
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
