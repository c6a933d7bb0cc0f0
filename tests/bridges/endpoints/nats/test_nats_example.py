"""examples/nats-stomp.toml through ``bridges run``: STOMP -> JetStream -> STOMP, binary-safe."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from nats_servers import HOSTPORT, free_port, jetstream, require_nats, unique

import trio_stomp

EXAMPLE = Path(__file__).parents[4] / "examples" / "nats-stomp.toml"


def bridges_command() -> list[str]:
    script = Path(sys.executable).with_name("bridges")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bridges._cli"]


async def read_until(stream: Any, buffer: bytearray, needle: bytes) -> None:
    while needle not in buffer:
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise AssertionError(f"bridges ended before saying {needle!r}: {bytes(buffer)!r}")
        buffer += chunk


@pytest.mark.deadline(40)
async def test_stomp_to_nats_to_stomp_through_bridges_run(tmp_path: Path) -> None:
    url = require_nats()
    port = free_port()
    name = unique()
    text = (
        EXAMPLE.read_text()
        .replace("61638", str(port))
        .replace("127.0.0.1:4222", HOSTPORT)
        .replace('"BRIDGE"', f'"{name}"')
        .replace("bridge.", f"{name}.")
    )
    config = tmp_path / "bridge.toml"
    config.write_text(text)
    process = await trio.lowlevel.open_process(
        [*bridges_command(), "run", str(config)], cwd=tmp_path, stderr=subprocess.PIPE
    )
    output = bytearray()
    bodies = [bytes([i, 0, 255, 10, 13]) * (i + 1) for i in range(20)]
    try:
        assert process.stderr is not None
        await read_until(process.stderr, output, b"it comes back on /queue/from-nats")
        async with trio_stomp.connect(f"stomp://127.0.0.1:{port}") as client:
            for i, body in enumerate(bodies):
                headers = {"n": str(i), "note": "caf\u00e9"}
                await client.send("/queue/to-nats", body, headers=headers, receipt=i == 19)
            got = []
            async with client.subscribe("/queue/from-nats", ack="client-individual") as sub:
                async for message in sub:
                    await message.ack()
                    got.append(message)
                    if len(got) == len(bodies):
                        break
        process.send_signal(signal.SIGINT)
        with trio.fail_after(15):
            status = await process.wait()
        assert status == 0, bytes(output)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        async with jetstream(url) as (aio, js):
            with trio.move_on_after(5):
                await aio.run(js.delete_stream, name)
    by_n = {int(m.headers["n"]): m for m in got}
    assert sorted(by_n) == list(range(20))
    for i, body in enumerate(bodies):
        assert by_n[i].body == body
        assert by_n[i].headers["note"] == "caf\u00e9"
        assert by_n[i].headers["nats-subject"] == f"{name}.events"
    # The STOMP message's id went out as Nats-Msg-Id and came back as the bridge-id.
    assert len({m.headers["bridge-id"] for m in got}) == 20
    assert all(m.headers["bridge-id"] for m in got)


def test_bridges_check_warns_that_a_core_nats_sink_is_at_most_once(tmp_path: Path) -> None:
    config = tmp_path / "core.toml"
    config.write_text(
        "[routes.core]\n"
        'source = { type = "file", path = "in" }\n'
        'sink = { type = "nats", subject = "events.x", jetstream = false }\n'
    )
    done = subprocess.run(
        [*bridges_command(), "check", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "core: warning: nats sink with jetstream = false" in done.stderr
    assert "at most once" in done.stderr
    jetstream_config = config.read_text().replace(", jetstream = false", "")
    config.write_text(jetstream_config)
    done = subprocess.run(
        [*bridges_command(), "check", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
