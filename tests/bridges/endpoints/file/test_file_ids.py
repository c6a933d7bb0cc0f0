"""The file source's ids are namespaced by route: ``cp -p`` copies (the same name, the same
mtime) dropped into two inboxes whose routes feed one embedded queue are two messages."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import trio
from family_kit import free_port

from bridges import Context, default_registry, load_config, run_bridge
from bridges.endpoints.file import FileSource, FileSourceConfig
from bridges.service import Stopped
from bridges.testing import wait_until
from trio_stomp.testing import open_raw_client

CONFIG = """
[broker]
embedded = true
listen = "127.0.0.1:{port}"

[routes.north]
source = {{ type = "file", path = "north", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "stomp", url = "embedded", destination = "/queue/orders" }}

[routes.south]
source = {{ type = "file", path = "south", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "stomp", url = "embedded", destination = "/queue/orders" }}
"""


@pytest.mark.deadline(30)
async def test_cp_p_copies_in_two_inboxes_feeding_one_queue_are_both_delivered(
    tmp_path: Path,
) -> None:
    port = free_port()
    path = tmp_path / "bridge.toml"
    path.write_text(CONFIG.format(port=port))
    registry = default_registry(plugins=False)
    config = load_config(path, registry, base_dir=tmp_path)
    assert config.broker.duplicate_window == 10_000  # (on in bridges, by default)
    for name in ("north", "south"):
        (tmp_path / name).mkdir()
    original = tmp_path / "order.json"
    original.write_text('{"order": 1}')
    said: list[str] = []
    stopped: list[Stopped] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            stopped.append(await run_bridge(config, registry, say=said.append))

        nursery.start_soon(run)
        await wait_until(lambda: any("running 2 route(s)" in line for line in said))
        async with open_raw_client(port) as consumer:
            await consumer.subscribe("/queue/orders")
            for name in ("north", "south"):  # cp -p: the same name, mtime and bytes
                aside = tmp_path / f".{name}.tmp"
                shutil.copy2(original, aside)
                aside.rename(tmp_path / name / "order.json")
            assert (tmp_path / "north" / "order.json").stat().st_mtime_ns == (
                tmp_path / "south" / "order.json"
            ).stat().st_mtime_ns
            with trio.fail_after(15):
                got = [await consumer.expect("MESSAGE") for _ in range(2)]
        os.kill(os.getpid(), signal.SIGINT)
        await wait_until(lambda: bool(stopped))
    mtime = original.stat().st_mtime_ns
    ids = sorted(frame.headers["bridge-id"] for frame in got)
    assert ids == [f"north/order.json@{mtime}", f"south/order.json@{mtime}"]
    assert [frame.body for frame in got] == [b'{"order": 1}'] * 2


async def test_the_id_is_the_same_when_the_file_is_read_again(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "a.txt").write_text("a")
    config = FileSourceConfig(path="in", settle=0, poll_interval=0.05)
    ids = []
    for _ in range(2):  # a nack, then a restart (a new source: the same config)
        source = FileSource(config, Context(route="in/box", base_dir=tmp_path))
        async with source.open() as receiver:
            with trio.fail_after(10):
                envelope = await receiver.receive()
            ids.append(envelope.message.id)
            await envelope.nack(None)
    mtime = (inbox / "a.txt").stat().st_mtime_ns
    assert ids == [f"in%2Fbox/a.txt@{mtime}"] * 2  # (a / in a route's name is encoded)
