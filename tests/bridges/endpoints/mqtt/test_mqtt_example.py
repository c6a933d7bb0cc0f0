"""examples/mqtt-stomp.toml through ``bridges run``: STOMP -> MQTT -> STOMP, binary-safe."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from family_kit import example_round_trip, free_port
from mqtt_servers import HOSTPORT, require_mqtt


def site(i: int) -> str:
    return "paris" if i % 2 else "oslo"


@pytest.mark.deadline(40)
async def test_stomp_to_mqtt_to_stomp_through_bridges_run(tmp_path: Path) -> None:
    require_mqtt()
    port = free_port()
    run = uuid.uuid4().hex[:10]
    replacements = [
        ("61636", str(port)),
        ("127.0.0.1:1883", HOSTPORT),
        ("bridge/out/", f"trio-stomp-test/{run}/"),
        ("bridge-example-mqtt-to-stomp", f"trio-stomp-test-{run}"),
    ]
    by_n = await example_round_trip(
        tmp_path,
        "mqtt-stomp.toml",
        replacements,
        port,
        "mqtt",
        lambda i: {"site": site(i), "n": str(i), "note": "caf\u00e9"},
    )
    for i, message in by_n.items():
        assert message.headers["site"] == site(i)
        assert message.headers["mqtt-topic"] == f"trio-stomp-test/{run}/{site(i)}"
        assert message.headers["mqtt-qos"] == "1"
