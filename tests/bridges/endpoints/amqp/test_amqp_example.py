"""The amqp examples through ``bridges run``: STOMP -> AMQP -> STOMP; RabbitMQ's STOMP route."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from amqp_servers import rabbit, require_amqp, unique
from family_kit import (
    EXAMPLES,
    bridges_run,
    example_round_trip,
    free_port,
    stop_bridge,
)

from bridges.testing import wait_until


@pytest.mark.deadline(40)
async def test_stomp_to_amqp_to_stomp_through_bridges_run(tmp_path: Path) -> None:
    url = require_amqp()
    port = free_port()
    name = unique()
    replacements = [("61639", str(port)), ("bridge-events", name), ("bridge.", f"{name}.")]
    dead = tmp_path / "dead-letters"

    async def dead_lettered() -> None:
        await wait_until(lambda: dead.exists() and any(p.stat().st_size for p in dead.iterdir()))

    try:
        by_n = await example_round_trip(
            tmp_path,
            "amqp-stomp.toml",
            replacements,
            port,
            "amqp",
            lambda i: {"n": str(i), "note": "caf\u00e9", "content-type": "application/x-test"},
            before_stop=dead_lettered,
            receipt_each=True,
            # No queue is bound for this kind: RabbitMQ returns it, it is dead-lettered.
            extra=[(b"lost?", {"kind": "nowhere"})],
        )
    finally:
        async with rabbit(url) as (aio, channel):
            await aio.run(channel.queue_delete, name)
    for message in by_n.values():
        assert message.headers["content-type"] == "application/x-test"
        assert message.headers["amqp-exchange"] == "amq.direct"
        assert message.headers["amqp-routing-key"] == f"{name}.events"
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
        out = tmp_path / "from-amqp"

        def lines() -> list[dict[str, Any]]:
            if not out.exists():
                return []
            return [
                json.loads(line)
                for path in sorted(out.iterdir())
                for line in path.read_text().splitlines()
            ]

        env = {"RABBITMQ_PASSCODE": "guest", "PATH": "/usr/bin:/bin"}
        try:
            async with bridges_run(config, env=env) as (process, output):
                await wait_until(lambda: len(lines()) >= 5, 0.05)
                await stop_bridge(process, output)
        finally:
            await aio.run(channel.queue_delete, name)
    got = lines()
    assert len(got) == 5
    assert all(line["headers"]["file-name"].startswith("f") for line in got)
