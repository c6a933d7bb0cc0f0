"""The amqp source and sink against a real RabbitMQ: confirms, returns, acks, headers, bad input."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aio_pika
import pytest
import trio
from amqp_servers import get_all, publish, queue, require_amqp, unique
from family_kit import POISON_MIXES, POISON_SETTINGS, poison_run, written
from hypothesis import given

from bridges import Context, InvalidSetting, Message, MessageRejected, RetryPolicy, Route
from bridges.endpoints.amqp import AmqpSink, AmqpSinkConfig, AmqpSource, AmqpSourceConfig
from bridges.endpoints.amqp.source import _AmqpReceiver
from bridges.testing import FakeSink, SinkCase, SourceCase, check_sink, check_source, wait_until
from trio_stomp.testing import FaultProxy

CTX = Context(route="r", in_flight=20)


async def test_the_sink_publishes_confirmed_persistent_with_properties_and_ids() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        sink = AmqpSink(AmqpSinkConfig(url=url, exchange="amq.direct", routing_key=name), CTX)
        headers = {
            "content-type": "application/octet-stream",
            "correlation-id": "c-1",
            "reply-to": "answers",
            "amqp-priority": "3",
            "x-trace": "t1",
            "amqp-routing-key": "from an earlier hop",  # a delivery header: not sent on
        }
        batch = [Message(b"\x00\xff\r\n" + bytes([i]), headers, f"id-{i}") for i in range(3)]
        async with sink.open() as writer:
            await writer.write(batch)
            # Confirmed means the broker has it: visible before the writer closes.
            held = await get_all(aio, channel, name)
        assert [m.body for m in held] == [m.body for m in batch]
        first = held[0]
        assert first.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
        assert first.message_id == "id-0"
        assert first.content_type == "application/octet-stream"
        assert first.correlation_id == "c-1"
        assert first.reply_to == "answers"
        assert first.priority == 3
        assert first.headers == {"x-trace": "t1", "bridge-id": "id-0"}


async def test_an_unroutable_message_is_rejected_and_the_confirmed_rest_not_sent_twice() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        sink = AmqpSink(
            AmqpSinkConfig(url=url, exchange="amq.direct", routing_key="{header:to}"), CTX
        )
        batch = [
            Message(b"a", {"to": name}, "u1"),
            Message(b"lost in Shovel", {"to": "no-such-binding-" + name}, "u2"),
            Message(b"b", {"to": name}, "u3"),
            Message(b"no key", {}, "u4"),
            Message(b"x" * 2000, {"to": name}, "u5"),
        ]
        small = AmqpSink(
            AmqpSinkConfig(
                url=url, exchange="amq.direct", routing_key="{header:to}", max_message_size=1000
            ),
            CTX,
        )
        async with small.open() as writer:
            with pytest.raises(MessageRejected) as caught:
                await writer.write(batch)
            assert caught.value.indices == (1, 3, 4)
            assert "NO_ROUTE" in caught.value.reason
            assert "routing key 'no-such-binding-" in caught.value.reason
            # The engine writes the rest again: what was confirmed is not sent twice.
            await writer.write([batch[0], batch[2]])
        assert [m.body for m in await get_all(aio, channel, name)] == [b"a", b"b"]
        assert sink.describe().startswith("amqp amq.direct key {header:to}")


async def test_the_source_maps_properties_and_an_ack_is_final() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        await publish(
            aio,
            channel,
            name,
            aio_pika.Message(
                b"\x00one",
                headers={"x-n": 7, "x-b": bytearray(b"raw"), "bridge-id": "stable-1"},
                content_type="text/plain",
                correlation_id="c-9",
                message_id="amqp-id",
            ),
            aio_pika.Message(b"two", message_id="only-amqp-id"),
            aio_pika.Message(b"three"),
        )
        source = AmqpSource(AmqpSourceConfig(url=url, queue=name), CTX)
        async with source.open() as receiver:
            one, two, three = [await receiver.receive() for _ in range(3)]
            assert one.message.body == b"\x00one"
            assert one.message.id == "stable-1"  # bridge-id wins (it survives STOMP hops)
            assert one.message.headers == {
                "x-n": "7",
                "x-b": "raw",
                "content-type": "text/plain",
                "correlation-id": "c-9",
                "amqp-exchange": "",
                "amqp-routing-key": name,
            }
            assert two.message.id == "r/only-amqp-id"  # ROUTE/ and the publisher's id
            assert three.message.id  # (aiormq gives every publish a message-id)
            for envelope in (one, two, three):
                await envelope.ack()
        async with source.open() as receiver:
            with trio.move_on_after(0.3) as quiet:
                await receiver.receive()
            assert quiet.cancelled_caught


async def test_nack_requeues_flagged_redelivered_with_the_same_id() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        await publish(aio, channel, name, aio_pika.Message(b"again"))
        source = AmqpSource(AmqpSourceConfig(url=url, queue=name), CTX)
        async with source.open() as receiver:
            first = await receiver.receive()
            await first.nack(RuntimeError("the sink failed"))
            second = await receiver.receive()
            assert second.message.body == b"again"
            assert second.message.headers["amqp-redelivered"] == "true"
            assert second.message.id == first.message.id
            await second.ack()


async def test_two_publishers_message_ids_read_by_two_routes_stay_two_ids() -> None:
    # Two publishers both number their messages from 1 (message_id "1"); two routes read
    # them (and may feed one queue): each id goes under its route's name.
    url = require_amqp()
    got = []
    for route in ("a", "b"):
        async with queue(url) as (name, aio, channel):
            await publish(aio, channel, name, aio_pika.Message(b"x", message_id="1"))
            source = AmqpSource(AmqpSourceConfig(url=url, queue=name), Context(route=route))
            async with source.open() as receiver:
                first = await receiver.receive()
                await first.nack(RuntimeError("again"))
                again = await receiver.receive()
                assert again.message.id == first.message.id
                await again.ack()
                got.append(first.message.id)
    assert got == ["a/1", "b/1"]


async def test_basic_qos_holds_the_broker_to_the_window() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        await publish(aio, channel, name, *(aio_pika.Message(b"%d" % i) for i in range(12)))
        source = AmqpSource(AmqpSourceConfig(url=url, queue=name), Context(in_flight=5))
        async with source.open() as receiver:
            held = [await receiver.receive() for _ in range(5)]
            with trio.move_on_after(0.3) as quiet:
                await receiver.receive()
            assert quiet.cancelled_caught
            await held[0].ack()
            assert (await receiver.receive()).message.body == b"5"


class RecordingChannel:
    """Stands in for the channel in the one test that checks which frames acks become."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, int, bool]] = []
        self.writes = 0

    async def settle(self, ops: Sequence[tuple[str, int, bool]]) -> None:
        self.frames.extend(ops)
        self.writes += 1

    async def next_delivery(self) -> Any:
        raise NotImplementedError


