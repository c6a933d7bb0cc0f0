"""The broker's Trio edge: the listeners, one task per connection, shutdown."""

from __future__ import annotations

import functools
import itertools
import logging
import os
import secrets
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio

from ._budget import Budget
from ._config import Limits, freeze_users
from ._connection import Connection
from ._dedup import Duplicates
from ._destinations import Router
from ._durable import DurableSubscriptions
from ._listeners import (
    PLAIN,
    TLS,
    WS,
    WSS,
    Address,
    Goodbye,
    HandshakeFailed,
    Listener,
    open_listeners,
)
from ._message import DestinationDepth
from ._selector_work import SelectorMeter
from ._session import Session
from ._store import Store, open_data_dir

__all__ = ["Broker", "open_broker", "serve_broker"]

log = logging.getLogger("trio_stomp.broker")


class Broker:
    """A running embedded broker, as handed out by :func:`open_broker`.

    It tells clients where to connect (:attr:`url`, and :attr:`tls_url`,
    :attr:`ws_url`, :attr:`wss_url` for the listeners asked for) and lets
    tests and the apps that embed it look inside (:meth:`depths`,
    :meth:`queue_depth`, :attr:`connection_count`). It is
    not created directly.
    """

    def __init__(
        self,
        listeners: list[Listener],
        host: str,
        users: Mapping[str, str] | None,
        limits: Limits,
        store: Store | None = None,
        duplicates: Duplicates | None = None,
    ) -> None:
        self._listeners = listeners
        self._host = host
        self._users = users
        self._limits = limits
        self._router = Router(
            store=store,
            selector_scan=self._limits.selector_scan,
            durables=DurableSubscriptions(limits, store),
            meter=SelectorMeter(
                limits.max_selector_work,
                limits.max_selector_dispatch_work,
                limits.max_selector_string,
            ),
        )
        self._budget = Budget(limits.max_buffered_bytes)
        self._duplicates = duplicates
        self._connections: set[Connection] = set()
        self._session_ids = itertools.count(1)
        self._session_prefix = secrets.token_hex(4)
        self._closing = False
        self._all_closed = trio.Event()
        self._accept_scope = trio.CancelScope()
        # Shielded: cancelling whoever runs the broker (serve_broker's nursery,
        # a signal) must not cut the connections before they are told. The
        # broker cancels it itself once shutdown is over or out of time.
        self._connections_scope = trio.CancelScope(shield=True)

    @property
    def host(self) -> str:
        """The host the broker listens on, as given to :func:`open_broker`."""
        return self._host

    @property
    def port(self) -> int:
        """The TCP port of plain STOMP (the real one when 0 was asked)."""
        return self._listeners[0].port

    @property
    def url(self) -> str:
        """Where to connect with plain STOMP: ``stomp://HOST:PORT``."""
        return self._listeners[0].url

    @property
    def tls_url(self) -> str:
        """Where to connect with STOMP over TLS: ``stomp+ssl://HOST:PORT``.

        Raises:
          RuntimeError: the broker was not asked for a TLS listener (``tls_port``).
        """
        return self._listener(TLS, "tls_port").url

    @property
    def ws_url(self) -> str:
        """Where to connect with STOMP over WebSocket: ``ws://HOST:PORT/ws``.

        Raises:
          RuntimeError: the broker was not asked for a WebSocket listener (``ws_port``).
        """
        return self._listener(WS, "ws_port").url

    @property
    def wss_url(self) -> str:
        """Where to connect with STOMP over secure WebSocket: ``wss://HOST:PORT/ws``.

        Raises:
          RuntimeError: the broker was not asked for that listener (``wss_port``).
        """
        return self._listener(WSS, "wss_port").url

    @property
    def urls(self) -> list[str]:
        """The URL of every listener, plain STOMP first."""
        return [listener.url for listener in self._listeners]

    def _listener(self, scheme: str, option: str) -> Listener:
        for listener in self._listeners:
            if listener.scheme == scheme:
                return listener
        raise RuntimeError(f"the broker has no {scheme}:// listener: pass {option}= to open it")

    @property
    def limits(self) -> Limits:
        """The limits every connection runs under."""
        return self._limits

    @property
    def duplicates_dropped(self) -> int:
        """SENDs dropped as repeats of a ``bridge-id`` within the duplicate window
        (``Limits.duplicate_window``) since the broker started."""
        return 0 if self._duplicates is None else self._duplicates.dropped

    @property
    def duplicates_dropped_by_destination(self) -> dict[str, int]:
        """:attr:`duplicates_dropped` per destination (a copy; at most 1,000 destinations
        by name, the others together under ``"(other destinations)"``)."""
        return {} if self._duplicates is None else dict(self._duplicates.dropped_by_destination)

    @property
    def duplicate_window_bytes(self) -> int:
        """The duplicate window's accounted memory now, bytes (at most
        ``Limits.duplicate_window_bytes``; 0 when the window is off)."""
        return 0 if self._duplicates is None else self._duplicates.bytes

    @property
    def selector_work_exhausted(self) -> int:
        """Selector evaluations that ran out of work since the broker started
        (``Limits.max_selector_work``, ``max_selector_dispatch_work``,
        ``max_selector_string``): each one a message not selected."""
        return self._router.meter.exhausted

    @property
    def connection_count(self) -> int:
        """How many client connections are open now."""
        return len(self._connections)

    def queue_depth(self, destination: str) -> int:
        """How many messages wait, undelivered, in the queue ``destination``."""
        return self._router.depth(destination)

    def depths(self) -> list[DestinationDepth]:
        """What each destination holds now: every queue, and every topic someone
        subscribes to, ordered by name.

        This is how an application that embeds the broker accounts for what a
        stop leaves behind (``bridges run`` names every destination that
        still holds messages) and shows queue depths while it runs. Unlike
        :meth:`queue_depth` it also counts messages delivered and not yet
        acknowledged, since those come back to the queue when their consumer
        goes. Each durable topic subscription has an entry of its own (its
        :attr:`~DestinationDepth.subscription` set), with or without a
        consumer. A queue that is empty and has no consumer is not listed
        (the broker forgets it). Cheap enough to call every second: one pass
        over destinations and subscriptions, no copy of any message.
        """
        return self._router.depths()

    async def _run(self) -> None:
        # Connections run in their own nursery, not under the accept scope:
        # shutdown stops accepting first, then says goodbye to each client.
        with self._connections_scope:
            async with trio.open_nursery() as connections:
                with self._accept_scope:
                    async with trio.open_nursery() as nursery:
                        for listener in self._listeners:
                            nursery.start_soon(
                                functools.partial(
                                    trio.serve_listeners,
                                    functools.partial(self._handle, listener),
                                    listener.sockets,
                                    handler_nursery=connections,
                                )
                            )

    async def _handle(self, listener: Listener, stream: trio.SocketStream) -> None:
        if self._closing:
            await trio.aclose_forcefully(stream)
            return
        peer = _peer(stream)
        if listener.scheme != PLAIN:
            try:
                wrapped = await listener.wrap(stream, self._limits)
            except HandshakeFailed as exc:
                log.debug("%s connection from %s dropped: %s", listener.scheme, peer, exc)
                await trio.aclose_forcefully(stream)
                return
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            if self._closing:
                await trio.aclose_forcefully(wrapped)
                return
            await self._serve(wrapped, f"{listener.scheme} {peer}", listener.goodbye(wrapped))
        else:
            await self._serve(stream, peer, None)

    async def _serve(
        self, stream: trio.abc.HalfCloseableStream, peer: str, goodbye: Goodbye | None
    ) -> None:
        connection = Connection(stream, self._limits, goodbye=goodbye)
        session_id = f"{self._session_prefix}-{next(self._session_ids)}"
        connection.session = Session(
            self._router,
            connection,
            session_id=session_id,
            users=self._users,
            limits=self._limits,
            budget=self._budget,
            duplicates=self._duplicates,
        )
        self._connections.add(connection)
        log.debug("connection %s from %s", session_id, peer)
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
        """Stop accepting, tell every client, and wait for them to go.

        Each connection ends within ``close_timeout`` (see
        :meth:`Connection.shutdown`); the caller bounds this too, then
        cancels whatever is left (:meth:`_stop`).
        """
        self._closing = True
        self._accept_scope.cancel()
        for listener in self._listeners:
            for socket in listener.sockets:
                await trio.aclose_forcefully(socket)
        for connection in list(self._connections):
            connection.shutdown()
        if self._connections:
            await self._all_closed.wait()

    def _stop(self) -> None:
        """End every task of the broker now (handshakes still running, say)."""
        self._connections_scope.cancel()


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
    tls_port: Address | None = None,
    ws_port: Address | None = None,
    wss_port: Address | None = None,
    ssl_context: ssl.SSLContext | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    accept_damage: bool = False,
) -> AsyncIterator[Broker]:
    """Run a STOMP broker for the duration of an ``async with`` block.

    The broker listens as soon as the block is entered, so a client can
    connect to ``broker.url`` right away. Leaving the block stops it, also
    when the block is left by an exception or a cancellation: the listeners
    close, every client gets an ERROR ("broker shutting down") and is
    disconnected (a WebSocket client after a Close with code 1001, "going
    away"), at most ``limits.close_timeout`` seconds later every task has
    ended, and nothing of the broker outlives the block. Messages still in
    queues are lost (the broker keeps everything in memory)::

        async with open_broker() as broker:
            async with trio_stomp.connect(broker.url) as client:
                ...

    Every SEND is delivered, also one that repeats the ``bridge-id`` header of
    an earlier one: the duplicate window that drops such repeats is off unless
    ``limits`` turns it on (``Limits(duplicate_window=10_000)``, as the
    ``bridges`` embedded broker does); see :class:`Limits`.

    Besides plain STOMP, the broker can listen for STOMP over TLS, over
    WebSocket and over WebSocket in TLS; every listener serves the same
    destinations, and a client on one talks to clients on the others::

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain("broker.pem", "broker.key")
        async with open_broker(tls_port=0, ws_port=0, ssl_context=context) as broker:
            ...  # broker.tls_url, broker.ws_url

    Args:
      host: the address to listen on; the default is loopback only.
      port: the TCP port of plain STOMP; 0 picks a free one (see
        :attr:`Broker.port`).
      users: ``login -> passcode``; a CONNECT must name one of them (else
        ERROR and close). None accepts any login, or none.
      limits: resource limits and timeouts; see :class:`Limits`. The TLS
        handshake and the WebSocket upgrade must finish within
        ``limits.connect_timeout``.
      tls_port: listen for STOMP over TLS (:attr:`Broker.tls_url`) on this
        port of ``host``, or on a ``(host, port)``; 0 picks a free port.
      ws_port: likewise for STOMP over WebSocket (:attr:`Broker.ws_url`).
        Any request path is accepted; the subprotocol chosen is the best
        of ``v12.stomp``, ``v11.stomp``, ``v10.stomp`` the client offers.
        Needs the ``websocket`` extra.
      wss_port: likewise for STOMP over WebSocket over TLS
        (:attr:`Broker.wss_url`).
      ssl_context: the server's TLS settings (certificate and key loaded),
        required with ``tls_port`` or ``wss_port``.
      data_dir: keep queue messages, and durable topic subscriptions with
        what they hold, on disk in this directory (created when missing): a
        RECEIPT comes once the messages sent before it are fsynced, and what
        is not consumed is delivered again at the next start (see
        :mod:`trio_stomp.broker._store`). None (the default): volatile,
        queued messages (and durable subscriptions) are lost when the broker
        stops.
      accept_damage: start even when the store in ``data_dir`` is damaged
        (it lost or damaged messages since the broker last wrote it: a
        damaged write-ahead log, an emptied file, a damaged row). The loss is
        logged as a warning, naming how many messages and from which store
        key on; damaged rows are dropped. False (the default): such a store
        is refused with :class:`StoreDamaged`, and left as it was found.

    Returns:
      An async context manager yielding the running :class:`Broker`.

    Raises:
      OSError: an address cannot be listened on (a port in use, say).
      ValueError: a TLS listener without ``ssl_context``, or the reverse.
      ImportError: a WebSocket listener without the ``websocket`` extra.
      StoreDamaged: the store is damaged (what was lost is in the message,
        and in its attributes) and ``accept_damage`` is False.
      StoreError: the data dir cannot be opened, or the store failed to write
        (the broker stops then: what it would confirm could not be kept).
    """
    frozen_users = freeze_users(users)
    limits = limits if limits is not None else Limits()
    async with open_data_dir(data_dir, accept_damage=accept_damage) as store:
        async with _open_broker(
            host,
            port,
            frozen_users,
            limits,
            store,
            tls_port=tls_port,
            ws_port=ws_port,
            wss_port=wss_port,
            ssl_context=ssl_context,
        ) as broker:
            yield broker


