"""What both ``amqp`` endpoints share: connection settings, URL checks, connecting through aio-pika.

aio-pika is asyncio-only: every call runs on the process's trio-asyncio loop
(:mod:`bridges.endpoints._asyncio`). A plain connection, not aio-pika's
"robust" one: when it breaks, the route's own retry policy reopens the
endpoint (a robust connection would reconnect behind our back and lose the
delivery tags we still have to ack).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import aio_pika
import aiormq
import attrs
import yarl
from attrs.validators import ge

from bridges import Context

from .._asyncio import AsyncioLoop
from .._asyncio_client import AsyncioConnector, redact, split_url

#: Schemes aio-pika connects with.
SCHEMES: Final = ("amqp", "amqps")
#: The header that carries a message's stable id across brokers (as the stomp family does).
ID_HEADER: Final = "bridge-id"


@attrs.frozen
class AmqpConnection:
    """The connection settings both amqp endpoints share.

    ``url`` follows RabbitMQ's URI spec (``amqp://user:pass@host:port/vhost``,
    the default vhost ``/`` written ``%2f``); a password may instead come
    from ``password`` (or ``password_file``), which overrides the URL's.

    Attributes:
      url: the server: ``amqp://USER[:PASSWORD]@HOST:PORT/VHOST`` or
        ``amqps://`` for TLS (the vhost ``/`` is written ``%2f``);
        credentials in it are never logged.
      password: the password (overrides the URL's).
      connect_timeout: how long connecting may take, s.
      heartbeat: the AMQP heartbeat interval, s (0: none).
    """

    url: str = attrs.field(default="amqp://127.0.0.1:5672/%2f", repr=False)
    password: str | None = attrs.field(default=None, metadata={"secret": True}, repr=False)
    connect_timeout: float = attrs.field(default=10.0, validator=ge(0.1))
    heartbeat: int = attrs.field(default=30, validator=ge(0))


def check_url(url: str) -> str:
    """``url`` checked; returns it without credentials (for ``describe()`` and errors).

    Raises:
      InvalidSetting: not an amqp(s) URL.
    """
    parts, port = split_url(url, SCHEMES)
    vhost = urllib.parse.unquote(parts.path[1:]) if parts.path else "/"
    where = parts.hostname if port is None else f"{parts.hostname}:{port}"
    return f"{parts.scheme}://{where} vhost {vhost or '/'}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, aiormq.exceptions.ChannelClosed) and len(exc.args) >= 2:
        return f"{exc.args[1]} (AMQP {exc.args[0]})"
    if isinstance(exc, aiormq.exceptions.ProbableAuthenticationError):
        return "the broker closed the connection during login (wrong user or password?)"
    return str(exc) or type(exc).__name__


def one_line(exc: BaseException, secret: str | None = None) -> str:
    """An aio-pika/aiormq error as one line, without the password."""
    return redact(_describe(exc), secret)


class Connector(AsyncioConnector):
    """Opens an aio-pika connection and channel for one endpoint's settings."""

    def __init__(self, config: AmqpConnection, context: Context) -> None:
        where = check_url(config.url)
        super().__init__("amqp", config.url, where, config.password, context, _describe)
        self._config = config

    @asynccontextmanager
    async def connect(
        self, *, confirms: bool
    ) -> AsyncIterator[tuple[AsyncioLoop, aio_pika.abc.AbstractChannel]]:
        """A connection and one channel on it (with publisher confirms when ``confirms``).

        Leaving closes both, shielded and bounded; a broken connection is not
        waited for.
        """
        config = self._config
        url = _with_heartbeat(config.url, config.heartbeat)
        if config.password is not None:
            # (aio-pika ignores password= when it is given a URL)
            parsed = yarl.URL(url)
            url = str(parsed.with_user(parsed.user or "guest").with_password(config.password))
        failures = (OSError, aiormq.exceptions.AMQPError, TimeoutError)
        within = config.connect_timeout + 1
        timeout = config.connect_timeout
        async with self.open_client(within, failures, aio_pika.connect, url, timeout=timeout) as (
            aio,
            connection,
        ):
            yield aio, await aio.run(_open_channel, connection, confirms)


async def _open_channel(
    connection: aio_pika.abc.AbstractConnection, confirms: bool
) -> aio_pika.abc.AbstractChannel:
    return await connection.channel(publisher_confirms=confirms, on_return_raises=confirms)


def _with_heartbeat(url: str, heartbeat: int) -> str:
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    query.setdefault("heartbeat", str(heartbeat))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