async def test_settled_runs_become_one_multiple_ack_and_out_of_order_ones_single_frames() -> None:
    channel = RecordingChannel()
    receiver = _AmqpReceiver(channel, "test")
    receiver.note_delivered(range(1, 14))
    # 1-4 acked, 5 requeued, 6-7 acked, 9 acked (8 still open), 10 open, 11 dropped,
    # 12 dropped out of order (10 still open)
    ops = [
        (1, "ack"), (2, "ack"), (3, "ack"), (4, "ack"), (5, "requeue"), (6, "ack"),
        (7, "ack"), (9, "ack"), (12, "drop"),
    ]  # fmt: skip
    await receiver.send_settled(ops)
    assert channel.frames == [
        ("ack", 4, True),
        ("nack", 5, True),
        ("ack", 7, True),
        ("ack", 9, False),
        ("reject", 12, False),
    ]
    assert channel.writes == 1  # (all of them in one write)
    channel.frames.clear()
    await receiver.send_settled([(8, "ack"), (10, "ack"), (11, "drop"), (13, "ack")])
    assert channel.frames == [("ack", 10, True), ("reject", 11, False), ("ack", 13, True)]


async def test_bad_credentials_missing_queue_and_exchange_are_one_line() -> None:
    url = require_amqp()
    wrong = url.replace("guest:guest@", "guest:s3cret-pw@")
    source = AmqpSource(AmqpSourceConfig(url=wrong, queue="q"), CTX)
    with pytest.raises(ConnectionError) as caught:
        async with source.open():
            pass  # pragma: no cover - never entered
    text = str(caught.value)
    assert "\n" not in text
    assert "s3cret-pw" not in text
    assert "cannot connect" in text
    missing = AmqpSource(AmqpSourceConfig(url=url, queue=unique()), CTX)
    with pytest.raises(ConnectionError, match=r"queue 'trio-stomp-test-\w+': NOT_FOUND"):
        async with missing.open():
            pass  # pragma: no cover - never entered
    no_exchange = AmqpSink(AmqpSinkConfig(url=url, exchange="no-such-exchange"), CTX)
    with pytest.raises(ConnectionError, match="exchange 'no-such-exchange': NOT_FOUND"):
        async with no_exchange.open():
            pass  # pragma: no cover - never entered


