"""A message over the source's ``max_body``: dropped unread, rejected to the dead-letter exchange.

(And the sink: a message over the broker's own ``max_message_size`` is rejected alone.)

Once against a fake broker over memory streams (which frames the source
writes back), once through a route against the real RabbitMQ with a queue
whose dead-letter exchange keeps the whole message: the big message ends
there, the next ones flow, nothing comes back in a loop. A small
``max_body`` keeps both fast (the broker's own limit is left alone).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from amqp_servers import HOSTPORT, require_amqp, unique
from pamqp import commands
from pamqp.common import FieldTable
from test_amqp_protocol import Broker, confirming_channel, connected

from bridges import Context, Message, MessageRejected, RetryPolicy, Route, UnreadableEnvelope
from bridges.endpoints.amqp import AmqpSink, AmqpSinkConfig, AmqpSource, AmqpSourceConfig
from bridges.endpoints.amqp._channel import Channel, Publish
from bridges.endpoints.amqp._client import Client, Settings, open_client, wrap_stream
from bridges.endpoints.amqp._frames import content_frames, method_frame
from bridges.endpoints.amqp.sink import _AmqpWriter
from bridges.endpoints.amqp.source import _AmqpReceiver
from bridges.testing import FakeSink, wait_until

CTX = Context(route="r", in_flight=10)


@asynccontextmanager
async def consuming(max_body: int) -> AsyncIterator[tuple[Client, Channel, Broker]]:
    client_end, broker_end = trio.testing.memory_stream_pair()
    broker = Broker(broker_end)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.handshake, 0)
            settings = Settings(heartbeat=0, max_body=max_body)
            async with wrap_stream(client_end, settings) as client:
                async with trio.open_nursery() as opening:
                    opening.start_soon(broker.answer, commands.Channel.OpenOk())
                    channel = await client.channel()
                async with trio.open_nursery() as opening:
                    opening.start_soon(broker.answer, commands.Basic.ConsumeOk("ctag"))
                    await channel.consume("q", 10)
                yield client, channel, broker
                nursery.start_soon(broker.serve_until_close)
            nursery.cancel_scope.cancel()


def delivery(channel: int, tag: int, message_id: str, body: bytes) -> bytes:
    deliver = commands.Basic.Deliver("ctag", tag, False, "", "q")
    properties = commands.Basic.Properties(message_id=message_id)
    return method_frame(channel, deliver) + b"".join(
        content_frames(channel, properties, body, 4096)
    )


async def test_a_delivery_over_max_body_is_rejected_unread_and_the_next_one_comes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="bridges.amqp")
    async with consuming(max_body=100) as (client, channel, broker):
        number = channel.number
        big = delivery(number, 1, "big", b"x" * 50_000)  # (13 body frames, none kept)
        await broker.stream.send_all(big + delivery(number, 2, "small", b"ok"))
        receiver = _AmqpReceiver(channel, "amqp q")
        receiver.max_body = 100
        first, second = await receiver.receive(), await receiver.receive()
        assert isinstance(first, UnreadableEnvelope)
        assert first.message.body == b""
        assert first.message.id == "big"  # (its headers are kept: the dead letter names it)
        assert "a message of 50000 bytes, over max_body (100)" in str(first.error)
        assert not isinstance(second, UnreadableEnvelope)
        assert second.message.body == b"ok"
        await first.nack(first.error)  # (what the engine does without a dead-letter sink)
        await second.ack()
        await receiver.flush()
        _, reject = await broker.method()
        _, ack = await broker.method()
        assert client.error is None
    assert isinstance(reject, commands.Basic.Reject)
    assert (reject.delivery_tag, reject.requeue) == (1, False)
    assert isinstance(ack, commands.Basic.Ack)
    assert ack.delivery_tag == 2
    [line] = [r.getMessage() for r in caplog.records]
    assert "delivery tag 1 (id 'big')" in line
    assert "over max_body (100)" in line
    assert "rejected (requeue=false)" in line


async def test_a_released_delivery_over_max_body_is_requeued_as_any_other() -> None:
    async with consuming(max_body=10) as (_, channel, broker):
        await broker.stream.send_all(delivery(channel.number, 1, "big", b"x" * 11))
        receiver = _AmqpReceiver(channel, "amqp q")
        envelope = await receiver.receive()
        await envelope.nack(None)  # (a stop, or a dead-letter sink that failed)
        await receiver.flush()
        _, nack = await broker.method()
    assert isinstance(nack, commands.Basic.Nack)
    assert (nack.delivery_tag, nack.requeue) == (1, True)


@pytest.mark.parametrize("with_dead_letter", [True, False])
async def test_rabbitmq_dead_letters_a_message_over_max_body_and_the_route_moves_on(
    with_dead_letter: bool,
) -> None:
    url = require_amqp()
    host, port = HOSTPORT.split(":")
    name, dlq = unique(), unique()
    big = bytes(i % 251 for i in range(5000))
    with trio.fail_after(30):
        async with open_client(host, int(port), Settings(heartbeat=0), within=10) as client:
            admin = await client.channel()
            await admin.rpc(commands.Queue.Declare(queue=dlq), commands.Queue.DeclareOk)
            arguments: FieldTable = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
            declare = commands.Queue.Declare(queue=name, durable=True, arguments=arguments)
            await admin.rpc(declare, commands.Queue.DeclareOk)
            try:
                await admin.confirm()
                publishes = [
                    Publish("", name, body, commands.Basic.Properties(message_id=str(index)))
                    for index, body in enumerate([b"a", big, b"b", b"c"])
                ]
                assert await admin.publish(publishes) == [None] * 4
                config = AmqpSourceConfig(url=url, queue=name, max_body=1000)
                sink, dead = FakeSink(), FakeSink()
                route = Route(
                    "r",
                    AmqpSource(config, CTX),
                    sink,
                    dead_letter=dead if with_dead_letter else None,
                    batch_time=0,
                    retry=RetryPolicy(initial=0.01),
                )
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(route.run)
                    await wait_until(lambda: route.stats.received == 4 and route.in_flight == 0)
                    await trio.sleep(0.3)  # (a redelivery would show here)
                    route.stop()
                assert route.stats.received == 4
                assert [m.body for batch in sink.batches for m in batch] == [b"a", b"b", b"c"]
                if with_dead_letter:
                    [[letter]] = dead.batches
                    assert (letter.body, letter.id) == (b"", "r/1")
                    assert letter.headers["bridge-stage"] == "source"
                    assert "over max_body (1000)" in letter.headers["bridge-error"]
                else:
                    assert route.stats.nacked == 1
                # The whole message is in the dead-letter queue; nothing is left in the queue.
                passive = commands.Queue.Declare(queue=name, passive=True)
                left = await admin.rpc(passive, commands.Queue.DeclareOk)
                assert isinstance(left, commands.Queue.DeclareOk)
                assert left.message_count == 0
                reader = await client.channel()
                await reader.consume(dlq, 1)
                kept = await reader.next_delivery()
                assert (kept.body, kept.properties.message_id) == (big, "1")
                await reader.settle([("ack", kept.delivery_tag, False)])
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    for queue in (name, dlq):
                        await admin.rpc(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)


async def publishes(broker: Broker, count: int) -> None:
    seen = 0
    while seen < count:
        _, method = await broker.method()
        seen += isinstance(method, commands.Basic.Publish)


async def test_a_publish_over_the_brokers_max_message_size_is_rejected_alone_after_one_retry() -> (
    None
):
    sink = AmqpSink(AmqpSinkConfig(url="amqp://127.0.0.1:1/%2f", routing_key="q"), CTX)
    batch = [Message(b"a", {}, "a"), Message(b"x" * 2000, {}, "big"), Message(b"b", {}, "b")]
    text = "PRECONDITION_FAILED - message size 2000 is larger than configured max size 1000"
    async with connected() as (client, broker):
        channel = await confirming_channel(client, broker)

        async def close_at_the_big_one() -> None:
            await publishes(broker, 2)
            await broker.send(channel.number, commands.Channel.Close(406, text, 60, 40))
            while not isinstance((await broker.method())[1], commands.Channel.CloseOk):
                pass

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_at_the_big_one)
            with pytest.raises(ConnectionError, match="larger than configured max size 1000"):
                await _AmqpWriter(channel, sink, 5).write(batch)
        # The retry (a new channel, as the engine reopens the sink): the big one alone is rejected.
        channel = await confirming_channel(client, broker)

        async def ack_two() -> None:
            await publishes(broker, 2)
            await broker.send(channel.number, commands.Basic.Ack(2, multiple=True))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ack_two)
            with pytest.raises(MessageRejected) as rejected:
                await _AmqpWriter(channel, sink, 5).write(batch)
    assert rejected.value.indices == (1,)
    assert "2000 bytes is over the broker's max_message_size (1000" in rejected.value.reason
