"""What both ``redis`` endpoints share: connection settings, the client, and error mapping.

The client is coredis, which is written on anyio and therefore runs on Trio
directly (anyio's trio backend): its connection pool opens a nursery inside
``async with client``, so every socket and task it starts ends with the
endpoint's ``async with``; nothing here needs a thread or a foreign loop.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final
from urllib.parse import unquote, urlsplit

import attrs
import coredis
import coredis.exceptions
import trio
from attrs.validators import ge

from bridges import Context, InvalidSetting
from bridges._readfile import checked_cafile, open_verifying_context

#: Fields a source adds that describe one delivery, not the message: a sink never writes them.
DELIVERY_HEADERS: Final = frozenset({"redis-id", "redis-stream"})
#: The field (and header) that carries a message's stable id across Redis and STOMP.
ID_FIELD: Final = "bridge-id"


class RedisEndpointError(Exception):
    """A Redis endpoint failed; the message names the server (never the password) and why."""


@attrs.frozen
class RedisConnection:
    """Connection settings both ``redis`` endpoints share.

    Attributes:
      url: the server: ``redis://HOST:PORT/DB``, or ``rediss://`` for TLS
        (verified); credentials in it are never logged.
      username: the ACL user (or in the URL, ``redis://user:pass@host``).
      password: the password.
      ca_file: for ``rediss://``: trust the CAs in this file (PEM) instead of
        the system's.
      connect_timeout: how long connecting may take, s.
    """

    url: str = "redis://127.0.0.1:6379/0"
    username: str | None = None
    password: str | None = attrs.field(default=None, metadata={"secret": True}, repr=False)
    ca_file: str | None = None
    connect_timeout: float = attrs.field(default=10.0, validator=ge(0.1))


@attrs.frozen
class Server:
    """A parsed ``redis://`` or ``rediss://`` URL plus the endpoint's credentials."""

    host: str
    port: int
    db: int
    tls: bool
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)

    @property
    def where(self) -> str:
        """The URL without credentials, for logs and errors."""
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{self.host}:{self.port}/{self.db}"

    @classmethod
    def from_config(cls, config: RedisConnection) -> Server:
        """Parse ``config.url``; credentials in the URL are allowed, the settings win.

        Raises:
          InvalidSetting: not a redis URL.
        """
        try:
            parts = urlsplit(config.url)
            port = parts.port or 6379
        except ValueError as exc:
            raise InvalidSetting("url", f"not a URL: {exc}") from None
        if parts.scheme not in ("redis", "rediss"):
            raise InvalidSetting("url", "expected redis://HOST:PORT/DB or rediss://...")
        if not parts.hostname:
            raise InvalidSetting("url", "no host")
        path = parts.path.strip("/") or "0"
        if not path.isdigit():
            raise InvalidSetting("url", f"the database must be a number, got {path!r}")
        username = config.username or (unquote(parts.username) if parts.username else None)
        password = config.password or (unquote(parts.password) if parts.password else None)
        return cls(parts.hostname, port, int(path), parts.scheme == "rediss", username, password)


async def tls_context(
    config: RedisConnection, server: Server, context: Context
) -> ssl.SSLContext | None:
    """A verifying TLS context for ``rediss://`` (the system CAs, or ``ca_file``),
    made off the event loop."""
    if not server.tls:
        return None
    return await open_verifying_context(checked_cafile("ca_file", config.ca_file, context))


def sole(exc: BaseException) -> BaseException:
    """The one leaf of a (nested) exception group, else ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def explain(exc: BaseException, where: str) -> str:
    """One line saying what went wrong with the server ``where``."""
    exc = sole(exc)
    if isinstance(exc, coredis.exceptions.AuthenticationError):
        return f"redis {where}: authentication failed ({exc})"
    if isinstance(exc, coredis.exceptions.AuthorizationError):
        return f"redis {where}: not allowed: {exc}"
    if isinstance(exc, coredis.exceptions.ConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {sole(cause)}" if cause is not None else ""
        return f"redis {where}: {exc}{detail}"
    return f"redis {where}: {type(exc).__name__}: {exc}"


@asynccontextmanager
async def open_client(
    config: RedisConnection, server: Server, ssl_context: ssl.SSLContext | None
) -> AsyncIterator[coredis.Redis[bytes]]:
    """A connected client (PING answered), closed with the block.

    Errors from coredis (which arrive inside exception groups from its
    pool's nursery) come out as one :class:`RedisEndpointError` naming the
    server; cancellation and errors of the caller's own code pass through.
    """
    client: coredis.Redis[bytes] = coredis.Redis(
        host=server.host,
        port=server.port,
        db=server.db,
        username=server.username,
        password=server.password,
        connect_timeout=config.connect_timeout,
        ssl_context=ssl_context,
        ssl=server.tls,
        decode_responses=False,
        client_name="trio-stomp-bridge",
    )
    inside = False
    try:
        async with client:
            with trio.fail_after(config.connect_timeout + 1):
                await client.ping()
            inside = True
            yield client
    except BaseException as exc:
        leaf = sole(exc)
        if isinstance(leaf, trio.Cancelled):
            raise
        if not inside and isinstance(leaf, trio.TooSlowError):
            raise RedisEndpointError(
                f"redis {server.where}: no answer within {config.connect_timeout} s"
            ) from None
        if isinstance(leaf, coredis.exceptions.RedisError | OSError):
            raise RedisEndpointError(explain(leaf, server.where)) from leaf
        if leaf is not exc and isinstance(leaf, Exception):
            raise leaf from None
        raise
