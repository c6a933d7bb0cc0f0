"""RabbitMQ for the amqp endpoint tests: the project's broker on 5672 (guest/guest).

``scripts/brokers up`` starts it (``TRIO_STOMP_AMQP_URL`` points elsewhere).
When it does not answer, tests skip, or fail under ``STOMP_REQUIRE_BROKERS=1``
(CI never silently skips). Restarting RabbitMQ would disturb every other
test, so that is done only by the crash/bench script; a test that needs a
broken connection goes through :class:`trio_stomp.testing.FaultProxy`.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aio_pika
import trio
from family_kit import host_port, require_server

from bridges import Context
from bridges.endpoints._asyncio import AsyncioLoop, asyncio_loop

AMQP_URL = os.environ.get("TRIO_STOMP_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
HOSTPORT = host_port(AMQP_URL)


def _probe(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            reply = sock.recv(16)
    except OSError as exc:
        return (
            f"RabbitMQ is not running on {host}:{port} ({exc}); start it with `scripts/brokers up`"
        )
    if reply[:1] == b"\x01":  # a method frame: connection.start
        return None
    return f"{host}:{port} answered {reply!r} to the AMQP 0-9-1 header"


def require_amqp() -> str:
    """The broker's URL; skip (locally) or fail (CI) when it is not up."""
    return require_server(AMQP_URL, 5672, _probe)


def unique() -> str:
    return f"trio-stomp-test-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def rabbit(url: str) -> AsyncIterator[tuple[AsyncioLoop, Any]]:
    """The bare aio-pika client on a private asyncio loop, and a channel."""
    async with asyncio_loop(Context()) as aio:
        connection = await aio.run(aio_pika.connect, url)
        try:
            yield aio, await aio.run(_channel, connection)
        finally:
            with trio.CancelScope(shield=True):
                await aio.run(connection.close)


async def _channel(connection: Any) -> Any:
    return await connection.channel()


@asynccontextmanager
async def queue(url: str) -> AsyncIterator[tuple[str, AsyncioLoop, Any]]:
    """A fresh durable queue NAME (also bound to amq.direct with key NAME), deleted after."""
    name = unique()
    async with rabbit(url) as (aio, channel):
        declared = await aio.run(channel.declare_queue, name, durable=True)
        await aio.run(declared.bind, "amq.direct", name)
        try:
            yield name, aio, channel
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await aio.run(channel.queue_delete, name)


async def get_all(aio: AsyncioLoop, channel: Any, name: str) -> list[Any]:
    """Every message in queue NAME now, taken with basic.get and acked (the queue is left empty)."""
    found: list[Any] = []
    declared = await aio.run(channel.get_queue, name)
    while True:
        message = await aio.run(declared.get, fail=False, no_ack=True)
        if message is None:
            return found
        found.append(message)


async def publish(aio: AsyncioLoop, channel: Any, name: str, *messages: aio_pika.Message) -> None:
    """Publish to queue NAME through the default exchange."""
    for message in messages:
        await aio.run(channel.default_exchange.publish, message, name)
