"""Confirmed publishes on the family's own channel (amqp/_channel.py), sink failures: RabbitMQ."""

from __future__ import annotations

import pytest
import trio
from amqp_servers import HOSTPORT, get_all, queue, rabbit, require_amqp, unique
from pamqp import commands

from bridges import Context, Message
from bridges.endpoints.amqp import AmqpSink, AmqpSinkConfig
from bridges.endpoints.amqp._channel import Publish
from bridges.endpoints.amqp._client import Settings, open_client
from trio_stomp.testing import FaultProxy

CTX = Context(route="r", in_flight=20)
PERSISTENT = 2


def publishes(key: str, count: int, exchange: str = "") -> list[Publish]:
    return [
        Publish(
            exchange,
            key,
            b"%d" % i,
            commands.Basic.Properties(delivery_mode=PERSISTENT, message_id=f"c{i}"),
        )
        for i in range(count)
    ]


def rabbit_settings() -> tuple[str, int, Settings]:
    host, port = HOSTPORT.split(":")
    return host, int(port), Settings()


async def test_a_batch_is_confirmed_and_a_return_is_matched_to_its_publish() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        host, port, settings = rabbit_settings()
        async with open_client(host, port, settings, within=10) as client:
            ours = await client.channel()
            await ours.confirm()
            batch = publishes(name, 300)
            batch[150] = publishes("no-such-queue-" + name, 151)[150]
            outcomes = await ours.publish(batch)
            assert outcomes[150] == "NO_ROUTE"
            assert outcomes[:150] == [None] * 150
            assert outcomes[151:] == [None] * 149
            # The next batch on the same channel: tags go on from where they were.
            assert await ours.publish(publishes(name, 5)) == [None] * 5
        assert len(await get_all(aio, channel, name)) == 299 + 5


async def test_a_cancelled_batch_leaves_the_channel_usable() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        host, port, settings = rabbit_settings()
        async with open_client(host, port, settings, within=10) as client:
            ours = await client.channel()
            await ours.confirm()
            with trio.move_on_after(0):
                await ours.publish(publishes(name, 200))
            # (its confirms still come, for tags nobody waits for: they are ignored)
            again = await ours.publish(publishes(name, 20))
            assert again == [None] * 20
        assert 20 <= len(await get_all(aio, channel, name)) <= 220


async def test_a_batch_holding_one_id_twice_is_published_in_rounds() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        sink = AmqpSink(AmqpSinkConfig(url=url, routing_key=name), CTX)
        batch = [Message(b"1", {}, "a"), Message(b"2", {}, "b"), Message(b"3", {}, "a")]
        async with sink.open() as writer:
            await writer.write(batch)
        assert sorted(m.body for m in await get_all(aio, channel, name)) == [b"1", b"2", b"3"]


async def test_a_nacked_publish_fails_the_write() -> None:
    url = require_amqp()
    name = unique()
    async with rabbit(url) as (aio, channel):
        arguments = {"x-max-length": 2, "x-overflow": "reject-publish"}
        await aio.run(channel.declare_queue, name, durable=True, arguments=arguments)
        try:
            sink = AmqpSink(AmqpSinkConfig(url=url, routing_key=name), CTX)
            async with sink.open() as writer:
                batch = [Message(b"%d" % i, {}, f"n{i}") for i in range(5)]
                with pytest.raises(ConnectionError, match="publishing failed"):
                    await writer.write(batch)
        finally:
            with trio.CancelScope(shield=True):
                await aio.run(channel.queue_delete, name)


@pytest.mark.deadline(30)
async def test_a_channel_closed_under_a_batch_fails_the_write_at_once() -> None:
    url = require_amqp()
    exchange = unique()
    async with rabbit(url) as (aio, channel):
        await aio.run(channel.declare_exchange, exchange, "fanout")
        sink = AmqpSink(AmqpSinkConfig(url=url, exchange=exchange, confirm_timeout=20.0), CTX)
        async with sink.open() as writer:
            await aio.run(channel.exchange_delete, exchange)
            batch = [Message(b"%d" % i, {}, f"x{i}") for i in range(50)]
            with trio.fail_after(10), pytest.raises(ConnectionError, match="NOT_FOUND"):
                await writer.write(batch)


@pytest.mark.deadline(40)
async def test_a_stalled_broker_is_a_timeout_and_a_cut_one_a_connection_error() -> None:
    url = require_amqp()
    host, port = HOSTPORT.split(":")
    async with queue(url) as (name, aio, channel), trio.open_nursery() as nursery:
        proxy = FaultProxy((host, int(port)))
        await nursery.start(proxy.serve)
        proxied = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2f"
        config = AmqpSinkConfig(url=proxied, routing_key=name, confirm_timeout=1.0)
        batch = [Message(b"%d" % i, {}, f"s{i}") for i in range(200)]
        async with AmqpSink(config, CTX).open() as writer:
            await writer.write(batch[:10])
            proxy.stall("down")  # (the publishes reach the broker, its confirms do not come back)
            with trio.fail_after(10), pytest.raises(TimeoutError, match="did not confirm"):
                await writer.write(batch)
            proxy.resume()
        async with AmqpSink(config, CTX).open() as writer:
            await writer.write(batch[:10])
            proxy.cut()
            with trio.fail_after(10), pytest.raises(ConnectionError):
                await writer.write(batch)
        nursery.cancel_scope.cancel()
        assert {m.body for m in await get_all(aio, channel, name)} <= {m.body for m in batch}
