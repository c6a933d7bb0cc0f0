"""Send and receive with trio_stomp, on the embedded broker (no setup needed).

Run it from the repository's top folder, with the project installed in ``.venv``
(``scripts/quickstart`` makes it)::

    .venv/bin/python examples/hello.py
    .venv/bin/python examples/hello.py stomp://guest:guest@127.0.0.1:61613/?vhost=/

Without an argument it starts an embedded broker of its own on a free port;
with a broker URL (RabbitMQ above: ``scripts/brokers start rabbitmq``) it
talks to that one. It shows a subscription with client-individual acks,
sends with receipts, a transaction, and a reconnecting client that reports
its connection events; on the embedded broker that client lives through a
restart of the broker. A URL that no broker answers fails within
``CONNECT_TIMEOUT`` with one line saying why, and exit status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import attrs
import trio

import trio_stomp
from trio_stomp.broker import open_broker

#: Seconds the first connection may take before hello gives up.
CONNECT_TIMEOUT = 5.0


async def tour(url: str) -> None:
    """A plain client (no reconnecting): a URL that does not answer fails here, at once."""
    async with trio_stomp.connect(url, connect_timeout=CONNECT_TIMEOUT) as client:
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


def show(event: trio_stomp.ConnectionEvent) -> None:
    """The reconnecting client's ``on_event``: one readable line per event."""
    if event.kind == "lost":
        print(f"connection lost to {event.url} ({event.error}); reconnecting")
    else:
        print(
            f"connection restored to {event.url} after {event.attempts} attempt(s), "
            f"{event.downtime:.1f} s down"
        )


async def reconnecting(url: str, restart: Callable[[], Awaitable[None]] | None = None) -> None:
    """A reconnecting client: it sends on, through RESTART (a broker restart) when given."""
    policy = trio_stomp.Reconnect(initial_delay=0.1, max_delay=5)
    async with trio_stomp.connect(
        url, connect_timeout=CONNECT_TIMEOUT, reconnect=policy, on_event=show
    ) as client:
        async with client.subscribe("/queue/hello.again") as sub:
            if restart is not None:
                await restart()
            # Waits until the connection is back, and its subscription with it.
            await client.send("/queue/hello.again", "sent by the reconnecting client", receipt=True)
            async for message in sub:
                print(f"received {message.text!r}")
                break


@attrs.define
class Serving:
    """One run of the embedded broker: set ``stop``, then wait for ``stopped``."""

    stop: trio.Event = attrs.Factory(trio.Event)
    stopped: trio.Event = attrs.Factory(trio.Event)


async def serve(port: int, run: Serving, *, task_status: trio.TaskStatus[int]) -> None:
    """An embedded broker on PORT (0: a free one) until RUN.stop; starts with its port."""
    try:
        async with open_broker(port=port) as broker:
            task_status.started(broker.port)
            await run.stop.wait()
    finally:
        run.stopped.set()


async def on_embedded() -> None:
    async with trio.open_nursery() as nursery:
        run = Serving()
        port: int = await nursery.start(serve, 0, run)
        url = f"stomp://127.0.0.1:{port}"
        print(f"embedded broker on {url}")
        await tour(url)

        async def restart() -> None:
            nonlocal run
            print("restarting the embedded broker")
            run.stop.set()
            await run.stopped.wait()
            run = Serving()
            await nursery.start(serve, port, run)

        await reconnecting(url, restart)
        run.stop.set()


async def main() -> int:
    try:
        if len(sys.argv) > 1:
            await tour(sys.argv[1])
            await reconnecting(sys.argv[1])
        else:
            await on_embedded()
    except trio_stomp.ConnectFailed as exc:
        print(f"hello: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