@asynccontextmanager
async def _open_broker(
    host: str,
    port: int,
    users: Mapping[str, str] | None,
    limits: Limits,
    store: Store | None,
    **listening: Any,
) -> AsyncIterator[Broker]:
    duplicates = None
    if limits.duplicate_window and limits.duplicate_window_seconds:
        duplicates = Duplicates(
            limits.duplicate_window,
            limits.duplicate_window_seconds,
            max_bytes=limits.duplicate_window_bytes,
            max_id_length=limits.max_duplicate_id_length,
        )
        if store is not None:
            await store.attach(duplicates)
    listeners = await open_listeners(host, port, **listening)
    broker = Broker(listeners, host, users, limits, store, duplicates)
    error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        # (this module's own Broker: _open_broker is the one owner of its lifetime)
        nursery.start_soon(broker._run)  # noqa: SLF001
        try:
            yield broker
        except BaseException as exc:
            # Re-raised below, outside the nursery, so the caller sees the
            # exception it raised rather than an exception group around it.
            error = exc
        finally:
            try:
                # Shielded (and the connections are): a cancelled caller still
                # says goodbye to every client, within the deadline.
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + limits.close_timeout + 1.0
                    await broker._shutdown()  # noqa: SLF001
            finally:
                broker._stop()  # noqa: SLF001
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
    tls_port: Address | None = None,
    ws_port: Address | None = None,
    wss_port: Address | None = None,
    ssl_context: ssl.SSLContext | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    accept_damage: bool = False,
    task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a STOMP broker until cancelled; for ``nursery.start``.

    ``await nursery.start(serve_broker)`` returns the :class:`Broker` once it
    listens. Cancelling the nursery stops it as leaving :func:`open_broker`
    does: every client is told, and the cancellation takes up to
    ``limits.close_timeout`` seconds to complete. Arguments are those of
    :func:`open_broker`.

    Raises:
      OSError, ValueError, ImportError, StoreError: as :func:`open_broker`.
    """
    async with open_broker(
        host,
        port,
        users=users,
        limits=limits,
        tls_port=tls_port,
        ws_port=ws_port,
        wss_port=wss_port,
        ssl_context=ssl_context,
        data_dir=data_dir,
        accept_damage=accept_damage,
    ) as broker:
        task_status.started(broker)
        await trio.sleep_forever()
