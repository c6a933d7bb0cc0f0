"""examples/redis-stomp.toml through ``bridges run``: STOMP -> Redis -> STOMP, binary-safe."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from redis_servers import HOSTPORT, free_port, require_redis

import trio_stomp

EXAMPLE = Path(__file__).parents[4] / "examples" / "redis-stomp.toml"


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
async def test_stomp_to_redis_to_stomp_through_bridges_run(tmp_path: Path) -> None:
    require_redis()
    port = free_port()
    run = uuid.uuid4().hex[:10]
    text = (
        EXAMPLE.read_text()
        .replace("61637", str(port))
        .replace("127.0.0.1:6379", HOSTPORT)
        .replace("bridge-", f"trio-stomp-test-{run}-")
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
        await read_until(process.stderr, output, b"it comes back on /queue/from-redis")
        async with trio_stomp.connect(f"stomp://127.0.0.1:{port}") as client:
            for i, body in enumerate(bodies):
                headers = {"site": "paris" if i % 2 else "oslo", "n": str(i), "note": "caf\u00e9"}
                await client.send("/queue/to-redis", body, headers=headers, receipt=i == 19)
            got = []
            async with client.subscribe("/queue/from-redis", ack="client-individual") as sub:
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
    by_n = {int(m.headers["n"]): m for m in got}
    assert sorted(by_n) == list(range(20))
    for i, body in enumerate(bodies):
        message = by_n[i]
        site = "paris" if i % 2 else "oslo"
        assert message.body == body
        assert message.headers["site"] == site
        assert message.headers["note"] == "caf\u00e9"
        assert message.headers["redis-stream"] == f"trio-stomp-test-{run}-events"
        assert message.headers["redis-id"]
    assert len({m.headers["bridge-id"] for m in got}) == 20  # the STOMP id, carried round
