"""The nats sink's de-duplication: JetStream's duplicate window, and what a longer crash does."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from nats_servers import require_nats, stream

from bridges import Context
from bridges.endpoints.nats import NatsSink, NatsSinkConfig
from bridges.testing import messages

CTX = Context(route="r", in_flight=20)


async def stored(aio: Any, js: Any, name: str) -> list[str]:
    """The Nats-Msg-Id of every message of stream ``name``, oldest first."""
    info = await aio.run(js.stream_info, name)
    found = [await aio.run(js.get_msg, name, seq) for seq in range(1, info.state.last_seq + 1)]
    return [message.headers["Nats-Msg-Id"] for message in found]


async def test_a_repeat_within_the_window_is_dropped_and_after_it_stored_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = require_nats()
    async with stream(url, duplicate_window=1.0) as (name, aio, js):
        config = NatsSinkConfig(url=url, subject=name + ".x", duplicate_window=600.0)
        sink = NatsSink(config, CTX)
        async with sink.open() as writer:
            assert sink.stream_window == 1.0
            assert "for 1 s, less than the sink's duplicate_window (600 s)" in caplog.text
            await writer.write(messages(3))
            await writer.write(messages(3))  # a retry, a redelivery: dropped by the stream
            assert sink.duplicates == 3
            await trio.sleep(1.5)  # a bridge down for longer than the stream's window
            await writer.write(messages(3)[:1])
        assert sink.duplicates == 3
        assert await stored(aio, js, name) == ["m0", "m1", "m2", "m0"]


async def test_a_window_long_enough_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    url = require_nats()
    async with stream(url) as (name, _, _):  # the server's default: 2 minutes
        sink = NatsSink(NatsSinkConfig(url=url, subject=name + ".x", duplicate_window=120), CTX)
        async with sink.open():
            assert sink.stream_window == 120.0
    assert "duplicate_window" not in caplog.text
