"""Request/reply with trio_stomp: ``client.request`` and a responder, on any broker.

Run it from the repository's top folder, with the project installed in ``.venv``::

    .venv/bin/python examples/request_reply.py
    .venv/bin/python examples/request_reply.py stomp://guest:guest@127.0.0.1:61613/?vhost=/

Without an argument it starts an embedded broker of its own; with a broker URL
(RabbitMQ or ActiveMQ) it talks to that one. A responder, written with the
plain client API, serves ``/queue/upper``: it answers each request to the
``reply-to`` the request carries, with its ``correlation-id``. The requester
asks three questions at once (the replies find their requests by
``correlation-id``, whatever their order), then asks a service nobody serves
and gives up after its ``timeout`` (that request expires in the broker too:
see ``UNANSWERED``).
"""

from __future__ import annotations

import sys

import trio

import trio_stomp
from trio_stomp.broker import open_broker

SERVICE = "/queue/upper"

#: A request nobody may answer should not outlive its timeout in the broker: on
#: RabbitMQ a SEND to /queue/NAME declares a durable queue that keeps the
#: message for ever. ``expiration`` (ms) drops the message and ``x-expires``
#: (ms) the queue once unused; ActiveMQ's ``expires`` is an absolute time, so it
#: is left out here; the embedded broker keeps nothing after it stops.
UNANSWERED = {"expiration": "500", "x-expires": "2000"}


async def responder(url: str, *, task_status: trio.TaskStatus[None]) -> None:
    """Answer every request on SERVICE with its body upper-cased, until cancelled."""
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(SERVICE, receipt=True) as sub:
            task_status.started()
            async for request in sub:
                await client.send(
                    request.headers["reply-to"],
                    request.text.upper(),
                    headers={"correlation-id": request.headers["correlation-id"]},
                )


async def requester(url: str) -> None:
    async with trio_stomp.connect(url) as client, trio.open_nursery() as nursery:

        async def ask(question: str) -> None:
            reply = await client.request(SERVICE, question, timeout=5)
            print(f"{question!r} -> {reply.text!r}")

        for question in ("one", "two", "three"):
            nursery.start_soon(ask, question)
    async with trio_stomp.connect(url) as client:
        try:
            await client.request(
                "/queue/nobody-serves-this", "hello?", timeout=0.5, headers=UNANSWERED
            )
        except trio_stomp.RequestTimeout as exc:
            print(f"gave up: {exc}")


async def run(url: str) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(responder, url)
        await requester(url)
        nursery.cancel_scope.cancel()


async def main() -> None:
    if len(sys.argv) > 1:
        await run(sys.argv[1])
        return
    async with open_broker() as broker:
        await run(broker.url)


if __name__ == "__main__":
    trio.run(main)
