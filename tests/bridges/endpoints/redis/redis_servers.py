"""Redis for the redis endpoint tests: the project's server, or a private one we may restart.

The shared server is the one ``scripts/brokers up redis`` starts on 6379
(``TRIO_STOMP_REDIS_URL`` points elsewhere). When it does not answer, tests
skip, or fail under ``STOMP_REQUIRE_BROKERS=1`` (CI never silently skips).
Tests that restart the server run their own ``redis-server`` process on a
free port instead, so that they disturb nobody. What every family shares is
in ``tests/family_kit.py``.
"""

from __future__ import annotations

import os
import shutil
import socket
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import trustme
from family_kit import (
    PrivateServer,
    free_port,
    host_port,
    private_server,
    require_programs,
    require_server,
)

REDIS_URL = os.environ.get("TRIO_STOMP_REDIS_URL", "redis://127.0.0.1:6379/0")
#: host:port of the shared server.
HOSTPORT = host_port(REDIS_URL)
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


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
    return require_server(REDIS_URL, 6379, _ping)


class PrivateRedis(PrivateServer):
    """A redis-server of our own (AOF, appendfsync always) that a test may restart."""

    programs = (REDIS_SERVER,)

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        #: A TLS port too (certificate for localhost and 127.0.0.1 from a private CA).
        self.tls_port = free_port()
        self.tls_url = f"rediss://localhost:{self.tls_port}/0"
        self.ca_file = directory / "ca.pem"
        authority = trustme.CA()
        authority.cert_pem.write_to_path(str(self.ca_file))
        issued = authority.issue_cert("localhost", "127.0.0.1")
        issued.private_key_pem.write_to_path(str(directory / "key.pem"))
        issued.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))

    def probe(self, host: str, port: int) -> str | None:
        return _ping(host, port)

    def command(self) -> list[str]:
        # SIGTERM on stop: redis finishes its AOF and exits.
        return [
            REDIS_SERVER,
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            "--proto-max-bulk-len", "1mb",
            "--tls-port", str(self.tls_port), "--tls-auth-clients", "no",
            "--tls-cert-file", str(self.directory / "cert.pem"),
            "--tls-key-file", str(self.directory / "key.pem"),
        ]  # fmt: skip


def private_redis_available() -> None:
    """Skip (locally) or fail (CI) when redis-server is not installed."""
    require_programs(*PrivateRedis.programs)


def private_redis(directory: Path) -> AbstractAsyncContextManager[PrivateRedis]:
    """A private server for one test, stopped (and reaped) when the block ends."""
    return private_server(PrivateRedis, directory)