async def test_the_password_setting_overrides_the_url_and_never_shows() -> None:
    url = require_amqp()
    async with queue(url) as (name, _, _):
        without = url.replace("guest:guest@", "guest@")
        source = AmqpSource(AmqpSourceConfig(url=without, password="guest", queue=name), CTX)
        async with source.open():
            pass
        wrong = AmqpSource(AmqpSourceConfig(url=url, password="s3cret-pw", queue=name), CTX)
        with pytest.raises(ConnectionError, match="cannot connect") as caught:
            async with wrong.open():
                pass  # pragma: no cover - never entered
        assert "s3cret-pw" not in str(caught.value)


def test_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(InvalidSetting, match="url"):
        AmqpSink(AmqpSinkConfig(url="http://x"), CTX)
    with pytest.raises(InvalidSetting, match="routing_key"):
        AmqpSink(AmqpSinkConfig(routing_key="{nope}"), CTX)
    with pytest.raises(InvalidSetting, match="queue"):
        AmqpSource(AmqpSourceConfig(), CTX)
    with pytest.raises(ValueError, match="prefetch"):
        AmqpSourceConfig(queue="q", prefetch=70000)
    for max_body in (0, 128 * 1024 * 1024 + 1):
        with pytest.raises(ValueError, match="max_body"):
            AmqpSourceConfig(queue="q", max_body=max_body)
    assert AmqpSourceConfig(queue="q").max_body == 128 * 1024 * 1024


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("no_verify_ssl=1", "unknown query parameter no_verify_ssl"),
        ("frame_max=4096&name=x", "unknown query parameter frame_max, name"),
        ("heartbeat=ten", "heartbeat='ten': expected whole seconds"),
        ("heartbeat=-1", "heartbeat='-1'"),
        ("heartbeat=5&heartbeat=6", "heartbeat given twice"),
    ],
)
def test_a_url_query_the_family_would_ignore_is_refused_by_name(query: str, says: str) -> None:
    url = f"amqp://guest:guest@127.0.0.1:5672/%2f?{query}"
    for build in (
        lambda: AmqpSink(AmqpSinkConfig(url=url), CTX),
        lambda: AmqpSource(AmqpSourceConfig(url=url, queue="q"), CTX),
    ):
        with pytest.raises(InvalidSetting, match=re.escape(says)):
            build()
    AmqpSink(AmqpSinkConfig(url=url.split("?")[0] + "?heartbeat=0"), CTX)


