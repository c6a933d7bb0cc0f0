"""nats-server for the nats endpoint tests: the project's server, or a private one we may restart.

The shared server is the one ``scripts/brokers up nats`` starts on 4222 with
JetStream and guest/guest (``TRIO_STOMP_NATS_URL`` points elsewhere). When
it does not answer, tests skip, or fail under ``STOMP_REQUIRE_BROKERS=1``
(CI never silently skips). Tests that restart the server, or need a small
``max_payload``, run their own ``nats-server`` on a free port. What every
family shares is in ``tests/family_kit.py``.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import nats
import trio
from family_kit import PrivateServer, host_port, private_server, require_server

from bridges import Context
from bridges.endpoints._asyncio import AsyncioLoop, asyncio_loop

NATS_URL = os.environ.get("TRIO_STOMP_NATS_URL", "nats://guest:guest@127.0.0.1:4222")
HOSTPORT = host_port(NATS_URL)
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
#: max_payload of the private server (the shared one has the default, 1 MiB).
PRIVATE_MAX_PAYLOAD = 64 * 1024


def _probe(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            greeting = sock.recv(4096)
    except OSError as exc:
        return f"nats is not running on {host}:{port} ({exc}); start it with `scripts/brokers up`"
    if greeting.startswith(b"INFO "):
        return None
    return f"{host}:{port} greeted with {greeting[:40]!r}, not INFO"


def require_nats() -> str:
    """The shared server's URL; skip (locally) or fail (CI) when it is not up."""
    return require_server(NATS_URL, 4222, _probe)


def unique() -> str:
    return f"TS{uuid.uuid4().hex[:10].upper()}"


@asynccontextmanager
async def jetstream(url: str) -> AsyncIterator[tuple[AsyncioLoop, Any]]:
    """The bare nats-py client on a private asyncio loop, with its JetStream context."""
    async with asyncio_loop(Context()) as aio:
        client = await aio.run(nats.connect, url, allow_reconnect=False)
        try:
            yield aio, await aio.call(client.jetstream)
        finally:
            with trio.CancelScope(shield=True):
                await aio.run(client.close)


@asynccontextmanager
async def stream(url: str, **settings: Any) -> AsyncIterator[tuple[str, AsyncioLoop, Any]]:
    """A fresh stream NAME capturing ``NAME.>``, deleted after the block."""
    name = unique()
    async with jetstream(url) as (aio, js):
        await aio.run(js.add_stream, name=name, subjects=[f"{name}.>"], **settings)
        try:
            yield name, aio, js
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await aio.run(js.delete_stream, name)


class PrivateNats(PrivateServer):
    """A nats-server of our own: JetStream stored in ``directory``, guest/guest, small payloads."""

    programs = (NATS_SERVER,)

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.url = f"nats://guest:guest@127.0.0.1:{self.port}"

    def probe(self, host: str, port: int) -> str | None:
        return _probe(host, port)

    def command(self) -> list[str]:
        config = self.directory / "nats.conf"
        config.write_text(
            f"listen: 127.0.0.1:{self.port}\n"
            f'jetstream {{ store_dir: "{self.directory / "js"}" }}\n'
            "authorization { user: guest, password: guest }\n"
            f"max_payload: {PRIVATE_MAX_PAYLOAD}\n"
        )
        return [NATS_SERVER, "-c", str(config)]


def private_nats(directory: Path) -> AbstractAsyncContextManager[PrivateNats]:
    """A private server for one test, stopped (and reaped) when the block ends."""
    return private_server(PrivateNats, directory)
