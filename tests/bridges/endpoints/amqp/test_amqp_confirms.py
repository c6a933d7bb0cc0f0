"""Confirmed publishes stepped in one task (amqp/_confirms.py) and sink failures, on RabbitMQ."""

from __future__ import annotations

import asyncio
from typing import Any

import aiormq
import aiormq.abc
import pytest
import trio
from amqp_servers import HOSTPORT, get_all, queue, rabbit, require_amqp, unique

from bridges import Context, Message
from bridges.endpoints.amqp import AmqpSink, AmqpSinkConfig
from bridges.endpoints.amqp._confirms import Publish, publish_confirmed
from bridges.testing import wait_until
from trio_stomp.testing import FaultProxy

CTX = Context(route="r", in_flight=20)
PERSISTENT = 2


def publishes(key: str, count: int, exchange: str = "") -> list[Publish]:
    return [
        Publish(
            exchange,
            key,
            b"%d" % i,
            aiormq.spec.Basic.Properties(delivery_mode=PERSISTENT, message_id=f"c{i}"),
        )
        for i in range(count)
    ]


class Recording:
    """Wraps a channel's ``basic_publish``: notes when each publish starts and ends."""

    def __init__(self, channel: aiormq.Channel, cancel_at: int | None = None) -> None:
        self.events: list[str] = []
        self._real = channel.basic_publish
        self._cancel_at = cancel_at

    async def basic_publish(self, *args: Any, **kwargs: Any) -> Any:
        self.events.append("start")
        if self.events.count("start") == self._cancel_at:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # (the task that steps every publish: as a confirm timeout would)
        try:
            return await self._real(*args, **kwargs)
        finally:
            self.events.append("end")


async def test_a_batch_is_all_sent_before_any_confirmation_is_awaited() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        underlay = await aio.run(channel.get_underlay_channel)
        recording = Recording(underlay)
        underlay.basic_publish = recording.basic_publish
        batch = publishes(name, 300, exchange="amq.direct")  # (30 times the write queue)
        batch[150] = Publish("amq.direct", "no-such-binding", b"lost", batch[150].properties)
        outcomes = await aio.run(publish_confirmed, underlay, batch)
        # Every publish was under way before the first one was waited for.
        assert recording.events[:300] == ["start"] * 300
        assert recording.events.count("end") == 300
        # (this channel has on_return_raises=False: basic_publish returns the returned message)
        assert isinstance(outcomes[150], aiormq.abc.DeliveredMessage)
        assert isinstance(outcomes[150].delivery, aiormq.spec.Basic.Return)
        assert all(
            isinstance(outcome, aiormq.spec.Basic.Ack)
            for index, outcome in enumerate(outcomes)
            if index != 150
        )
        held = await get_all(aio, channel, name)
        assert len(held) == 299
        assert underlay.confirmations == {}


async def test_cancelled_publishes_end_as_cancelled_tasks_would() -> None:
    url = require_amqp()
    async with queue(url) as (name, aio, channel):
        underlay = await aio.run(channel.get_underlay_channel)
        recording = Recording(underlay, cancel_at=50)
        underlay.basic_publish = recording.basic_publish
        with pytest.raises(trio.BrokenResourceError):  # (asyncio-side cancel: AsyncioLoop.run)
            await aio.run(publish_confirmed, underlay, publishes(name, 200))
        # Each one that was started has run to its end (aiormq's own cleanup).
        started = recording.events.count("start")
        assert 50 <= started < 200
        assert recording.events.count("end") == started
        # The channel is fine: the next batch is confirmed, nothing is left waiting.
        again = await aio.run(publish_confirmed, underlay, publishes(name, 20))
        assert all(isinstance(outcome, aiormq.spec.Basic.Ack) for outcome in again)
        await wait_until(lambda: not underlay.confirmations)
        assert 20 <= len(await get_all(aio, channel, name)) <= 20 + started


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
