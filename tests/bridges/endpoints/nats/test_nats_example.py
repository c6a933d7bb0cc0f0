"""examples/nats-stomp.toml through ``bridges run``: STOMP -> JetStream -> STOMP, binary-safe."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio
from family_kit import (
    bridges_command,
    example_round_trip,
    free_port,
)
from nats_servers import HOSTPORT, jetstream, require_nats, unique


@pytest.mark.deadline(40)
async def test_stomp_to_nats_to_stomp_through_bridges_run(tmp_path: Path) -> None:
    url = require_nats()
    port = free_port()
    name = unique()
    replacements = [
        ("61638", str(port)),
        ("127.0.0.1:4222", HOSTPORT),
        ('"BRIDGE"', f'"{name}"'),
        ("bridge.", f"{name}."),
    ]
    try:
        by_n = await example_round_trip(
            tmp_path,
            "nats-stomp.toml",
            replacements,
            port,
            "nats",
            lambda i: {"n": str(i), "note": "caf\u00e9"},
        )
    finally:
        async with jetstream(url) as (aio, js):
            with trio.move_on_after(5):
                await aio.run(js.delete_stream, name)
    for message in by_n.values():
        assert message.headers["nats-subject"] == f"{name}.events"
    # The STOMP message's id went out as Nats-Msg-Id and came back as the bridge-id
    # (check_round_trip: one each, 20 in all).


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
