"""What the asyncio-library families (nats, amqp) share about their connections.

Each family's ``_connection.py`` keeps its settings, its URL's description and
how its library's errors read; this module holds the rest, once: checking a
URL's scheme and host, the password to keep out of messages, one-line errors
that name the family and the server, and opening a client on the process's
trio-asyncio loop (:mod:`bridges.endpoints._asyncio`) with a bound on
connecting and a shielded, bounded close on the way out. The library's own
reconnection is never used: when a connection breaks, the endpoint fails and
the route's retry policy opens it again.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, Protocol, TypeVar

import trio

from bridges import Context

from ._asyncio import AsyncioLoop, asyncio_loop
from ._urls import redact, split_url

__all__ = ["CLOSE_TIMEOUT", "AsyncioConnector", "Closable", "redact", "split_url"]

#: How long closing a connection may take before we give up on being polite.
CLOSE_TIMEOUT: Final = 5.0


class Closable(Protocol):
    """A client or connection of an asyncio library: it knows whether it is closed."""

    @property
    def is_closed(self) -> bool: ...

    async def close(self) -> Any: ...


ClientT = TypeVar("ClientT", bound=Closable)


class AsyncioConnector:
    """Opens one endpoint's client; says what failed as ``FAMILY WHERE: WHAT: WHY``.

    ``where`` is the checked URL without credentials; ``describe`` turns the
    library's error into one line (the password is then redacted).
    """

    def __init__(
        self,
        family: str,
        url: str,
        where: str,
        password: str | None,
        context: Context,
        describe: Callable[[BaseException], str],
    ) -> None:
        self.family = family
        self.where = where
        self._context = context
        self._describe = describe
        parts = urllib.parse.urlsplit(url)
        self._secret = password or (
            urllib.parse.unquote(parts.password) if parts.password else None
        )

    def error(self, what: str, exc: BaseException) -> ConnectionError:
        """``exc`` as a one-line error that says what we were doing, where."""
        why = redact(self._describe(exc), self._secret)
        return ConnectionError(f"{self.family} {self.where}: {what}: {why}")

    @asynccontextmanager
    async def open_client(
        self,
        within: float,
        failures: tuple[type[BaseException], ...],
        connect: Callable[..., Coroutine[Any, Any, ClientT]],
        /,
        *args: Any,
        reasons: Sequence[BaseException] = (),
        **kwargs: Any,
    ) -> AsyncIterator[tuple[AsyncioLoop, ClientT]]:
        """``connect(*args, **kwargs)`` on the process's asyncio loop, within WITHIN seconds.

        A connection error among FAILURES becomes :meth:`error` (``cannot
        connect``), saying the first of REASONS when the library reported one
        there (through a callback) rather than raising it. Leaving closes the
        client, shielded and bounded; a broken one is not waited for.

        Raises:
          ConnectionError: connecting failed or timed out.
        """
        async with asyncio_loop(self._context) as aio:
            try:
                with trio.fail_after(within):
                    client = await aio.run(connect, *args, **kwargs)
            except trio.TooSlowError:
                raise ConnectionError(f"{self.family} {self.where}: connecting timed out") from None
            except failures as exc:
                raise self.error("cannot connect", reasons[0] if reasons else exc) from None
            try:
                yield aio, client
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                    if not client.is_closed:
                        try:
                            await aio.run(client.close)
                        except Exception:  # already broken: nothing left to be polite to
                            pass
