"""The broker's Trio edge: the listener, one task per connection, shutdown."""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import trio

from ._config import Limits, freeze_users
from ._connection import Connection
from ._destinations import Router
from ._session import Session

__all__ = ["Broker", "open_broker", "serve_broker"]

log = logging.getLogger("trio_stomp.broker")


class Broker:
    """A running embedded broker, as handed out by :func:`open_broker`.

    It tells clients where to connect (:attr:`url`) and lets tests look
    inside (:meth:`queue_depth`, :attr:`connection_count`). It is not
    created directly.
    """

    def __init__(
        self,
        listeners: list[trio.SocketListener],
        host: str,
        users: Mapping[str, str] | None,
        limits: Limits,
    ) -> None:
        self._listeners = listeners
        self._host = host
        self._users = users
        self._limits = limits
        self._router = Router()
        self._connections: set[Connection] = set()
        self._session_ids = itertools.count(1)
        self._session_prefix = secrets.token_hex(4)
        self._closing = False
        self._all_closed = trio.Event()
        self._accept_scope = trio.CancelScope()

    @property
    def host(self) -> str:
        """The host the broker listens on, as given to :func:`open_broker`."""
        return self._host

    @property
    def port(self) -> int:
        """The TCP port the broker listens on (the real one when 0 was asked)."""
        port: int = self._listeners[0].socket.getsockname()[1]
        return port

    @property
    def url(self) -> str:
        """Where to connect: ``stomp://HOST:PORT``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"stomp://{host}:{self.port}"

    @property
    def limits(self) -> Limits:
        """The limits every connection runs under."""
        return self._limits

    @property
    def connection_count(self) -> int:
        """How many client connections are open now."""
        return len(self._connections)

    def queue_depth(self, destination: str) -> int:
        """How many messages wait, undelivered, in the queue ``destination``."""
        return self._router.depth(destination)

    async def _accept(self, connections: trio.Nursery) -> None:
        # Connections run in the broker's nursery, not under the accept scope:
        # shutdown stops accepting first, then says goodbye to each client.
        with self._accept_scope:
            await trio.serve_listeners(self._handle, self._listeners, handler_nursery=connections)

    async def _handle(self, stream: trio.SocketStream) -> None:
        if self._closing:
            await trio.aclose_forcefully(stream)
            return
        connection = Connection(stream, self._limits)
        session_id = f"{self._session_prefix}-{next(self._session_ids)}"
        connection.session = Session(
            self._router,
            connection,
            session_id=session_id,
            users=self._users,
            limits=self._limits,
        )
        self._connections.add(connection)
        log.debug("connection %s from %s", session_id, _peer(stream))
        try:
            await connection.run()
        except Exception:
            # A bug must cost one connection, never the broker.
            log.exception("connection %s failed", session_id)
        finally:
            self._connections.discard(connection)
            if self._closing and not self._connections:
                self._all_closed.set()
            reason = connection.session.close_reason
            log.debug("connection %s ended: %s", session_id, reason)

    async def _shutdown(self) -> None:
        """Stop accepting, tell every client, and wait for them to go."""
        self._closing = True
        self._accept_scope.cancel()
        for listener in self._listeners:
            await trio.aclose_forcefully(listener)
        for connection in list(self._connections):
            connection.shutdown()
        if self._connections:
            await self._all_closed.wait()


def _peer(stream: trio.SocketStream) -> str:
    try:
        return str(stream.socket.getpeername())
    except OSError:
        return "?"


@asynccontextmanager
async def open_broker(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    users: Mapping[str, str] | None = None,
    limits: Limits | None = None,
) -> AsyncIterator[Broker]:
    """Run a STOMP broker for the duration of an ``async with`` block.

    The broker listens as soon as the block is entered, so a client can
    connect to ``broker.url`` right away. Leaving the block stops it: the
    listener closes, every client gets an ERROR ("broker shutting down") and
    is disconnected, at most ``limits.close_timeout`` seconds later every
    task has ended, and nothing of the broker outlives the block. Messages
    still in queues are lost (the broker keeps everything in memory)::

        async with open_broker() as broker:
            async with trio_stomp.connect(broker.url) as client:
                ...

    Args:
      host: the address to listen on; the default is loopback only.
      port: the TCP port; 0 picks a free one (see :attr:`Broker.port`).
      users: ``login -> passcode``; a CONNECT must name one of them (else
        ERROR and close). None accepts any login, or none.
      limits: resource limits and timeouts; see :class:`Limits`.

    Returns:
      An async context manager yielding the running :class:`Broker`.

    Raises:
      OSError: the address cannot be listened on (a port in use, say).
    """
    frozen_users = freeze_users(users)
    limits = limits if limits is not None else Limits()
    listeners = await trio.open_tcp_listeners(port, host=host)
    if port == 0:
        # Each listener would get its own ephemeral port: keep one address.
        for extra in listeners[1:]:
            await trio.aclose_forcefully(extra)
        listeners = listeners[:1]
    broker = Broker(listeners, host, frozen_users, limits)
    error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker._accept, nursery)
        try:
            yield broker
        except BaseException as exc:
            # Re-raised below, outside the nursery, so the caller sees the
            # exception it raised rather than an exception group around it.
            error = exc
        finally:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + limits.close_timeout + 1.0
                await broker._shutdown()
            nursery.cancel_scope.cancel()
    if error is not None:
        try:
            raise error
        finally:
            error = None


async def serve_broker(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    users: Mapping[str, str] | None = None,
    limits: Limits | None = None,
    task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a STOMP broker until cancelled; for ``nursery.start``.

    ``await nursery.start(serve_broker)`` returns the :class:`Broker` once it
    listens. Cancelling the nursery stops it as leaving :func:`open_broker`
    does. Arguments are those of :func:`open_broker`.

    Raises:
      OSError: the address cannot be listened on.
    """
    async with open_broker(host, port, users=users, limits=limits) as broker:
        task_status.started(broker)
        await trio.sleep_forever()
