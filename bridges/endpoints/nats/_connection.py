"""What both ``nats`` endpoints share: connection settings, URL checks, connecting through nats-py.

nats-py is asyncio-only: every call runs on the process's trio-asyncio loop
(:mod:`bridges.endpoints._asyncio`). The client's own reconnection is off:
when the connection breaks, the endpoint fails and the route's retry policy
opens it again, so what was in flight is settled by the engine's rules (a
reconnect behind our back would leave fetched messages unaccounted for).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import nats
import nats.errors
import nats.js.errors
import trio
from attrs.validators import ge

from bridges import Context

from .._asyncio import AsyncioLoop
from .._asyncio_client import AsyncioConnector, redact, split_url

SCHEMES: Final = ("nats", "tls")
#: The header that carries a message's stable id through a STOMP broker (as the stomp family).
ID_HEADER: Final = "bridge-id"
#: JetStream's de-duplication header.
MSG_ID: Final = "Nats-Msg-Id"
#: A header the source adds: the subject the message was published on.
SUBJECT_HEADER: Final = "nats-subject"


@attrs.frozen
class NatsConnection:
    """The connection settings both nats endpoints share.

    ``url`` is ``nats://[user:password@]host:port`` (``tls://`` for TLS);
    ``user`` and ``password`` (or ``password_file``) override the URL's.

    Attributes:
      url: the server: ``nats://[USER:PASSWORD@]HOST:PORT``, or ``tls://``
        for TLS; credentials in it are never logged.
      user: the user (overrides the URL's; keeps it out of the URL).
      password: the password (overrides the URL's).
      connect_timeout: how long connecting may take, s.
    """

    url: str = attrs.field(default="nats://127.0.0.1:4222", repr=False)
    user: str | None = None
    password: str | None = attrs.field(default=None, metadata={"secret": True}, repr=False)
    connect_timeout: float = attrs.field(default=5.0, validator=ge(0.1))


def check_url(url: str) -> str:
    """``url`` checked; returns it without credentials.

    Raises:
      InvalidSetting: not a nats:// or tls:// URL.
    """
    parts, port = split_url(url, SCHEMES)
    return f"{parts.scheme}://{parts.hostname}:{port or 4222}"


def check_subject(subject: str, *, wildcards: bool) -> None:
    """Raises ValueError for a subject NATS refuses (or one with wildcards, unless allowed)."""
    if not subject or any(c in subject for c in " \t\r\n") or ".." in subject:
        raise ValueError(f"{subject[:60]!r} is not a valid NATS subject")
    if subject.startswith(".") or subject.endswith("."):
        raise ValueError(f"{subject[:60]!r} is not a valid NATS subject")
    if not wildcards and any(token in ("*", ">") for token in subject.split(".")):
        raise ValueError(f"cannot publish to the wildcard subject {subject[:60]!r}")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, nats.js.errors.APIError):
        return f"{exc.description} (JetStream {exc.code}/{exc.err_code})"
    return str(exc) or type(exc).__name__


def one_line(exc: BaseException, secret: str | None = None) -> str:
    """A nats-py error as one line, without the password."""
    return redact(_describe(exc), secret)


class Connector(AsyncioConnector):
    """Opens a nats-py connection for one endpoint's settings."""

    def __init__(self, config: NatsConnection, context: Context) -> None:
        where = check_url(config.url)
        super().__init__("nats", config.url, where, config.password, context, _describe)
        self._config = config

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[tuple[AsyncioLoop, Any, trio.Event]]:
        """A connection; also an event set when the client closes it (the server went away).

        Leaving flushes and closes, shielded and bounded.
        """
        config = self._config
        closed = trio.Event()
        errors: list[BaseException] = []

        async def on_closed() -> None:
            closed.set()

        async def on_error(exc: Exception) -> None:
            errors.append(exc)  # nats-py would print them; the failure reports the first

        kwargs: dict[str, Any] = {
            "servers": [config.url],
            "connect_timeout": config.connect_timeout,
            "allow_reconnect": False,
            "max_reconnect_attempts": 0,
            "closed_cb": on_closed,
            "error_cb": on_error,
        }
        if config.user is not None:
            kwargs["user"] = config.user
        if config.password is not None:
            kwargs["password"] = config.password
        failures = (OSError, nats.errors.Error, TimeoutError)
        async with self.open_client(
            config.connect_timeout + 2, failures, nats.connect, reasons=errors, **kwargs
        ) as (aio, client):
            yield aio, client, closed
