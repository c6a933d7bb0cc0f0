"""The embedded broker a config starts (``[broker] embedded``), and what routes hold in it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from trio_stomp.broker import Broker, StoreDamaged, StoreError, open_broker

from .._config import Config
from .._convert import ConfigError, Problem
from .._engine import Route


@asynccontextmanager
async def open_embedded(config: Config) -> AsyncIterator[Broker | None]:
    """The config's embedded broker for the block, or None when it has none.

    Raises:
      ConfigError: it cannot listen (``broker.listen`` names the address), or
        its data dir cannot be opened (``broker.data_dir``, naming the file),
        or its store is damaged and ``broker.accept_damage`` is not set
        (``broker.data_dir``: how many messages were lost, from which key).
      StoreError: the store failed to write while running (the broker stops:
        what it would confirm could not be kept).
    """
    if not config.broker.embedded:
        yield None
        return
    host, port = config.broker.address
    data_dir = config.broker.data_dir
    listening = False
    try:
        async with open_broker(
            host,
            port,
            data_dir=None if data_dir is None else config.base_dir / data_dir,
            accept_damage=config.broker.accept_damage,
        ) as broker:
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
    except StoreDamaged as exc:
        if listening:
            raise
        reason = (
            f"broker store {str(exc.path)!r} is damaged: {exc.report}. Refused: set "
            "accept_damage = true in [broker] to start with what is left"
        )
        raise ConfigError([Problem(config.file, None, "broker.data_dir", reason)]) from None
    except StoreError as exc:
        if listening:
            raise
        raise ConfigError([Problem(config.file, None, "broker.data_dir", str(exc))]) from None


def volatile_backlog(route: Route) -> int | None:
    """What the route's source holds in the embedded broker, or None if it reads elsewhere."""
    probe: Any = getattr(route.source, "volatile_backlog", None)
    return None if probe is None else probe()
