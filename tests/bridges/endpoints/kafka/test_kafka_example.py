"""examples/kafka-stomp.toml through ``bridges run``: STOMP -> Kafka -> STOMP, headers kept."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trio
from family_kit import example_round_trip, free_port
from kafka_servers import create_topic, require_kafka


def site(i: int) -> str:
    return "paris" if i % 2 else "oslo"


@pytest.mark.deadline(60)
async def test_stomp_to_kafka_to_stomp_through_bridges_run(tmp_path: Path) -> None:
    servers = require_kafka()
    port = free_port()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    replacements = [
        ("61641", str(port)),
        ("127.0.0.1:9092", servers),
        ("bridge-events", topic),
        ('group = "bridge"', f'group = "g-{uuid.uuid4().hex[:8]}"'),
    ]
    by_n = await example_round_trip(
        tmp_path,
        "kafka-stomp.toml",
        replacements,
        port,
        "kafka",
        lambda i: {"site": site(i), "n": str(i), "note": "caf\u00e9"},
    )
    for i, message in by_n.items():
        assert message.headers["site"] == site(i)
        assert message.headers["kafka-topic"] == topic
        assert message.headers["kafka-key"] == site(i)
        assert message.headers["kafka-offset"].isdigit()
