"""The embedded broker a config starts with ``[broker] embedded = true``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from trio_stomp.broker import Broker, open_broker

from .._config import Config
from .._convert import ConfigError, Problem


@asynccontextmanager
async def open_embedded(config: Config) -> AsyncIterator[Broker | None]:
    """The config's embedded broker for the block, or None when it has none.

    Raises:
      ConfigError: it cannot listen (``broker.listen`` names the address).
    """
    if not config.broker.embedded:
        yield None
        return
    host, port = config.broker.address
    listening = False
    try:
        async with open_broker(host, port) as broker:
            listening = True
            yield broker
    except OSError as exc:
        if listening:
            raise
        problem = Problem(
            config.file,
            None,
            "broker.listen",
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
        )
        raise ConfigError([problem]) from None
