"""examples/redis-stomp.toml through ``bridges run``: STOMP -> Redis -> STOMP, binary-safe."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from family_kit import example_round_trip, free_port
from redis_servers import HOSTPORT, require_redis


def site(i: int) -> str:
    return "paris" if i % 2 else "oslo"


@pytest.mark.deadline(40)
async def test_stomp_to_redis_to_stomp_through_bridges_run(tmp_path: Path) -> None:
    require_redis()
    port = free_port()
    run = uuid.uuid4().hex[:10]
    replacements = [
        ("61637", str(port)),
        ("127.0.0.1:6379", HOSTPORT),
        ("bridge-", f"trio-stomp-test-{run}-"),
    ]
    by_n = await example_round_trip(
        tmp_path,
        "redis-stomp.toml",
        replacements,
        port,
        "redis",
        lambda i: {"site": site(i), "n": str(i), "note": "caf\u00e9"},
    )
    for i, message in by_n.items():
        assert message.headers["site"] == site(i)
        assert message.headers["redis-stream"] == f"trio-stomp-test-{run}-events"
        assert message.headers["redis-id"]
