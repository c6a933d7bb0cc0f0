"""Redis for the redis endpoint tests: the project's server, or a private one we may restart.

The shared server is the one ``scripts/brokers up redis`` starts on 6379
(``TRIO_STOMP_REDIS_URL`` points elsewhere). When it does not answer, tests
skip, or fail under ``STOMP_REQUIRE_BROKERS=1`` (CI never silently skips).
Tests that restart the server run their own ``redis-server`` process on a
free port instead, so that they disturb nobody.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trustme

REDIS_URL = os.environ.get("TRIO_STOMP_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE = os.environ.get("STOMP_REQUIRE_BROKERS") == "1"
#: host:port of the shared server.
HOSTPORT = REDIS_URL.split("//", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]


REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"STOMP_REQUIRE_BROKERS=1 but {reason}")
    pytest.skip(reason)


def _ping(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except OSError as exc:
        return f"redis is not running on {host}:{port} ({exc}); start it with `scripts/brokers up`"
    if reply.startswith((b"+PONG", b"-NOAUTH")):
        return None
    return f"{host}:{port} answered {reply!r} to PING"


def require_redis() -> str:
    """The shared server's URL; skip (locally) or fail (CI) when it is not up."""
    host, _, port = HOSTPORT.partition(":")
    reason = _ping(host, int(port or 6379))
    if reason is not None:
        _unavailable(reason)
    return REDIS_URL


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateRedis:
    """A redis-server of our own (AOF, appendfsync always) that a test may restart."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        #: A TLS port too (certificate for localhost and 127.0.0.1 from a private CA).
        self.tls_port = free_port()
        self.tls_url = f"rediss://localhost:{self.tls_port}/0"
        self.ca_file = directory / "ca.pem"
        self._directory = directory
        self._process: trio.Process | None = None
        authority = trustme.CA()
        authority.cert_pem.write_to_path(str(self.ca_file))
        issued = authority.issue_cert("localhost", "127.0.0.1")
        issued.private_key_pem.write_to_path(str(directory / "key.pem"))
        issued.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))

    async def start(self) -> None:
        command = [
            REDIS_SERVER,
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self._directory),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            "--proto-max-bulk-len", "1mb",
            "--tls-port", str(self.tls_port), "--tls-auth-clients", "no",
            "--tls-cert-file", str(self._directory / "cert.pem"),
            "--tls-key-file", str(self._directory / "key.pem"),
        ]  # fmt: skip
        self._process = await trio.lowlevel.open_process(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        with trio.fail_after(10):
            while _ping("127.0.0.1", self.port) is not None:  # noqa: ASYNC110 (a process)
                await trio.sleep(0.02)

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.terminate()  # SIGTERM: redis finishes its AOF and exits
            with trio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()

    async def restart(self, down: float = 0.3) -> None:
        await self.stop()
        await trio.sleep(down)
        await self.start()


def private_redis_available() -> None:
    """Skip (locally) or fail (CI) when redis-server is not installed."""
    if not os.access(REDIS_SERVER, os.X_OK):
        _unavailable("redis-server is not installed (scripts/brokers up installs it)")


@asynccontextmanager
async def private_redis(directory: Path) -> AsyncIterator[PrivateRedis]:
    """A private server for one test, stopped (and reaped) when the block ends."""
    private_redis_available()
    server = PrivateRedis(directory)
    try:
        await server.start()
        yield server
    finally:
        with trio.CancelScope(shield=True):
            await server.stop()
