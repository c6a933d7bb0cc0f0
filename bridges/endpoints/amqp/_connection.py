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
from typing import Any, Final

import aio_pika
import aiormq
import attrs
import trio
import yarl
from attrs.validators import ge

from bridges import Context, InvalidSetting

from .._asyncio import AsyncioLoop, asyncio_loop

#: Schemes aio-pika connects with.
SCHEMES: Final = ("amqp", "amqps")
#: The header that carries a message's stable id across brokers (as the stomp family does).
ID_HEADER: Final = "bridge-id"
#: How long closing a connection may take before we give up on being polite.
CLOSE_TIMEOUT: Final = 5.0


@attrs.frozen
class AmqpConnection:
    """The connection settings both amqp endpoints share.

    ``url`` follows RabbitMQ's URI spec (``amqp://user:pass@host:port/vhost``,
    the default vhost ``/`` written ``%2f``); a password may instead come
    from ``password`` (or ``password_file``), which overrides the URL's.
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
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidSetting("url", f"not a URL ({exc})") from None
    if parts.scheme not in SCHEMES:
        raise InvalidSetting("url", f"expected amqp:// or amqps://, got {parts.scheme or url!r}://")
    if not parts.hostname:
        raise InvalidSetting("url", "no host")
    vhost = urllib.parse.unquote(parts.path[1:]) if parts.path else "/"
    where = parts.hostname if port is None else f"{parts.hostname}:{port}"
    return f"{parts.scheme}://{where} vhost {vhost or '/'}"


def one_line(exc: BaseException, secret: str | None = None) -> str:
    """An aio-pika/aiormq error as one line, without the password."""
    if isinstance(exc, aiormq.exceptions.ChannelClosed) and len(exc.args) >= 2:
        text = f"{exc.args[1]} (AMQP {exc.args[0]})"
    elif isinstance(exc, aiormq.exceptions.ProbableAuthenticationError):
        text = "the broker closed the connection during login (wrong user or password?)"
    else:
        text = str(exc) or type(exc).__name__
    if secret:
        text = text.replace(secret, "***")
    return " ".join(text.split())


class Connector:
    """Opens an aio-pika connection and channel for one endpoint's settings."""

    def __init__(self, config: AmqpConnection, context: Context) -> None:
        self._config = config
        self._context = context
        self.where = check_url(config.url)
        parts = urllib.parse.urlsplit(config.url)
        self._secret = config.password or (
            urllib.parse.unquote(parts.password) if parts.password else None
        )

    def error(self, what: str, exc: BaseException) -> ConnectionError:
        """``exc`` as a one-line error that says what we were doing, where."""
        return ConnectionError(f"amqp {self.where}: {what}: {one_line(exc, self._secret)}")

    @asynccontextmanager
    async def connect(
        self, *, confirms: bool
    ) -> AsyncIterator[tuple[AsyncioLoop, aio_pika.abc.AbstractChannel]]:
        """A connection and one channel on it (with publisher confirms when ``confirms``).

        Leaving closes both, shielded and bounded; a broken connection is not
        waited for.
        """
        config = self._config
        kwargs: dict[str, Any] = {"timeout": config.connect_timeout}
        url = _with_heartbeat(config.url, config.heartbeat)
        if config.password is not None:
            # (aio-pika ignores password= when it is given a URL)
            parsed = yarl.URL(url)
            url = str(parsed.with_user(parsed.user or "guest").with_password(config.password))
        async with asyncio_loop(self._context) as aio:
            try:
                with trio.fail_after(config.connect_timeout + 1):
                    connection = await aio.run(aio_pika.connect, url, **kwargs)
            except trio.TooSlowError:
                raise ConnectionError(f"amqp {self.where}: connecting timed out") from None
            except (OSError, aiormq.exceptions.AMQPError, TimeoutError) as exc:
                raise self.error("cannot connect", exc) from None
            try:
                channel = await aio.run(_open_channel, connection, confirms)
                yield aio, channel
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                    if not connection.is_closed:
                        try:
                            await aio.run(connection.close)
                        except Exception:  # already broken: nothing left to be polite to
                            pass


async def _open_channel(
    connection: aio_pika.abc.AbstractConnection, confirms: bool
) -> aio_pika.abc.AbstractChannel:
    return await connection.channel(publisher_confirms=confirms, on_return_raises=confirms)


def _with_heartbeat(url: str, heartbeat: int) -> str:
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    query.setdefault("heartbeat", str(heartbeat))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
