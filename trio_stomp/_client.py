"""The client: a STOMP session that can outlive any one connection.

Structure (everything in the nursery that :func:`connect` / :func:`wrap_stream`
open around the caller's ``async with`` block, so nothing outlives it):

- :class:`Connection` (one stream): reader, writer and heart-beat tasks.
- :class:`Client` (the caller's handle): subscriptions, receipts and
  transactions, and a supervisor task that serves the current connection
  and, with a :class:`Reconnect` policy, replaces it when it fails.

Without a reconnect policy, a failure (the peer closed, an ERROR frame,
heart-beats stopped) is recorded once, wakes everything waiting, cancels the
caller's block and is raised at its ``async with``. With one, the client
reconnects: see :func:`connect`.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

import attrs
import trio

from ._connection import Connection
from ._errors import (
    ClientClosed,
    ConnectionLost,
    LocalProtocolError,
    RemoteProtocolError,
    ServerError,
    StompError,
    TransactionError,
)
from ._message import Message, ack_headers
from ._opening import Options, Target, open_any
from ._reconnect import ConnectionEvent, Reconnect
from ._subscription import Subscription
from ._transaction import Transaction
from .frame import SEND_RESERVED_HEADERS, SUBSCRIBE_RESERVED_HEADERS, Frame, Headers, encode
from .frame._escaping import escape
from .frame._frame import trusted_frame

_CONSUMER_TAG: Final = re.compile(r"tag 'T_([^']*)'")

HeaderArg = Mapping[str, str] | Iterable[tuple[str, str]] | None
EventCallback = Callable[[ConnectionEvent], object]


class _Waiter:
    """Waits for one RECEIPT, or for the connection to fail."""

    __slots__ = ("_error", "_event")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._error: StompError | None = None

    def set(self) -> None:
        self._event.set()

    def fail(self, error: StompError) -> None:
        self._error = error
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        if self._error is not None:
            raise self._error


@attrs.frozen
class _Replay:
    """A SEND that goes out again on the next connection if this one fails first."""

    seq: int
    frame: Frame


def _user_headers(headers: HeaderArg, reserved: frozenset[str]) -> list[tuple[str, str]]:
    if headers is None:
        return []
    pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
    for name, value in pairs:
        if not isinstance(name, str) or not isinstance(value, str):
            shown = repr(name) if isinstance(name, str) else f"a {type(name).__name__} name"
            raise TypeError(
                f"header names and values must be str, got {shown} with a "
                f"{type(value).__name__} value"
            )
        if name in reserved:
            raise LocalProtocolError(
                f"header {name!r} is set by the client; use the matching argument instead"
            )
    return pairs


class Client:
    """A STOMP session. Get one from :func:`connect` or :func:`wrap_stream`.

    Attributes:
      version: the negotiated STOMP version ("1.0", "1.1" or "1.2").
      server: the broker's ``server`` header from CONNECTED, or None.
      session: the broker's ``session`` header from CONNECTED, or None.
      heartbeat: the negotiated ``(send_every, expect_every)`` in seconds (0: off).
      url: the broker the session is connected to now.
      reconnects: how many times the connection was restored.
    """

    def __init__(
        self,
        conn: Connection,
        options: Options,
        *,
        targets: Sequence[Target] = (),
        reconnect: Reconnect | None = None,
        on_event: EventCallback | None = None,
    ) -> None:
        self._conn = conn
        self._options = options
        self._targets = list(targets)
        self._reconnect = reconnect
        self._on_event = on_event
        self._ids = itertools.count(1)
        self._subscriptions: dict[str, Subscription] = {}
        self._ended: set[str] = set()  # ids of subscriptions we unsubscribed
        self._send_prefixes: dict[tuple[str, str], bytes] = {}
        self._receipts: dict[str, _Waiter] = {}
        self._replays: dict[str, _Replay] = {}  # receipt id -> SEND awaiting it
        self._generation = 0
        self._connected = True
        self._restored = trio.Event()
        self._restored.set()
        self._error: StompError | None = None
        self._closed = False
        self._disconnected = False
        self.reconnects = 0
        self._body_scope: trio.CancelScope | None = None
        self._tasks_scope = trio.CancelScope(shield=True)
        self._rng = random.Random()
        self._replay_queue: list[_Replay] = []
        self._pending_event: ConnectionEvent | None = None
        self._lost_conn: Connection | None = None
        self._lost_at = 0.0
        conn.on_fail = self._lost

    @property
    def version(self) -> str:
        return self._conn.version

    @property
    def server(self) -> str | None:
        return self._conn.server

    @property
    def session(self) -> str | None:
        return self._conn.session

    @property
    def heartbeat(self) -> tuple[float, float]:
        return self._conn.heartbeat

    @property
    def url(self) -> str:
        return self._conn.url

    def __repr__(self) -> str:
        state = "closed" if self._closed else "failed" if self._error else "open"
        return f"<trio_stomp.Client STOMP {self.version} to {self.url} ({state})>"

    # -- public API ---------------------------------------------------------

    async def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: HeaderArg = None,
        content_type: str | None = None,
        receipt: bool = False,
    ) -> None:
        """Send a message to ``destination``.

        A ``str`` body is encoded as UTF-8 and, unless ``content_type`` says
        otherwise, labelled ``text/plain;charset=utf-8``.

        Returns once the frame is queued for the socket (with backpressure when
        the socket is slower than the sender). With ``receipt=True`` it
        returns only once the broker has confirmed it with a RECEIPT; with a
        reconnect policy, a SEND whose receipt had not come when the
        connection dropped is sent again on the next one (at least once).

        Raises:
          LocalProtocolError: a header that cannot be sent (NUL, a reserved
            name); nothing was sent.
          ServerError, ConnectionLost: the connection failed (for good, when
            reconnecting).
          ClientClosed: the client was closed.
        """
        await self._send_message(destination, body, headers, content_type, receipt, None)

    def subscribe(
        self,
        destination: str,
        *,
        ack: str = "auto",
        headers: HeaderArg = None,
        buffer_size: int | None = None,
        receipt: bool = False,
    ) -> Subscription:
        """Subscribe to ``destination``; use the result with ``async with``.

        Args:
          ack: "auto", "client" (cumulative) or "client-individual".
          headers: extra SUBSCRIBE headers, e.g. ``{"prefetch-count": "100"}``
            (RabbitMQ), ``{"activemq.prefetchSize": "100"}`` or ``selector``
            (ActiveMQ). When neither prefetch header is given, both are sent
            with a window of 1000.
          buffer_size: how many received messages may wait for the consumer;
            defaults to the prefetch window (10,000 for ``ack="auto"``). See
            :class:`Subscription` for what happens when it fills up.
          receipt: wait for the broker to confirm the SUBSCRIBE on entry.

        With a reconnect policy the subscription is re-established on every
        new connection, and its ``async for`` goes on across reconnects.

        Raises:
          LocalProtocolError: unknown ack mode or a reserved header; nothing sent.
        """
        pairs = _user_headers(headers, SUBSCRIBE_RESERVED_HEADERS)
        self._check_open()
        return Subscription(
            self, str(next(self._ids)), destination, ack, pairs, buffer_size, receipt
        )

    def transaction(self, *, receipt: bool = True) -> Transaction:
        """Start a transaction; use the result with ``async with``.

        Args:
          receipt: wait for the RECEIPT of COMMIT before leaving the block.
        """
        self._check_open()
        return Transaction(self, f"tx-{next(self._ids)}", receipt)

    # -- frames out ---------------------------------------------------------

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ClientClosed(f"{self!r} is closed")

    async def _wait_connected(self) -> None:
        while not self._connected:
            self._check_open()
            await self._restored.wait()
        self._check_open()

    async def _queue_frame(
        self,
        command: str,
        pairs: list[tuple[str, str]],
        body: bytes,
        receipt: bool,
        replayable: bool = False,
    ) -> _Waiter | None:
        """Encode and queue one frame; return its receipt waiter if it asked for one.

        Raises before queueing anything when the frame is invalid or the
        connection unusable, or when cancelled: then nothing was sent.
        ``replayable`` frames (plain SENDs) that the connection did not get
        to write are sent again after a reconnect.
        """
        self._check_open()
        receipt_id = ""
        if receipt:
            receipt_id = f"r-{next(self._ids)}"
            pairs.append(("receipt", receipt_id))
        frame = trusted_frame(command, Headers._trusted(tuple(pairs)), body)
        while True:
            self._check_open()
            if not self._connected:
                await self._wait_connected()
            conn = self._conn
            data = encode(frame, conn.version)
            replay = _Replay(next(self._ids), frame) if replayable and self._reconnect else None
            waiter = None
            if receipt:
                waiter = self._receipts[receipt_id] = _Waiter()
                if replay is not None:
                    self._replays[receipt_id] = replay
            try:
                await conn.outbox.put(data, None if receipt else replay)
            except StompError:
                self._forget_receipt(receipt_id)
                if self._lost_conn is not conn or self._error is not None:
                    raise
                # The connection dropped under us, and another is on its way.
                if replay is not None:
                    continue  # a plain SEND: queue it on the next connection
                if command == "SUBSCRIBE":
                    await self._wait_connected()  # _restore re-subscribed it
                    return None
                raise
            except BaseException:
                self._forget_receipt(receipt_id)
                raise
            return waiter

    def _forget_receipt(self, receipt_id: str) -> None:
        if receipt_id:
            self._receipts.pop(receipt_id, None)
            self._replays.pop(receipt_id, None)

    async def _await_receipt(self, waiter: _Waiter | None) -> None:
        if waiter is None:
            return
        try:
            await waiter.wait()
        finally:
            for key, value in list(self._receipts.items()):
                if value is waiter:
                    self._forget_receipt(key)
                    break

    async def _send_frame(
        self,
        command: str,
        pairs: list[tuple[str, str]],
        body: bytes = b"",
        *,
        receipt: bool,
        replayable: bool = False,
    ) -> None:
        await self._await_receipt(
            await self._queue_frame(command, pairs, body, receipt, replayable)
        )

    async def _send_message(
        self,
        destination: str,
        body: bytes | str,
        headers: HeaderArg,
        content_type: str | None,
        receipt: bool,
        transaction: Transaction | None,
    ) -> None:
        if isinstance(body, str):
            body = body.encode("utf-8")
            if content_type is None:
                content_type = "text/plain;charset=utf-8"
        elif (
            body
            and not headers
            and content_type is None
            and not receipt
            and transaction is None
            and self._connected
            and await self._send_plain(destination, body)
        ):
            return
        pairs = [("destination", destination)]
        if content_type is not None:
            pairs.append(("content-type", content_type))
        if transaction is not None:
            self._check_transaction(transaction)
            pairs.append(("transaction", transaction.id))
        if headers:
            extra = _user_headers(headers, SEND_RESERVED_HEADERS)
            if content_type is not None and any(k == "content-type" for k, _ in extra):
                raise LocalProtocolError("content-type given both as header and argument")
            pairs.extend(extra)
        await self._send_frame("SEND", pairs, body, receipt=receipt, replayable=transaction is None)

    async def _send_plain(self, destination: str, body: bytes) -> bool:
        """The hot path of ``send(dest, body)``: no headers, receipt or transaction.

        Splices the body into a cached encoding of the frame head (the same
        bytes :func:`encode` gives). Returns False when the general path must
        take over (the connection dropped under us, with reconnect on).
        """
        conn = self._conn
        key = (destination, conn.version)
        prefix = self._send_prefixes.get(key)
        if prefix is None:
            head = encode(Frame("SEND", [("destination", destination)], b"\0"), conn.version)
            prefix = head[: head.rindex(b"content-length:") + len(b"content-length:")]
            if len(self._send_prefixes) >= 1024:
                self._send_prefixes.clear()
            self._send_prefixes[key] = prefix
        data = b"%s%d\n\n%s\0" % (prefix, len(body), body)
        replay = None
        if self._reconnect is not None:
            pairs = (("destination", destination),)
            replay = _Replay(next(self._ids), trusted_frame("SEND", Headers._trusted(pairs), body))
        try:
            await conn.outbox.put(data, replay)
        except StompError:
            if self._lost_conn is not conn or self._error is not None:
                raise
            return False
        return True

    async def _acknowledge(
        self,
        message: Message,
        command: str,
        *,
        receipt: bool,
        transaction: Transaction | None = None,
    ) -> None:
        if message._subscription._client is not self:
            raise LocalProtocolError(f"{message!r} was received on another connection")
        if message._generation != self._generation:
            raise ClientClosed(
                f"cannot {command} {message!r}: the connection it came on was lost; "
                "the broker will redeliver it"
            )
        if transaction is not None:
            self._check_transaction(transaction)
        pairs = ack_headers(message, command, self.version, transaction)
        try:
            if not receipt and transaction is None and self.version == "1.2":
                # The hot path of client-individual consumers: one header, no receipt.
                await self._conn.outbox.put(
                    b"%s\nid:%s\n\n\0" % (command.encode(), escape(pairs[0][1], "1.2").encode())
                )
                return
            await self._send_frame(command, pairs, receipt=receipt)
        except (ConnectionLost, ClientClosed) as exc:
            if self._reconnect is None or self._error is not None:
                raise
            raise ClientClosed(
                f"the connection was lost before the {command} of {message!r} was confirmed; "
                "the broker will redeliver it"
            ) from exc

    # -- subscriptions and transactions ------------------------------------

    def _subscribe_headers(self, sub: Subscription) -> list[tuple[str, str]]:
        return [("id", sub.id), ("destination", sub.destination), ("ack", sub.ack), *sub._headers]

    async def _start_subscription(self, sub: Subscription, receipt: bool) -> None:
        if not self._connected:
            await self._wait_connected()
        self._subscriptions[sub.id] = sub
        sub.active = True
        try:
            waiter = await self._queue_frame(
                "SUBSCRIBE", self._subscribe_headers(sub), b"", receipt
            )
        except BaseException:
            sub._close()
            del self._subscriptions[sub.id]
            raise
        try:
            await self._await_receipt(waiter)
        except BaseException:
            await self._end_subscription(sub)
            raise

    async def _end_subscription(self, sub: Subscription) -> None:
        sub._close()
        if self._subscriptions.pop(sub.id, None) is None:
            return
        self._ended.add(sub.id)
        await self._cleanup_frame("UNSUBSCRIBE", self._unsubscribe_headers(sub))

    def _unsubscribe_headers(self, sub: Subscription) -> list[tuple[str, str]]:
        pairs = [("id", sub.id)]
        if self.version == "1.0":
            pairs.append(("destination", sub.destination))
        return pairs

    def _overflowed(self, sub: Subscription) -> None:
        # Called by the reader: it cannot wait, so the UNSUBSCRIBE skips the queue bound.
        self._subscriptions.pop(sub.id, None)
        sub._close()
        frame = trusted_frame("UNSUBSCRIBE", Headers(self._unsubscribe_headers(sub)), b"")
        self._conn.outbox.put_nowait(encode(frame, self.version))

    async def _cleanup_frame(self, command: str, pairs: list[tuple[str, str]]) -> None:
        """Send a frame that must reach the wire even when we are being cancelled.

        Shielded and bounded by ``disconnect_timeout``; skipped when the
        connection is down, failed or closed (the broker forgets the
        session's subscriptions and transactions with it).
        """
        if self._error is not None or self._closed or not self._connected:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(self._options.disconnect_timeout):
            try:
                await self._send_frame(command, pairs, receipt=False)
            except StompError:
                pass

    def _check_transaction(self, tx: Transaction) -> None:
        tx._check_open()
        if tx._generation != self._generation:
            tx.state = "failed"
            raise TransactionError(
                f"{tx!r} was rolled back: the connection was lost while it was open"
            )

    async def _begin(self, tx: Transaction) -> None:
        if tx.state != "new":
            raise TransactionError(f"{tx!r} was already used")
        if not self._connected:
            await self._wait_connected()
        tx._generation = self._generation
        await self._send_frame("BEGIN", [("transaction", tx.id)], receipt=False)
        tx.state = "open"

    async def _commit(self, tx: Transaction) -> None:
        self._check_transaction(tx)
        tx.state = "failed"
        try:
            await self._send_frame("COMMIT", [("transaction", tx.id)], receipt=tx._receipt)
        except (ClientClosed, ConnectionLost) as exc:
            raise TransactionError(f"{tx!r} may not have committed: {exc}") from exc
        tx.state = "committed"

    async def _abort(self, tx: Transaction) -> None:
        if tx.state != "open":
            return
        tx.state = "aborted"
        if tx._generation == self._generation:
            await self._cleanup_frame("ABORT", [("transaction", tx.id)])

    # -- frames in ----------------------------------------------------------

    def _dispatch(self, frame: Frame) -> None:
        command = frame.command
        headers = frame.headers
        if command == "MESSAGE":
            sub_id = headers.get("subscription")
            if sub_id is not None:
                sub = self._subscriptions.get(sub_id)
            else:  # some 1.0 brokers leave it out: match by destination
                destination = headers.get("destination")
                sub = next(
                    (s for s in self._subscriptions.values() if s.destination == destination),
                    None,
                )
            if sub is not None:
                sub._deliver(frame)
            # else: a message for a subscription we just ended; the broker redelivers it.
        elif command == "RECEIPT":
            waiter = self._receipts.get(headers.get("receipt-id", ""))
            if waiter is not None:
                waiter.set()
        elif command == "ERROR":
            if self._late_delivery(frame):
                return
            message = headers.get("message") or frame.body[:200].decode("utf-8", "replace")
            raise ServerError(message.strip() or "ERROR frame without a message", frame)
        else:
            raise RemoteProtocolError(f"unexpected {command} frame from the broker")

    def _late_delivery(self, frame: Frame) -> bool:
        """RabbitMQ's ERROR for a message that was in flight when we unsubscribed.

        RabbitMQ sends "Subscription not found ... tag 'T_<id>'" for each such
        message and keeps the connection open: not a failure when ``<id>`` is
        a subscription this client ended (the message is requeued).
        """
        if frame.headers.get("message") != "Subscription not found":
            return False
        match = _CONSUMER_TAG.search(frame.body.decode("utf-8", "replace"))
        return match is not None and match.group(1) in self._ended

    # -- lifetime -----------------------------------------------------------

    def _event(self, event: ConnectionEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)

    def _fail(self, error: StompError) -> None:
        """The session is over for good: wake everyone with ``error``."""
        if self._error is not None or self._closed:
            return
        self._error = error
        self._conn.fail(error)
        for waiter in self._receipts.values():
            waiter.fail(error)
        for sub in self._subscriptions.values():
            sub._close(error)
        self._restored.set()
        if self._body_scope is not None:
            self._body_scope.cancel()
        self._tasks_scope.cancel()

    async def _supervise(self) -> None:
        """Serve the current connection; on failure, reconnect or fail for good."""
        with self._tasks_scope:
            conn = self._conn
            restoring = False
            while True:
                async with trio.open_nursery() as nursery:
                    if restoring:
                        nursery.start_soon(self._restore, conn)
                    error = await conn.run(self._dispatch)
                    nursery.cancel_scope.cancel()
                if error is None:
                    return  # stopped by _shutdown
                await conn.aclose()
                if self._reconnect is None or conn.closing:
                    self._fail(error)
                    return
                self._lost(conn, error)  # done already, unless fail() came another way
                try:
                    conn, attempts = await open_any(
                        self._targets,
                        self._options,
                        self._reconnect,
                        self._rng,
                        start=self._targets_index(conn.url) + 1,
                        initial=False,
                    )
                except StompError as exc:
                    self._fail(exc)
                    return
                conn.on_fail = self._lost
                self._conn = conn
                self._pending_event = ConnectionEvent(
                    "restored",
                    conn.url,
                    attempts=attempts,
                    downtime=trio.current_time() - self._lost_at,
                )
                restoring = True

    def _targets_index(self, url: str) -> int:
        return next((i for i, t in enumerate(self._targets) if t.endpoint.url == url), -1)

    def _lost(self, old: Connection, error: StompError) -> None:
        """Bookkeeping when a connection drops and a new one is on its way.

        Runs synchronously from ``Connection.fail`` (its ``on_fail``), so that
        from that moment every caller waits for the next connection instead
        of retrying on the dead one. Does nothing without a reconnect policy,
        when closing, or when already done for ``old``.
        """
        if (
            old is not self._conn
            or old is self._lost_conn
            or self._reconnect is None
            or old.closing
            or self._error is not None
            or self._closed
        ):
            return
        self._lost_conn = old
        self._lost_at = trio.current_time()
        self._connected = False
        if self._restored.is_set():  # else callers already wait on it (a failed restore)
            self._restored = trio.Event()
        self._generation += 1
        # What the dead connection never wrote, what still awaits a receipt,
        # and what a failed restore had not replayed yet, once each, in order.
        pending = [*self._replay_queue, *self._replays.values(), *old.outbox.unwritten()]
        self._replay_queue = sorted({r.seq: r for r in pending}.values(), key=lambda r: r.seq)
        lost = ConnectionLost(f"the connection to {old.url} was lost: {error}")
        for receipt_id, waiter in list(self._receipts.items()):
            if receipt_id not in self._replays:
                waiter.fail(lost)
                del self._receipts[receipt_id]
        for sub in self._subscriptions.values():
            sub._connection_lost()
        self._event(ConnectionEvent("lost", old.url, error=str(error)))

    async def _restore(self, conn: Connection) -> None:
        """On a new connection: resubscribe (awaiting receipts), then replay sends.

        If the new connection fails meanwhile, it is marked failed and the
        supervisor starts over with the next one.
        """
        try:
            await self._resubscribe_and_replay(conn)
        except StompError as exc:
            conn.fail(exc)
            return
        self.reconnects += 1
        self._connected = True
        self._restored.set()
        if self._pending_event is not None:
            self._event(self._pending_event)

    async def _resubscribe_and_replay(self, conn: Connection) -> None:
        waiters = []
        for sub in self._subscriptions.values():
            receipt_id = f"r-{next(self._ids)}"
            pairs = [*self._subscribe_headers(sub), ("receipt", receipt_id)]
            waiter = self._receipts[receipt_id] = _Waiter()
            waiters.append((receipt_id, waiter))
            frame = trusted_frame("SUBSCRIBE", Headers._trusted(tuple(pairs)), b"")
            conn.outbox.put_nowait(encode(frame, conn.version))
        try:
            for _, waiter in waiters:
                await waiter.wait()
        finally:
            for receipt_id, _ in waiters:
                self._receipts.pop(receipt_id, None)
        for replay in self._replay_queue:
            await conn.outbox.put(encode(replay.frame, conn.version), replay)
        self._replay_queue = []

    async def _shutdown(self) -> None:
        """DISCONNECT (with receipt) if the connection is healthy, then close. Bounded."""
        with trio.CancelScope(shield=True):
            conn = self._conn
            if self._error is None and not self._closed:
                if self._connected:
                    conn.closing = True
                    with trio.move_on_after(self._options.disconnect_timeout):
                        try:
                            await self._send_frame("DISCONNECT", [], receipt=True)
                            self._disconnected = True
                        except StompError:
                            self._disconnected = conn.closed_after_disconnect
                if not self._disconnected and self._error is None:
                    self._error = ConnectionLost(
                        f"no RECEIPT for DISCONNECT within {self._options.disconnect_timeout} s"
                        if self._connected
                        else "the client was closed while reconnecting"
                    )
                    if not self._connected and not self._replay_queue:
                        self._disconnected = True  # nothing was left unsent
            self._closed = True
            closed = ClientClosed(f"{self!r} is closed")
            conn.stop()
            for waiter in self._receipts.values():
                waiter.fail(closed)
            for sub in list(self._subscriptions.values()):
                sub._close()
            self._subscriptions.clear()
            self._restored.set()
            self._tasks_scope.cancel()
            await conn.aclose()
