"""Durable topic subscriptions on the embedded broker: kept while away, and across a restart.

Run it from the repository's top folder, with the project installed in ``.venv``::

    .venv/bin/python examples/durable_subscription.py

A subscriber named as ActiveMQ names one (``client-id: billing`` on CONNECT,
``activemq.subscriptionName: orders`` on SUBSCRIBE) reads an order and leaves.
Two orders are published while it is away, then the broker stops and starts
again on the same data dir, and the subscriber comes back to both. Last, with
the broker stopped, its data dir's durable subscriptions are listed and this
one removed, as ``trio-stomp broker --data-dir DIR --list-subscriptions`` and
``--remove-subscription billing orders`` do. On ActiveMQ the subscriber's side
is the same (see docs/howto/durable-subscriptions.md).
"""

from __future__ import annotations

import tempfile

import trio

import trio_stomp
from trio_stomp.broker import (
    list_durable_subscriptions,
    open_broker,
    remove_durable_subscription,
)

TOPIC = "/topic/orders"
CLIENT_ID = {"client-id": "billing"}
NAME = {"activemq.subscriptionName": "orders"}


async def read(
    url: str, count: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Subscribe as the durable subscriber, print ``count`` messages, leave."""
    async with (
        trio_stomp.connect(url, headers=CLIENT_ID) as client,
        client.subscribe(TOPIC, headers=NAME, ack="client-individual", receipt=True) as sub,
    ):
        task_status.started()
        async for message in sub:
            again = " (redelivered: kept in the store)" if message.redelivered else ""
            print(f"got {message.text!r}{again}")
            await message.ack()
            count -= 1
            if not count:
                break


async def main() -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        async with open_broker(data_dir=data_dir) as broker:
            async with trio_stomp.connect(broker.url) as producer:
                async with trio.open_nursery() as nursery:
                    await nursery.start(read, broker.url, 1)  # (once it is subscribed)
                    await producer.send(TOPIC, "order 1", receipt=True)
                for order in ("order 2", "order 3"):
                    await producer.send(TOPIC, order, receipt=True)
                print("published 'order 2', 'order 3' while it was away; restarting the broker")
        async with open_broker(data_dir=data_dir) as broker:
            await read(broker.url, 2)
        for info in await list_durable_subscriptions(data_dir):
            print(f"kept: {info.client_id} {info.name} {info.destination} ({info.messages} held)")
        await remove_durable_subscription(data_dir, "billing", "orders")
        print(f"removed; left: {await list_durable_subscriptions(data_dir)}")


if __name__ == "__main__":
    trio.run(main)
