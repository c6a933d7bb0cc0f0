"""nats-server for the nats endpoint tests: the project's server, or a private one we may restart.

The shared server is the one ``scripts/brokers up nats`` starts on 4222 with
JetStream and guest/guest (``TRIO_STOMP_NATS_URL`` points elsewhere). When
it does not answer, tests skip, or fail under ``STOMP_REQUIRE_BROKERS=1``
(CI never silently skips). Tests that restart the server, or need a small
``max_payload``, run their own ``nats-server`` on a free port.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats
import pytest
import trio

from bridges import Context
from bridges.endpoints._asyncio import AsyncioLoop, asyncio_loop

NATS_URL = os.environ.get("TRIO_STOMP_NATS_URL", "nats://guest:guest@127.0.0.1:4222")
REQUIRE = os.environ.get("STOMP_REQUIRE_BROKERS") == "1"
HOSTPORT = NATS_URL.split("//", 1)[1].rsplit("@", 1)[-1].split("/", 1)[0]
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
#: max_payload of the private server (the shared one has the default, 1 MiB).
PRIVATE_MAX_PAYLOAD = 64 * 1024


def unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"STOMP_REQUIRE_BROKERS=1 but {reason}")
    pytest.skip(reason)


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
    host, _, port = HOSTPORT.partition(":")
    reason = _probe(host, int(port or 4222))
    if reason is not None:
        unavailable(reason)
    return NATS_URL


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateNats:
    """A nats-server of our own: JetStream stored in ``directory``, guest/guest, small payloads."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"nats://guest:guest@127.0.0.1:{self.port}"
        self._directory = directory
        self._process: trio.Process | None = None

    async def start(self) -> None:
        config = self._directory / "nats.conf"
        config.write_text(
            f"listen: 127.0.0.1:{self.port}\n"
            f'jetstream {{ store_dir: "{self._directory / "js"}" }}\n'
            "authorization { user: guest, password: guest }\n"
            f"max_payload: {PRIVATE_MAX_PAYLOAD}\n"
        )
        self._process = await trio.lowlevel.open_process(
            [NATS_SERVER, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        with trio.fail_after(10):
            while _probe("127.0.0.1", self.port) is not None:  # noqa: ASYNC110 (a process)
                await trio.sleep(0.02)

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.terminate()
            with trio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()

    async def restart(self, down: float = 0.3) -> None:
        await self.stop()
        await trio.sleep(down)
        await self.start()


@asynccontextmanager
async def private_nats(directory: Path) -> AsyncIterator[PrivateNats]:
    """A private server for one test, stopped (and reaped) when the block ends."""
    if not os.access(NATS_SERVER, os.X_OK):
        unavailable("nats-server is not installed (scripts/brokers up installs it)")
    server = PrivateNats(directory)
    try:
        await server.start()
        yield server
    finally:
        with trio.CancelScope(shield=True):
            await server.stop()
