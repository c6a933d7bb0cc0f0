"""Send and receive with trio_stomp, on the embedded broker (no setup needed).

Run: ``.venv/bin/python examples/hello.py`` (or pass a broker URL, e.g.
``stomp://guest:guest@127.0.0.1:61613/?vhost=/`` for RabbitMQ).

Shows a subscription with client-individual acks, sends with receipts, a
transaction, and a reconnecting client that reports connection events.
"""

from __future__ import annotations

import sys

import trio

import trio_stomp
from trio_stomp.broker import open_broker


async def demo(url: str) -> None:
    policy = trio_stomp.Reconnect(initial_delay=0.1, max_delay=5)
    async with trio_stomp.connect(url, reconnect=policy, on_event=print) as client:
        print(f"connected: STOMP {client.version} to {client.server}")
        async with client.subscribe("/queue/hello", ack="client-individual") as sub:
            await client.send("/queue/hello", "hello, world", receipt=True)
            async with client.transaction() as tx:  # both or neither
                await tx.send("/queue/hello", b"first of two")
                await tx.send("/queue/hello", b"second of two")
            received = 0
            async for message in sub:
                print(f"received {message.text!r} (id {message.message_id})")
                await message.ack()
                received += 1
                if received == 3:
                    break


async def main() -> None:
    if len(sys.argv) > 1:
        await demo(sys.argv[1])
        return
    async with open_broker() as broker:
        print(f"embedded broker on {broker.url}")
        await demo(broker.url)


if __name__ == "__main__":
    trio.run(main)
