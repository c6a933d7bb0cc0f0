"""examples/mqtt-stomp.toml through ``bridges run``: STOMP -> MQTT -> STOMP, binary-safe."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from family_kit import (
    EXAMPLES,
    bridges_run,
    check_round_trip,
    free_port,
    stomp_round_trip,
    stop_bridge,
)
from mqtt_servers import HOSTPORT, require_mqtt


def site(i: int) -> str:
    return "paris" if i % 2 else "oslo"


@pytest.mark.deadline(40)
async def test_stomp_to_mqtt_to_stomp_through_bridges_run(tmp_path: Path) -> None:
    require_mqtt()
    port = free_port()
    run = uuid.uuid4().hex[:10]
    text = (
        (EXAMPLES / "mqtt-stomp.toml")
        .read_text()
        .replace("61636", str(port))
        .replace("127.0.0.1:1883", HOSTPORT)
        .replace("bridge/out/", f"trio-stomp-test/{run}/")
        .replace("bridge-example-mqtt-to-stomp", f"trio-stomp-test-{run}")
    )
    config = tmp_path / "bridge.toml"
    config.write_text(text)
    async with bridges_run(config, b"it comes back on /queue/from-mqtt") as (process, output):
        got = await stomp_round_trip(
            port, "mqtt", lambda i: {"site": site(i), "n": str(i), "note": "caf\u00e9"}
        )
        await stop_bridge(process, output)
    by_n = check_round_trip(got)
    for i, message in by_n.items():
        assert message.headers["site"] == site(i)
        assert message.headers["mqtt-topic"] == f"trio-stomp-test/{run}/{site(i)}"
        assert message.headers["mqtt-qos"] == "1"
