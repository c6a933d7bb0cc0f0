"""What both ``stomp`` endpoints share: connection settings, URL checks, connecting.

``url = "embedded"`` names the broker that ``[broker] embedded = true``
starts in the same process. The family resolves it itself: the service
provides the running broker as the shared resource :data:`EMBEDDED_BROKER`
(see :class:`bridges.Shared`), and the endpoints look it up when they
connect; :class:`bridges.Context` only says whether the config starts one.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Final

import attrs
from attrs.validators import ge

import trio_stomp
from trio_stomp.broker import Broker
from trio_stomp.frame import CONNECT_RESERVED_HEADERS, Frame, LocalProtocolError, encode
from trio_stomp.util import Endpoint

from ..._endpoint import Context, InvalidSetting

#: The header that carries a message's stable id across brokers.
ID_HEADER: Final = "bridge-id"
#: The ``url`` that names the process's embedded broker.
EMBEDDED: Final = "embedded"
#: The key under which the service provides the running embedded broker.
EMBEDDED_BROKER: Final = "embedded-broker"
#: Bound on each cleanup on the wire when an endpoint closes (UNSUBSCRIBE, the
#: RECEIPT of DISCONNECT), s. Everything durable was confirmed before (a
#: batch's RECEIPT; acks precede the DISCONNECT on the socket), so a broker
#: that does not answer costs at most a redelivery, and never holds up a stop
#: (``bridges run`` stops within ``shutdown_timeout`` + 1 s, a second signal in 1 s).
DISCONNECT_TIMEOUT: Final = 0.25


def _heartbeat(
    instance: object, attribute: attrs.Attribute[tuple[int, ...]], value: object
) -> None:
    if not (isinstance(value, tuple) and len(value) == 2 and all(v >= 0 for v in value)):
        raise ValueError(f"expected [send_ms, expect_ms] (each >= 0), got {value!r}")


@attrs.frozen
class StompConnection:
    """The connection settings both stomp endpoints share.

    Attributes:
      url: the broker: ``stomp://[LOGIN[:PASSCODE]@]HOST:PORT[/?vhost=NAME]``,
        ``stomp+ssl://``, ``ws://``, ``wss://``, or ``"embedded"`` (the
        config's ``[broker]``); or a list of URLs for failover: each (re)start
        connects to the first that answers.
      login: the CONNECT login (credentials in the URL would show in its
        errors).
      passcode: the CONNECT passcode.
      vhost: the CONNECT ``host`` header (RabbitMQ: the virtual host).
      heartbeat: ``[send, want]`` heart-beat intervals, ms; 0 turns a
        direction off.
      connect_timeout: how long connecting (TCP, TLS, CONNECT to CONNECTED)
        may take, s.
      connect_headers: extra CONNECT headers, e.g. ActiveMQ's ``client-id``
        (durable subscriptions); not with ``engine = "spark"``.
        ``accept-version``, ``host``, ``login``, ``passcode`` and
        ``heart-beat`` come from the settings above.
    """

    url: str | tuple[str, ...] = "stomp://127.0.0.1:61613"
    login: str | None = None
    passcode: str | None = attrs.field(default=None, metadata={"secret": True}, repr=False)
    vhost: str | None = None
    heartbeat: tuple[int, ...] = attrs.field(default=(10_000, 10_000), validator=_heartbeat)
    connect_timeout: float = attrs.field(default=10.0, validator=ge(0.1))
    connect_headers: dict[str, str] = attrs.field(factory=dict)


def _check_connect_headers(headers: dict[str, str]) -> None:
    """Refuse, at config time, what connect() would refuse when the endpoint opens."""
    for name in headers:
        if name in CONNECT_RESERVED_HEADERS:
            raise InvalidSetting(
                f"connect_headers.{name}",
                "set from the endpoint's own settings (url, login, passcode, vhost, heartbeat)",
            )
    try:
        encode(Frame("CONNECT", headers))
    except LocalProtocolError as exc:
        raise InvalidSetting("connect_headers", str(exc)) from None


def _urls(config: StompConnection, context: Context) -> tuple[str, ...]:
    """The broker URLs, checked with the client's own parser.

    Several URLs make a failover list: each (re)start of the endpoint
    connects to the first that answers, in order.
    """
    urls = (config.url,) if isinstance(config.url, str) else config.url
    if not urls:
        raise InvalidSetting("url", "give at least one URL")
    if EMBEDDED in urls:
        if len(urls) != 1:
            raise InvalidSetting("url", '"embedded" cannot be part of a failover list')
        if not context.embedded:
            raise InvalidSetting("url", '"embedded" needs [broker] embedded = true')
        return urls
    for url in urls:
        try:
            Endpoint.from_url(url)
        except ValueError as exc:
            raise InvalidSetting("url", str(exc)) from None
    return urls


def _public(url: str) -> str:
    """The URL without credentials, for logs."""
    return Endpoint.from_url(url).url


class Connector:
    """Opens a client for one endpoint's settings; knows whether it reaches the embedded broker."""

    def __init__(self, config: StompConnection, context: Context) -> None:
        self._config = config
        self._context = context
        self._urls = _urls(config, context)
        _check_connect_headers(config.connect_headers)

    @property
    def where(self) -> str:
        """The broker(s), without credentials, for ``describe()``."""
        if self._urls == (EMBEDDED,):
            return "embedded broker"
        return " or ".join(_public(url) for url in self._urls)

    @property
    def broker(self) -> Broker | None:
        """The process's running embedded broker, or None (none, or not started yet)."""
        shared = self._context.shared
        if shared is None:
            return None
        broker = shared.get(EMBEDDED_BROKER)
        return broker if isinstance(broker, Broker) else None

    @property
    def embedded(self) -> bool:
        """True when this connects to the config's embedded broker (by name or address)."""
        if self._urls == (EMBEDDED,):
            return True
        broker = self.broker
        if broker is None or len(self._urls) != 1:
            return False
        endpoint = Endpoint.from_url(self._urls[0])
        local = {broker.host, "localhost", "127.0.0.1"} if broker.host else {"localhost"}
        return endpoint.port == broker.port and endpoint.host in local

    def connect(self) -> AbstractAsyncContextManager[trio_stomp.Client]:
        """A connection to the first broker that answers (the failover list, in order)."""
        urls: list[str] = list(self._urls)
        if urls == [EMBEDDED]:
            broker = self.broker
            if broker is None:
                raise RuntimeError("the embedded broker is not running")
            urls = [broker.url]
        config = self._config
        send_ms, expect_ms = config.heartbeat
        return trio_stomp.connect(
            urls,
            login=config.login,
            passcode=config.passcode,
            vhost=config.vhost,
            heartbeat=(send_ms, expect_ms),
            connect_timeout=config.connect_timeout,
            disconnect_timeout=DISCONNECT_TIMEOUT,
            headers=config.connect_headers,
        )
