"""The amqp examples through ``bridges run``: STOMP -> AMQP -> STOMP; RabbitMQ's STOMP route."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from amqp_servers import rabbit, require_amqp, unique

import trio_stomp
from bridges.testing import wait_until

EXAMPLES = Path(__file__).parents[4] / "examples"


def bridges_command() -> list[str]:
    script = Path(sys.executable).with_name("bridges")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bridges._cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def read_until(stream: Any, buffer: bytearray, needle: bytes) -> None:
    while needle not in buffer:
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise AssertionError(f"bridges ended before saying {needle!r}: {bytes(buffer)!r}")
        buffer += chunk


async def stop(process: trio.Process, output: bytearray) -> None:
    process.send_signal(signal.SIGINT)
    with trio.fail_after(15):
        status = await process.wait()
    assert status == 0, bytes(output)


@pytest.mark.deadline(40)
async def test_stomp_to_amqp_to_stomp_through_bridges_run(tmp_path: Path) -> None:
    url = require_amqp()
    port = free_port()
    name = unique()
    text = (
        (EXAMPLES / "amqp-stomp.toml")
        .read_text()
        .replace("61639", str(port))
        .replace("bridge-events", name)
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
        await read_until(process.stderr, output, b"it comes back on /queue/from-amqp")
        async with trio_stomp.connect(f"stomp://127.0.0.1:{port}") as client:
            for i, body in enumerate(bodies):
                headers = {"n": str(i), "note": "caf\u00e9", "content-type": "application/x-test"}
                await client.send("/queue/to-amqp", body, headers=headers, receipt=True)
            # No queue is bound for this kind: RabbitMQ returns it, it is dead-lettered.
            await client.send("/queue/to-amqp", b"lost?", headers={"kind": "nowhere"}, receipt=True)
            got = []
            async with client.subscribe("/queue/from-amqp", ack="client-individual") as sub:
                async for message in sub:
                    await message.ack()
                    got.append(message)
                    if len(got) == len(bodies):
                        break
        dead = tmp_path / "dead-letters"
        await wait_until(lambda: dead.exists() and any(p.stat().st_size for p in dead.iterdir()))
        await stop(process, output)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        async with rabbit(url) as (aio, channel):
            await aio.run(channel.queue_delete, name)
    by_n = {int(m.headers["n"]): m for m in got}
    assert sorted(by_n) == list(range(20))
    for i, body in enumerate(bodies):
        assert by_n[i].body == body
        assert by_n[i].headers["note"] == "caf\u00e9"
        assert by_n[i].headers["content-type"] == "application/x-test"
        assert by_n[i].headers["amqp-exchange"] == "amq.direct"
        assert by_n[i].headers["amqp-routing-key"] == f"{name}.events"
    assert len({m.headers["bridge-id"] for m in got}) == 20
    letters = [
        json.loads(line)
        for path in (tmp_path / "dead-letters").iterdir()
        for line in path.read_text().splitlines()
    ]
    assert len(letters) == 1
    assert "NO_ROUTE" in json.dumps(letters[0])


@pytest.mark.deadline(40)
async def test_the_rabbitmq_stomp_route_reaches_amqp_exchanges_and_queues(tmp_path: Path) -> None:
    url = require_amqp()
    name = unique()
    text = (EXAMPLES / "amqp-via-rabbitmq-stomp.toml").read_text().replace("orders", name)
    config = tmp_path / "bridge.toml"
    config.write_text(text)
    async with rabbit(url) as (aio, channel):
        # The AMQP side owns its topology: a queue bound to amq.direct with key NAME.new.
        queue = await aio.run(channel.declare_queue, name, durable=True)
        await aio.run(queue.bind, "amq.direct", f"{name}.new")
        (tmp_path / "to-amqp").mkdir()
        for i in range(5):
            (tmp_path / "to-amqp" / f"f{i}.bin").write_bytes(b"\x00\xff%d" % i)
        process = await trio.lowlevel.open_process(
            [*bridges_command(), "run", str(config)],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            env={"RABBITMQ_PASSCODE": "guest", "PATH": "/usr/bin:/bin"},
        )
        output = bytearray()
        try:
            out = tmp_path / "from-amqp"

            def lines() -> list[dict[str, Any]]:
                if not out.exists():
                    return []
                return [
                    json.loads(line)
                    for path in sorted(out.iterdir())
                    for line in path.read_text().splitlines()
                ]

            await wait_until(lambda: len(lines()) >= 5, 0.05)
            await stop(process, output)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await aio.run(channel.queue_delete, name)
    got = lines()
    assert len(got) == 5
    assert all(line["headers"]["file-name"].startswith("f") for line in got)
