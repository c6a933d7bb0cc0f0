"""The stomp sink's size limit: an oversized message is rejected alone (issue 11 §3)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

import trio_stomp
from bridges import Context, Message, MessageRejected, RetryPolicy, Route, open_shared
from bridges.endpoints.file import FileSource, FileSourceConfig
from bridges.endpoints.stomp import EMBEDDED_BROKER, StompSink, StompSinkConfig
from bridges.testing import FakeSink, FakeSource, wait_until
from trio_stomp.broker import Broker, Limits, open_broker


@pytest.fixture
async def small_broker() -> AsyncIterator[Broker]:
    async with open_broker(limits=Limits(max_frame_size=64 * 1024)) as broker:
        yield broker


async def received(url: str, destination: str) -> list[bytes]:
    bodies = []
    async with trio_stomp.connect(url) as client, client.subscribe(destination) as sub:
        with trio.move_on_after(0.5):
            async for message in sub:
                bodies.append(message.body)
    return bodies


async def test_a_message_over_max_message_bytes_is_rejected_alone(small_broker: Broker) -> None:
    config = StompSinkConfig(url=small_broker.url, destination="/queue/a", max_message_bytes=1000)
    sink = StompSink(config, Context(route="s"))
    batch = [Message(b"one", {}, "1"), Message(b"x" * 2000, {}, "2"), Message(b"three", {}, "3")]
    async with sink.open() as writer:
        with pytest.raises(MessageRejected) as caught:
            await writer.write(batch)
        assert caught.value.indices == (1,)
        assert "2000" in caught.value.reason
        assert "max_message_bytes = 1000" in caught.value.reason
        # The headers count too: a body just under the limit with a big header is too big.
        with pytest.raises(MessageRejected):
            await writer.write([Message(b"y" * 900, {"h": "z" * 200}, "4")])
        await writer.write([batch[0], batch[2]])
    assert await received(small_broker.url, "/queue/a") == [b"one", b"three"]


async def test_the_embedded_brokers_frame_limit_is_the_default_and_the_rest_goes_through(
    small_broker: Broker,
) -> None:
    """A 100 KiB file into a broker whose frame limit is 64 KiB: dead-lettered, not a stall."""
    async with open_shared() as shared:
        shared.provide(EMBEDDED_BROKER, small_broker)
        context = Context(route="r", role="sink", embedded=True, shared=shared)
        sink = StompSink(StompSinkConfig(url="embedded", destination="/queue/b"), context)
        big = Message(b"z" * (100 * 1024), {"file-name": "big.bin"}, "big")
        source = FakeSource([Message(b"a", {}, "a"), big, Message(b"c", {}, "c")])
        dead = FakeSink()
        route = Route("r", source, sink, dead_letter=dead, batch_count=10, batch_time=0.05)
        with trio.fail_after(10):
            await route.run()
    assert sorted(source.acked) == ["a", "big", "c"]
    [[letter]] = dead.batches
    assert letter.id == "big"
    error = letter.headers["bridge-error"]
    assert str(100 * 1024) in error
    assert str(64 * 1024) in error
    assert await received(small_broker.url, "/queue/b") == [b"a", b"c"]


def test_max_message_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_message_bytes"):
        StompSinkConfig(max_message_bytes=0)


async def test_a_file_too_big_for_the_broker_stays_in_the_inbox_and_stalls_nothing(
    small_broker: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The quickstart's case without a dead-letter sink: the big file stays, logged, once."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "big.bin").write_bytes(b"z" * (100 * 1024))
    (inbox / "small.txt").write_bytes(b"small")
    async with open_shared() as shared:
        shared.provide(EMBEDDED_BROKER, small_broker)
        context = Context(route="r", embedded=True, shared=shared, base_dir=tmp_path)
        source = FileSource(FileSourceConfig("inbox", settle=0, poll_interval=0.02), context)
        sink = StompSink(StompSinkConfig(url="embedded", destination="/queue/c"), context)
        route = Route("r", source, sink, batch_time=0, retry=RetryPolicy(initial=0.01))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(route.run)
            await wait_until(lambda: route.stats.written == 1 and route.stats.nacked == 1)
            await trio.sleep(0.3)  # many polls: the rejected file is not read again
            route.stop()
    assert route.stats.received == 2
    assert sorted(p.name for p in inbox.iterdir()) == ["big.bin", "done"]
    assert (inbox / "done" / "small.txt").exists()
    assert "big.bin was rejected" in caplog.text
    assert "max_message_bytes = 65536" in caplog.text
    assert await received(small_broker.url, "/queue/c") == [b"small"]


async def test_a_batch_too_big_for_one_transaction_is_sent_in_several() -> None:
    limits = Limits(max_frame_size=64 * 1024, max_transaction_bytes=100 * 1024)
    async with open_broker(limits=limits) as broker, open_shared() as shared:
        shared.provide(EMBEDDED_BROKER, broker)
        context = Context(route="r", embedded=True, shared=shared)
        config = StompSinkConfig(url="embedded", destination="/queue/t", confirm="transaction")
        sink = StompSink(config, context)
        batch = [Message(bytes([65 + i]) * (40 * 1024), {}, str(i)) for i in range(5)]
        async with sink.open() as writer:
            await writer.write(batch)  # 200 KiB: one transaction would be refused
        bodies = await received(broker.url, "/queue/t")
    assert [body[:1] for body in bodies] == [b"A", b"B", b"C", b"D", b"E"]


async def test_the_header_limits_follow_the_embedded_broker_and_else_activemqs() -> None:
    """Issue 23 §6: a broker's smaller header limits are the sink's, so nothing meets an ERROR."""
    limits = Limits(max_header_count=20, max_header_length=500)
    async with open_broker(limits=limits) as broker, open_shared() as shared:
        shared.provide(EMBEDDED_BROKER, broker)
        context = Context(route="r", role="sink", embedded=True, shared=shared)
        sink = StompSink(StompSinkConfig(url="embedded", destination="/queue/h"), context)
        assert (sink.max_header_count, sink.max_header_length) == (20, 500)
        many = Message(b"many", {f"h{i}": "v" for i in range(18)}, "many")  # 18 + 4 > 20
        long = Message(b"long", {"h": "v:" * 200}, "long")  # escaped: 2 + 600 bytes
        fine = Message(b"fine", {f"h{i}": "v" for i in range(16)}, "fine")
        async with sink.open() as writer:
            with pytest.raises(MessageRejected) as caught:
                await writer.write([many, fine, long])
            assert caught.value.indices == (0, 2)
            assert "more than max_header_count = 20" in caught.value.reason_for(0)
            assert "a line of 602 bytes, more than max_header_length = 500" in (
                caught.value.reason_for(2)
            )
            await writer.write([fine])
        assert await received(broker.url, "/queue/h") == [b"fine"]
    other = StompSink(StompSinkConfig(url="stomp://127.0.0.1:61623"), Context(role="sink"))
    assert (other.max_header_count, other.max_header_length) == (1000, 10 * 1024)
    with pytest.raises(ValueError, match="max_header_length"):
        StompSinkConfig(max_header_length=0)
