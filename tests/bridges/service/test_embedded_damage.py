"""``[broker] accept_damage``: a damaged store of the embedded broker is a config error
naming what was lost, unless accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from bridges import ConfigError, default_registry, parse_config
from bridges.service import open_embedded
from trio_stomp.broker import open_broker
from trio_stomp.testing import open_raw_client

ROUTE = {
    "source": {"type": "stomp", "url": "embedded", "destination": "/queue/q"},
    "sink": {"type": "file", "path": "outbox"},
}


def _config(tmp_path: Path, **broker: Any) -> Any:
    data = {
        "broker": {"embedded": True, "listen": "127.0.0.1:0", **broker},
        "routes": {"r": ROUTE},
    }
    return parse_config(
        data, default_registry(plugins=False), file="bridge.toml", base_dir=tmp_path
    )


def test_accept_damage_needs_a_data_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"broker\.accept_damage: needs data_dir"):
        _config(tmp_path, accept_damage=True)


async def test_an_emptied_store_is_refused_naming_the_loss_then_accepted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with trio.fail_after(20):
        async with open_broker(data_dir=state) as broker:
            async with open_raw_client(broker) as client:
                for i in range(3):
                    await client.send("SEND", {"destination": "/queue/q", "receipt": f"{i}"}, b"x")
                    await client.receipt(f"{i}")
        (state / "broker.sqlite3").write_bytes(b"")
        with pytest.raises(ConfigError) as info:
            async with open_embedded(_config(tmp_path, data_dir="state")):
                pytest.fail("the broker started")
        (problem,) = info.value.problems
        text = str(problem)
        assert "broker.data_dir" in text
        assert "3 message(s) lost" in text
        assert "accept_damage = true" in text
        config = _config(tmp_path, data_dir="state", accept_damage=True)
        async with open_embedded(config) as embedded:
            assert embedded is not None
            assert embedded.queue_depth("/queue/q") == 0
