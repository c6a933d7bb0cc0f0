"""``[broker] duplicate_window``: the embedded broker drops a repeated ``bridge-id`` by
default, keeps every SEND with 0, and refuses a negative window naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from test_embedded_damage import _config

from bridges import ConfigError
from bridges.service import open_embedded
from trio_stomp.testing import open_raw_client


@pytest.mark.parametrize(("settings", "kept"), [({}, 1), ({"duplicate_window": 0}, 2)])
async def test_a_repeated_bridge_id_is_dropped_unless_the_window_is_off(
    tmp_path: Path, settings: dict[str, Any], kept: int
) -> None:
    with trio.fail_after(20):
        async with open_embedded(_config(tmp_path, **settings)) as broker:
            assert broker is not None
            async with open_raw_client(broker) as client:
                for n in range(2):
                    headers = {"destination": "/queue/q", "bridge-id": "x", "receipt": f"{n}"}
                    await client.send("SEND", headers, b"body")
                    await client.receipt(f"{n}")
            assert broker.queue_depth("/queue/q") == kept
            assert broker.duplicates_dropped == 2 - kept


def test_a_negative_window_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"broker\.duplicate_window"):
        _config(tmp_path, duplicate_window=-1)
