"""Which id a stomp source hands out again when a broker redelivers: the broker decides.

The embedded broker and ActiveMQ keep a message's ``message-id`` across
redelivery (to another connection too); RabbitMQ gives each delivery a new one
(``T_1@@session-...@@1``): only ``bridge-id`` (and a publisher's
``amqp-message-id``) is stable there. docs/explanation/exactly-once.md's table says the same.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio

import trio_stomp
from bridges import Context, Envelope
from bridges.endpoints.stomp import StompSource, StompSourceConfig
from trio_stomp.broker import open_broker

from conftest import Target

CTX = Context(route="ids", in_flight=10)


async def delivered_twice(
    url: str,
    destination: str,
    headers: dict[str, str],
    id_template: str | None = None,
    context: Context = CTX,
) -> tuple[str, ...]:
    """The id of one message as handed out first, after a nack, and after a close."""
    async with trio_stomp.connect(url) as client:
        await client.send(destination, b"once", headers=headers, receipt=True)
    config = StompSourceConfig(url=url, destination=destination, id_template=id_template)
    source = StompSource(config, context)
    ids = []
    for settle in ("nack", "close", "ack"):  # nacked; left unsettled at a close; acked
        with trio.fail_after(10):
            async with source.open() as receiver:
                envelope: Envelope = await receiver.receive()
                ids.append(envelope.message.id)
                if settle == "nack":
                    await envelope.nack(None)
                elif settle == "ack":
                    await envelope.ack()
    return tuple(ids)


async def test_the_message_id_is_stable_on_the_embedded_broker_and_activemq_not_rabbitmq(
    target: Target, unique: Callable[[str], str]
) -> None:
    ids = await delivered_twice(target.url, unique("queue"), {})
    if target.name == "rabbitmq":
        assert len(set(ids)) == 3  # a new message-id per delivery
    else:
        assert len(set(ids)) == 1
        assert ids[0]


async def test_bridge_id_is_stable_on_every_broker(
    target: Target, unique: Callable[[str], str]
) -> None:
    ids = await delivered_twice(target.url, unique("queue"), {"bridge-id": "b-1"})
    assert ids == ("b-1", "b-1", "b-1")


async def test_a_publishers_amqp_message_id_is_stable_on_every_broker(
    target: Target, unique: Callable[[str], str]
) -> None:
    ids = await delivered_twice(target.url, unique("queue"), {"amqp-message-id": "a-1"})
    assert ids == ("ids/a-1", "ids/a-1", "ids/a-1")  # ROUTE/ and the publisher's id


async def test_two_routes_never_give_two_distinct_messages_one_id(
    target: Target, unique: Callable[[str], str]
) -> None:
    # Two publishers (two queues, two routes feeding one queue downstream) both number
    # their messages from 1: each route's ids are its own, and stay so on redelivery.
    first, second = [
        await delivered_twice(
            target.url, unique("queue"), {"amqp-message-id": "1"}, context=Context(route=r)
        )
        for r in ("a", "b")
    ]
    assert (set(first), set(second)) == ({"a/1"}, {"b/1"})
    if target.name != "rabbitmq":  # (its message-id is new on each delivery)
        first, second = [
            await delivered_twice(target.url, unique("queue"), {}, context=Context(route=r))
            for r in ("a", "b")
        ]
        assert len(set(first)) == len(set(second)) == 1
        assert first[0].startswith("a/")
        assert second[0].startswith("b/")


async def test_an_id_template_makes_a_stable_id_on_every_broker(
    target: Target, unique: Callable[[str], str]
) -> None:
    headers = {"order": "o-1"}
    ids = await delivered_twice(target.url, unique("queue"), headers, "{header:order}:{body_hash}")
    assert len(set(ids)) == 1
    assert ids[0].startswith("o-1:")


async def test_the_embedded_brokers_store_keeps_the_message_id_across_a_restart(
    tmp_path: Path, unique: Callable[[str], str]
) -> None:
    destination = unique("queue")
    async with open_broker(data_dir=tmp_path) as broker:
        async with trio_stomp.connect(broker.url) as client:
            await client.send(destination, b"kept", receipt=True)
        source = StompSource(StompSourceConfig(url=broker.url, destination=destination), CTX)
        with trio.fail_after(10):
            async with source.open() as receiver:
                before = (await receiver.receive()).message.id  # unsettled at the "crash"
    async with open_broker(data_dir=tmp_path) as broker:
        source = StompSource(StompSourceConfig(url=broker.url, destination=destination), CTX)
        with trio.fail_after(10):
            async with source.open() as receiver:
                envelope = await receiver.receive()
                await envelope.ack()
    assert envelope.message.id == before
    assert envelope.message.body == b"kept"