@pytest.mark.deadline(40)
async def test_a_cut_connection_mid_stream_loses_nothing() -> None:
    url = require_amqp()
    host, port = url.split("@", 1)[1].split("/", 1)[0].split(":")
    async with queue(url) as (name, aio, channel), trio.open_nursery() as nursery:
        proxy = FaultProxy((host, int(port)))
        await nursery.start(proxy.serve)
        bodies = [b"m%03d" % i for i in range(200)]
        await publish(aio, channel, name, *(aio_pika.Message(b) for b in bodies[:100]))
        sink = FakeSink(delay=0.002)
        proxied = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2f"
        route = Route(
            "r",
            AmqpSource(AmqpSourceConfig(url=proxied, queue=name, connect_timeout=2.0), CTX),
            sink,
            in_flight=20,
            batch_count=10,
            retry=RetryPolicy(attempts=3, initial=0.1, max=0.3),
        )
        nursery.start_soon(route.run)
        await wait_until(lambda: len(written(sink)) >= 30)
        proxy.cut()
        await publish(aio, channel, name, *(aio_pika.Message(b) for b in bodies[100:]))
        await wait_until(lambda: {m.body for m in written(sink)} >= set(bodies))
        route.stop()
        await route.finished.wait()
        nursery.cancel_scope.cancel()
    assert route.stats.restarts >= 1
    assert {m.body for m in written(sink)} == set(bodies)


# -- the contract kit ----------------------------------------------------------------------


@asynccontextmanager
async def amqp_source_case() -> AsyncIterator[SourceCase]:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):

        async def feed(items: Sequence[Message]) -> None:
            for item in items:
                await publish(
                    aio, channel, name, aio_pika.Message(item.body, headers=dict(item.headers))
                )

        yield SourceCase(AmqpSource(AmqpSourceConfig(url=url, queue=name), Context()), feed)


@asynccontextmanager
async def amqp_sink_case() -> AsyncIterator[SinkCase]:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        kept: list[Message] = []

        async def read_back() -> list[Message]:
            kept.extend(
                Message(m.body, {k: str(v) for k, v in (m.headers or {}).items()})
                for m in await get_all(aio, channel, name)
            )
            return list(kept)

        sink = AmqpSink(AmqpSinkConfig(url=url, exchange="amq.direct", routing_key=name), Context())
        reject = Message(b"unroutable", {}, "r1", destination="no-such-binding")
        yield SinkCase(sink, read_back, reject=reject)


@pytest.mark.deadline(90)
async def test_the_amqp_source_keeps_the_source_contract() -> None:
    await check_source(amqp_source_case)


@pytest.mark.deadline(90)
async def test_the_amqp_sink_keeps_the_sink_contract() -> None:
    await check_sink(amqp_sink_case)


@POISON_SETTINGS
@given(mix=POISON_MIXES)
def test_the_amqp_sink_sets_each_poison_message_aside_alone(mix: list[int | None]) -> None:
    poison_run(amqp_sink_case, mix)


async def test_id_template_makes_the_id_and_a_redelivery_keeps_it() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        plain = aio_pika.Message(b"21.5", headers={"sensor": "s-7"})  # no message_id
        await publish(aio, channel, name, plain)
        config = AmqpSourceConfig(url=url, queue=name, id_template="{header:sensor}-{body_hash}")
        async with AmqpSource(config, CTX).open() as receiver:
            first = await receiver.receive()
            await first.nack(RuntimeError("the sink failed"))
            second = await receiver.receive()
            await second.ack()
    assert first.message.id.startswith("s-7-")
    assert len(first.message.id) == len("s-7-") + 32
    assert second.message.id == first.message.id


def test_a_bad_id_template_is_refused_naming_the_setting() -> None:
    with pytest.raises(InvalidSetting, match="id_template"):
        AmqpSource(AmqpSourceConfig(url="amqp://h/", queue="q", id_template="{nope}"), CTX)


async def test_a_deleted_queue_fails_the_source_at_its_receive() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        source = AmqpSource(AmqpSourceConfig(url=url, queue=name), CTX)
        async with source.open() as receiver:
            await aio.run(channel.queue_delete, name)
            with (
                trio.fail_after(10),
                pytest.raises(ConnectionError, match="cancelled the consumer"),
            ):
                await receiver.receive()
