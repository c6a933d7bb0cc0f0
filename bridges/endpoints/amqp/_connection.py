"""What both ``amqp`` endpoints share: connection settings, URL checks, connecting.

The connection is the family's own, on Trio (:mod:`._client`, with pamqp
as the codec): no asyncio loop. It does not reconnect by itself: when it
breaks, the endpoint fails and the route's retry policy opens it again (a
connection that came back behind our back would have lost the delivery tags
we still have to ack).

The URL follows RabbitMQ's URI spec; its query may say ``heartbeat`` (it
wins over the setting, as it did with aio-pika) and, for ``amqps://``,
``cafile``, ``certfile`` and ``keyfile``.
"""

from __future__ import annotations

import ssl
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import attrs
import trio
from attrs.validators import ge

from bridges import Context, InvalidSetting

from .._urls import redact, split_url
from ._channel import Channel
from ._client import MAX_BODY, Settings, open_client

#: Schemes this family connects with.
SCHEMES: Final = ("amqp", "amqps")
#: What the URL's query may say; anything else is refused (it would be silently ignored).
URL_QUERY_KEYS: Final = ("heartbeat", "cafile", "certfile", "keyfile")
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
      InvalidSetting: not an amqp(s) URL, a query key other than
        :data:`URL_QUERY_KEYS`, a key given twice, or a ``heartbeat`` that
        is not a whole number of seconds >= 0.
    """
    parts, port = split_url(url, SCHEMES)
    query = url_query(parts)
    unknown = sorted(set(query) - set(URL_QUERY_KEYS))
    if unknown:
        raise InvalidSetting(
            "url",
            f"unknown query parameter {', '.join(unknown)} "
            f"(this family reads {', '.join(URL_QUERY_KEYS)})",
        )
    heartbeat = query.get("heartbeat")
    if heartbeat is not None and not (heartbeat.isascii() and heartbeat.isdigit()):
        raise InvalidSetting("url", f"heartbeat={heartbeat!r}: expected whole seconds >= 0")
    vhost = urllib.parse.unquote(parts.path[1:]) if parts.path else "/"
    where = parts.hostname if port is None else f"{parts.hostname}:{port}"
    return f"{parts.scheme}://{where} vhost {vhost or '/'}"


def url_query(parts: urllib.parse.SplitResult) -> dict[str, str]:
    """The URL's query as a dict; a key given twice is refused rather than one of them dropped."""
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    query = dict(pairs)
    if len(query) != len(pairs):
        twice = sorted({key for key, _ in pairs if sum(k == key for k, _ in pairs) > 1})
        raise InvalidSetting("url", f"query parameter {', '.join(twice)} given twice")
    return query


def one_line(exc: BaseException, secret: str | None = None) -> str:
    """An error of the connection as one line, without the password."""
    return redact(str(exc) or type(exc).__name__, secret)


class Connector:
    """Opens a connection and a channel for one endpoint's settings; says what failed, where."""

    def __init__(
        self, config: AmqpConnection, context: Context, *, max_body: int = MAX_BODY
    ) -> None:
        self.where = check_url(config.url)
        self.family = "amqp"
        self._config = config
        self._context = context
        parts = urllib.parse.urlsplit(config.url)
        query = url_query(parts)
        user = urllib.parse.unquote(parts.username) if parts.username else "guest"
        url_password = urllib.parse.unquote(parts.password) if parts.password is not None else None
        password = config.password if config.password is not None else url_password
        self._secret = password
        vhost = urllib.parse.unquote(parts.path[1:]) if parts.path else ""
        heartbeat = int(query.get("heartbeat", config.heartbeat))  # digits: check_url
        self._settings = Settings(
            user=user,
            password="guest" if password is None else password,
            vhost=vhost or "/",
            heartbeat=max(0, heartbeat),
            max_body=max_body,
        )
        tls = parts.scheme == "amqps"
        self._host = parts.hostname or ""
        self._port = parts.port or (5671 if tls else 5672)
        self._tls_files = (query.get("cafile"), query.get("certfile"), query.get("keyfile"))
        self._tls = tls

    def error(self, what: str, exc: BaseException) -> ConnectionError:
        """``exc`` as a one-line error that says what we were doing, where."""
        return ConnectionError(f"amqp {self.where}: {what}: {one_line(exc, self._secret)}")

    def _tls_context(self) -> ssl.SSLContext | None:
        if not self._tls:
            return None
        cafile, certfile, keyfile = self._tls_files
        context = ssl.create_default_context(cafile=cafile)
        if certfile:
            context.load_cert_chain(certfile, keyfile)
        return context

    @asynccontextmanager
    async def connect(self, *, confirms: bool) -> AsyncIterator[Channel]:
        """A connection and one channel on it (in confirm mode when ``confirms``).

        Connecting (TCP, TLS, login, the channel) takes at most
        ``connect_timeout``. Leaving closes both, shielded and bounded; a
        broken connection is not waited for.

        Raises:
          ConnectionError: connecting failed or timed out (one line, no password).
        """
        config = self._config
        entered = False
        try:
            async with open_client(
                self._host,
                self._port,
                self._settings,
                tls=self._tls_context(),
                within=config.connect_timeout,
            ) as client:
                entered = True
                try:
                    with trio.fail_after(config.connect_timeout):
                        channel = await client.channel()
                        if confirms:
                            await channel.confirm()
                except trio.TooSlowError:
                    raise ConnectionError(
                        f"amqp {self.where}: opening a channel timed out"
                    ) from None
                except ConnectionError as exc:
                    raise self.error("opening a channel", exc) from None
                yield channel
        except ConnectionError as exc:
            if entered:
                raise
            raise self.error("cannot connect", exc) from None
