"""De-duplication and nats: the sink's JetStream duplicate window (and what a longer crash
does); the source's ids, unique across a stream deleted and created again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from nats_servers import jetstream, require_nats, stream, unique

from bridges import Context, Message
from bridges.endpoints.file import FileSink, FileSinkConfig
from bridges.endpoints.nats import NatsSink, NatsSinkConfig, NatsSource, NatsSourceConfig
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


async def test_a_stream_created_again_gives_new_ids_and_a_deduplicating_sink_keeps_its_messages(
    tmp_path: Path,
) -> None:
    """Sequences start at 1 again in a stream deleted and created under the same name: the
    ids must not (a jsonl sink, which skips ids it wrote, would drop the new messages)."""
    url = require_nats()
    name = unique()
    config = NatsSourceConfig(url=url, stream=name, subject=f"{name}.>", durable="bridge")
    source = NatsSource(config, CTX)
    sink = FileSink(FileSinkConfig("out"), Context(route="r", base_dir=tmp_path, in_flight=20))

    async def relay(count: int) -> list[str]:
        """``count`` messages from the source into the sink, acked; their ids."""
        async with source.open() as receiver, sink.open() as writer:
            envelopes = [await receiver.receive() for _ in range(count)]
            await writer.write([envelope.message for envelope in envelopes])
            for envelope in envelopes:
                await envelope.ack()
        return [envelope.message.id for envelope in envelopes]

    incarnations: list[list[str]] = []
    async with jetstream(url) as (aio, js):
        try:
            for incarnation in ("old", "new"):
                if incarnations:
                    await aio.run(js.delete_stream, name)  # its consumer goes with it
                await aio.run(js.add_stream, name=name, subjects=[f"{name}.>"])
                for i in range(2):
                    await aio.run(js.publish, f"{name}.x", f"{incarnation}{i}".encode())
                async with source.open() as receiver:  # a restart before the ack: same ids
                    first = [(await receiver.receive()).message.id for _ in range(2)]
                assert await relay(2) == first
                incarnations.append(first)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await aio.run(js.delete_stream, name)
    old, new = incarnations
    lines = [
        json.loads(line)
        for path in sorted((tmp_path / "out").iterdir())
        for line in path.read_bytes().splitlines()
    ]
    assert [line["body"] for line in lines] == ["old0", "old1", "new0", "new1"]  # none dropped
    assert [line["id"] for line in lines] == [*old, *new]
    assert set(new).isdisjoint(old)
    assert new[0].startswith(f"r/{name}#")  # ROUTE/STREAM#CREATED:SEQ
    assert new[0].endswith(":1")


async def test_odd_ids_go_percent_encoded_and_their_repeats_are_still_dropped() -> None:
    url = require_nats()
    odd = ["café.json@17", "line\r\nbreak", "a b", "100%", "plain:1"]
    batch = [Message(b"x", {}, message_id) for message_id in odd]
    async with stream(url) as (name, aio, js):
        sink = NatsSink(NatsSinkConfig(url=url, subject=name + ".x"), CTX)
        async with sink.open() as writer:
            await writer.write(batch)
            await writer.write(batch)  # a retry: every one dropped by the stream
        assert sink.duplicates == len(odd)
        assert await stored(aio, js, name) == [
            "caf%C3%A9.json@17",
            "line%0D%0Abreak",
            "a%20b",
            "100%25",
            "plain:1",
        ]
