"""Selectors: consumers that pick their messages by header, on one queue and a topic.

Run it from the repository's top folder, with the project installed in ``.venv``::

    .venv/bin/python examples/selector_tour.py
    .venv/bin/python examples/selector_tour.py stomp://guest:guest@127.0.0.1:61623/

Without an argument it starts an embedded broker of its own; with a URL it
talks to that broker (ActiveMQ above: ``scripts/brokers start activemq``;
RabbitMQ has no selectors). Two consumers of one queue each select their
region's orders; the order neither selects stays in the queue until a
consumer without a selector takes it. A topic subscriber selects by a
number compared with a header (headers are strings: the broker reads
``size:42`` as 42 to compare it with a number). Last, a selector that does
not parse is refused with the broker's ERROR.
"""

from __future__ import annotations

import sys
import uuid

import trio

import trio_stomp
from trio_stomp.broker import open_broker

ORDERS = [("eu", 5), ("us", 40), ("eu", 42), ("apac", 7), ("us", 12)]


async def take(sub: trio_stomp.Subscription, count: int, who: str) -> None:
    """Print the next COUNT messages of SUB as WHO received them."""
    if count == 0:
        return
    got = 0
    async for message in sub:
        print(f"{who:<7} got {message.text}")
        got += 1
        if got == count:
            return


async def tour(url: str) -> None:
    run = uuid.uuid4().hex[:8]  # fresh names: a real broker keeps what a queue holds
    queue, topic = f"/queue/orders-{run}", f"/topic/orders-{run}"
    async with trio_stomp.connect(url) as client:
        eu = client.subscribe(queue, headers={"selector": "region = 'eu'"}, receipt=True)
        us = client.subscribe(queue, headers={"selector": "region = 'us'"}, receipt=True)
        big = client.subscribe(topic, headers={"selector": "size > 10"}, receipt=True)
        async with eu as eu_sub, us as us_sub, big as big_sub:
            for region, size in ORDERS:
                text = f"order {region} size {size}"
                headers = {"region": region, "size": str(size)}
                await client.send(queue, text, headers=headers, receipt=True)
                await client.send(topic, text, headers=headers, receipt=True)
            await take(eu_sub, 2, "eu")
            await take(us_sub, 2, "us")
            await take(big_sub, 3, "size>10")
        async with client.subscribe(queue, receipt=True) as anyone:
            await take(anyone, 1, "anyone")
    try:
        async with (
            trio_stomp.connect(url) as client,
            client.subscribe(queue, headers={"selector": "region = "}, receipt=True),
        ):
            pass
    except trio_stomp.ServerError as exc:
        print(f"refused: {str(exc).splitlines()[0]}")


async def main(argv: list[str]) -> None:
    with trio.fail_after(30):
        if argv:
            await tour(argv[0])
            return
        async with open_broker() as broker:
            await tour(broker.url)


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
