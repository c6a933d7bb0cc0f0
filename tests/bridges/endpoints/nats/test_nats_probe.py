"""The nats endpoints ask JetStream whether the stream keeps what it acknowledges."""

from __future__ import annotations

import logging

import nats.js.api
import pytest
from nats_servers import require_nats, stream

from bridges import Context
from bridges.endpoints.nats import NatsSink, NatsSinkConfig, NatsSource, NatsSourceConfig


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_the_streams_storage_decides_and_memory_is_warned_once(
    storage: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = require_nats()
    kind = nats.js.api.StorageType(storage)
    async with stream(url, storage=kind) as (name, _aio, _js):
        sink = NatsSink(NatsSinkConfig(url=url, subject=f"{name}.x"), Context(role="sink"))
        source_config = NatsSourceConfig(url=url, stream=name, durable="d")
        source = NatsSource(source_config, Context(role="source"))
        answers = [await sink.probe(), await source.probe()]
        with caplog.at_level(logging.WARNING, logger="bridges"):
            for _ in range(2):
                async with sink.open():
                    pass
    warned = [r for r in caplog.records if "storage: memory" in r.getMessage()]
    if storage == "memory":
        assert all(answer.weaker for answer in answers)
        assert f"stream {name} has storage: memory" in answers[0].reason
        assert len(warned) == 1
    else:
        assert [answer.level for answer in answers] == ["durable", "durable"]
        assert "sync_interval" in answers[0].reason
        assert warned == []


async def test_core_nats_is_at_most_once_without_asking() -> None:
    sink = NatsSink(NatsSinkConfig(subject="a", jetstream=False), Context(role="sink"))
    assert (await sink.probe()).weaker
