"""The client's engine: a STOMP session that can outlive any one connection.

Structure (everything in the nursery that :func:`connect` / :func:`wrap_stream`
open around the caller's ``async with`` block, so nothing outlives it):

- :class:`Connection` (one stream): reader, writer and heart-beat tasks.
- :class:`Core` (one session): frames out across connections, receipts, the
  dispatch of frames in, and a supervisor task that serves the current
  connection and, with a :class:`~trio_stomp._reconnect.Supervisor`, replaces
  it when it fails. It is the :class:`~trio_stomp._sender.Sender` that
  subscriptions, transactions and messages use.
- :class:`~trio_stomp.Client` (in :mod:`._client`): the caller's handle on a
  core (send, subscribe, transaction).

Without a reconnect policy, a failure (the peer closed, an ERROR frame,
heart-beats stopped) is recorded once, wakes everything waiting, cancels the
caller's block and is raised at its ``async with``. With one, the client
reconnects: see :func:`connect`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final, NoReturn

import trio

from ._connection import Connection
from ._errors import (
    ClientClosed,
    ConnectionLost,
    LocalProtocolError,
    RemoteProtocolError,
    ServerError,
    StompError,
)
from ._groups import unwrap_group
from ._reconnect import Replay, Supervisor
from ._sender import HeaderArg, Pairs, ReceiptWaiter, ReplyRouter, user_headers
from ._subscription import SubscriptionTable
from .frame import SEND_RESERVED_HEADERS, Event, Frame, encode
from .frame._frame import trusted_frame
from .frame._handmade import (
    ack_frame_bytes,
    ack_frames_bytes,
    plain_send_bytes,
    send_bytes,
    send_head,
    send_lines,
)
from .frame._headers import trusted_headers
from .frame._runs import message_runs

_CONSUMER_TAG: Final = re.compile(r"tag 'T_([^']*)'")
#: How many destinations' SEND heads the hot path keeps encoded.
_SEND_HEADS: Final = 1024


class Core:
    """One STOMP session across its connections (see the module docs).

    Its public methods are the :class:`~trio_stomp._sender.Sender` interface
    and what :mod:`._connect` drives; users hold a :class:`Client`.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        disconnect_timeout: float,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.conn = conn
        self._disconnect_timeout = disconnect_timeout
        self._supervisor = supervisor
        self._ids = itertools.count(1)
        self.subscriptions = SubscriptionTable()
        #: The requests' reply subscription, made by the first request.
        self.replies: ReplyRouter | None = None
        self._send_heads: dict[tuple[str, str], bytes] = {}
        self.receipts: dict[str, ReceiptWaiter] = {}
        #: Which connection of the session is current: it grows on each reconnect.
        self.generation = 0
        self._connected = True
        self._restored = trio.Event()
        self._restored.set()
        self.error: StompError | None = None
        self.closed = False
        self._disconnected = False
        self.reconnects = 0
        self._body_scope: trio.CancelScope | None = None
        self._tasks_scope = trio.CancelScope(shield=True)
        conn.on_fail = self._lost

    # -- the Sender interface -------------------------------------------------

    @property
    def version(self) -> str:
        return self.conn.version

    @property
    def connected(self) -> bool:
        return self._connected

    def describe(self) -> str:
        state = "closed" if self.closed else "failed" if self.error else "open"
        return f"<trio_stomp.Client STOMP {self.version} to {self.conn.url} ({state})>"

    def next_id(self, prefix: str = "") -> str:
        return f"{prefix}{next(self._ids)}"

    def check_open(self) -> None:
        if self.error is not None:
            raise self.error
        if self.closed:
            raise ClientClosed(f"{self.describe()} is closed")

    async def wait_connected(self) -> None:
        while not self._connected:
            self.check_open()
            await self._restored.wait()
        self.check_open()

    async def queue_frame(
        self, command: str, pairs: Pairs, body: bytes, receipt: bool, replayable: bool = False
    ) -> ReceiptWaiter | None:
        """Encode and queue one frame; return its receipt waiter if it asked for one.

        Raises before queueing anything when the frame is invalid or the
        connection unusable, or when cancelled: then nothing was sent.
        ``replayable`` frames (plain SENDs) that the connection did not get
        to write are sent again after a reconnect.
        """
        self.check_open()
        receipt_id = ""
        if receipt:
            receipt_id = self.next_id("r-")
            pairs.append(("receipt", receipt_id))
        frame = trusted_frame(command, trusted_headers(tuple(pairs)), body)
        while True:
            conn = await self._current_connection()
            replay = self._supervisor.replay(frame) if replayable and self._supervisor else None
            waiter = self._expect_receipt(receipt_id, replay)
            try:
                await conn.outbox.put(encode(frame, conn.version), None if receipt else replay)
            except StompError:
                self._forget_receipt(receipt_id)
                if not self._dropped_under(conn):
                    raise
                # The connection dropped under us, and another is on its way.
                if replay is not None:
                    continue  # a plain SEND: queue it on the next connection
                if command == "SUBSCRIBE":
                    await self.wait_connected()  # _restore re-subscribed it
                    return None
                raise
            except BaseException:
                self._forget_receipt(receipt_id)
                raise
            return waiter

    async def _current_connection(self) -> Connection:
        self.check_open()
        if not self._connected:
            await self.wait_connected()
        return self.conn

    def _expect_receipt(self, receipt_id: str, replay: Replay | None) -> ReceiptWaiter | None:
        if not receipt_id:
            return None
        waiter = self.receipts[receipt_id] = ReceiptWaiter()
        if replay is not None and self._supervisor is not None:
            self._supervisor.replays[receipt_id] = replay
        return waiter

    def _dropped_under(self, conn: Connection) -> bool:
        """True when ``conn`` failed and a new connection is coming (reconnecting)."""
        return (
            self._supervisor is not None
            and self._supervisor.lost_conn is conn
            and self.error is None
        )

    def _forget_receipt(self, receipt_id: str) -> None:
        if receipt_id:
            self.receipts.pop(receipt_id, None)
            if self._supervisor is not None:
                self._supervisor.replays.pop(receipt_id, None)

    async def await_receipt(self, waiter: ReceiptWaiter | None) -> None:
        if waiter is None:
            return
        try:
            await waiter.wait()
        finally:
            for key, value in list(self.receipts.items()):
                if value is waiter:
                    self._forget_receipt(key)
                    break

    async def send_frame(
        self, command: str, pairs: Pairs, body: bytes = b"", *, receipt: bool
    ) -> None:
        await self.await_receipt(await self.queue_frame(command, pairs, body, receipt))

    async def send_message(
        self,
        destination: str,
        body: bytes | str,
        headers: HeaderArg,
        content_type: str | None,
        receipt: bool,
        transaction: str | None,
    ) -> None:
        if isinstance(body, str):
            body = body.encode("utf-8")
            if content_type is None:
                content_type = "text/plain;charset=utf-8"
        if (
            body
            and not receipt
            and transaction is None
            and self._connected
            and await self._send_quick(destination, body, headers, content_type)
        ):
            return
        pairs = [("destination", destination)]
        if content_type is not None:
            pairs.append(("content-type", content_type))
        if transaction is not None:
            pairs.append(("transaction", transaction))
        if headers:
            extra = user_headers(headers, SEND_RESERVED_HEADERS)
            if content_type is not None and any(k == "content-type" for k, _ in extra):
                raise LocalProtocolError("content-type given both as header and argument")
            pairs.extend(extra)
        waiter = await self.queue_frame("SEND", pairs, body, receipt, transaction is None)
        await self.await_receipt(waiter)

    def _send_head(self, destination: str, version: str) -> bytes:
        key = (destination, version)
        head = self._send_heads.get(key)
        if head is None:
            head = send_head(destination, version)
            if len(self._send_heads) >= _SEND_HEADS:
                self._send_heads.clear()
            self._send_heads[key] = head
        return head

    async def _send_quick(
        self, destination: str, body: bytes, headers: HeaderArg, content_type: str | None
    ) -> bool:
        """The hot path of ``send``: a body, no receipt, no transaction, and headers (a
        dict) that need no escaping, or none.

        Returns False, having queued nothing, when the general path must take
        over: headers it declines (it says why), or the connection dropped
        under us with reconnect on.
        """
        conn = self.conn
        head = self._send_head(destination, conn.version)
        extra: Mapping[str, str] = {}
        if headers or content_type is not None:
            if conn.version == "1.0" or not isinstance(headers, dict | None):
                return False
            extra = headers or {}
            if content_type is not None:
                if "content-type" in extra:
                    return False
                extra = {"content-type": content_type, **extra}
            lines = send_lines(extra)
            data = send_bytes(head, lines, body) if lines is not None else None
            if data is None:
                return False
        else:
            data = plain_send_bytes(head, body)
        replay = None
        if self._supervisor is not None:
            pairs = (("destination", destination), *extra.items())
            replay = self._supervisor.replay(trusted_frame("SEND", trusted_headers(pairs), body))
        try:
            await conn.outbox.put(data, replay)
        except StompError:
            if not self._dropped_under(conn):
                raise
            return False
        return True

    async def send_ack(self, command: str, pairs: Pairs, *, receipt: bool, message: object) -> None:
        try:
            await self.send_frame(command, pairs, receipt=receipt)
        except (ConnectionLost, ClientClosed) as exc:
            self._ack_lost(exc, command, message)

    def send_ack_id(self, command: str, ack_id: str, *, message: object) -> Awaitable[None]:
        """The hot path of client-individual consumers: a 1.2 ACK or NACK, no receipt.

        Not a coroutine: without a reconnect policy an error needs no
        rewording (:meth:`_ack_lost`), so the caller awaits the outbox's
        own coroutine, one frame fewer on every ACK.
        """
        data = ack_frame_bytes(command, ack_id)
        if self._supervisor is None:
            return self.conn.outbox.put(data, urgent=False)
        return self._put_ack(data, command, message)

    async def _put_ack(self, data: bytes, command: str, message: object) -> None:
        try:
            await self.conn.outbox.put(data, urgent=False)
        except (ConnectionLost, ClientClosed) as exc:
            self._ack_lost(exc, command, message)

    async def send_acks(
        self, command: str, acks: list[Pairs], *, receipt: bool, message: object
    ) -> None:
        """ACKs or NACKs of a batch, queued together (one write)."""
        try:
            for pairs in acks[:-1]:
                await self.queue_frame(command, pairs, b"", False)
            # In order on one connection: the last one's receipt confirms them all.
            await self.send_frame(command, acks[-1], receipt=receipt)
        except (ConnectionLost, ClientClosed) as exc:
            self._ack_lost(exc, command, message)

    async def send_ack_ids(self, command: str, ack_ids: list[str], *, message: object) -> None:
        """1.2 ACKs or NACKs of a batch, no receipt: built at once, queued as one write."""
        try:
            await self.conn.outbox.put(ack_frames_bytes(command, ack_ids))
        except (ConnectionLost, ClientClosed) as exc:
            self._ack_lost(exc, command, message)

    def _ack_lost(self, exc: StompError, command: str, message: object) -> NoReturn:
        if self._supervisor is None or self.error is not None:
            raise exc
        raise ClientClosed(
            f"the connection was lost before the {command} of {message!r} was confirmed; "
            "the broker will redeliver it"
        ) from exc

    async def send_cleanup(self, command: str, pairs: Pairs) -> None:
        """Send a frame that must reach the wire even when we are being cancelled.

        Shielded and bounded by ``disconnect_timeout``; skipped when the
        connection is down, failed or closed (the broker forgets the
        session's subscriptions and transactions with it).
        """
        if self.error is not None or self.closed or not self._connected:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(self._disconnect_timeout):
            try:
                await self.send_frame(command, pairs, receipt=False)
            except StompError:
                pass

    def send_now(self, command: str, pairs: Pairs) -> None:
        frame = trusted_frame(command, trusted_headers(tuple(pairs)), b"")
        self.conn.outbox.put_nowait(encode(frame, self.version))

    # -- frames in ----------------------------------------------------------

    def dispatch(self, events: Sequence[Event]) -> None:
        """Act on the events of one read, in order.

        Consecutive MESSAGEs for one subscription reach it together (one
        step, one wake-up of its consumer); anything else is handled in its
        turn, after the messages before it were delivered.
        """
        find = self.subscriptions.find
        for item in message_runs(events):
            if isinstance(item, Frame):
                self._dispatch_other(item)
                continue
            sub = find(item[0].headers)
            if sub is not None:
                sub.deliver(item, self.generation)
            elif self.replies is not None and self.replies.claims(item[0]):
                self.replies.deliver(item)
            # else: for a subscription we just ended; the broker redelivers it.

    def _dispatch_other(self, frame: Frame) -> None:
        command = frame.command
        headers = frame.headers
        if command == "RECEIPT":
            waiter = self.receipts.get(headers.get("receipt-id", ""))
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
        return match is not None and match.group(1) in self.subscriptions.ended

    # -- lifetime -----------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the session's tasks around the caller's block; shut down after it.

        No task outlives the block; a single exception is raised unwrapped.
        """
        sole: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._supervise)
                try:
                    with trio.CancelScope() as self._body_scope:
                        yield
                finally:
                    await self._shutdown()
        except BaseExceptionGroup as group:
            sole = unwrap_group(group)
            if isinstance(sole, BaseExceptionGroup):
                raise
        if sole is not None:
            raise sole
        if self.error is not None and not self._disconnected:
            raise self.error

    def _fail(self, error: StompError) -> None:
        """The session is over for good: wake everyone with ``error``."""
        if self.error is not None or self.closed:
            return
        self.error = error
        self.conn.fail(error)
        for waiter in self.receipts.values():
            waiter.fail(error)
        for sub in self.subscriptions.by_id.values():
            sub.close(error)
        if self.replies is not None:
            self.replies.fail(error)
        self._restored.set()
        if self._body_scope is not None:
            self._body_scope.cancel()
        self._tasks_scope.cancel()

    async def _supervise(self) -> None:
        """Serve the current connection; on failure, reconnect or fail for good."""
        with self._tasks_scope:
            conn = self.conn
            restoring = False
            while True:
                async with trio.open_nursery() as nursery:
                    if restoring:
                        nursery.start_soon(self._restore, conn)
                    error = await conn.run(self.dispatch)
                    nursery.cancel_scope.cancel()
                if error is None:
                    return  # stopped by _shutdown
                await conn.aclose()
                if self._supervisor is None or conn.closing:
                    self._fail(error)
                    return
                self._lost(conn, error)  # done already, unless fail() came another way
                try:
                    conn = await self._supervisor.next_connection(conn)
                except StompError as exc:
                    self._fail(exc)
                    return
                conn.on_fail = self._lost
                self.conn = conn
                restoring = True

    def _lost(self, old: Connection, error: StompError) -> None:
        """Bookkeeping when a connection drops and a new one is on its way.

        Runs synchronously from ``Connection.fail`` (its ``on_fail``), so that
        from that moment every caller waits for the next connection instead
        of retrying on the dead one. Does nothing without a reconnect policy,
        when closing, or when already done for ``old``.
        """
        supervisor = self._supervisor
        if (
            supervisor is None
            or old is not self.conn
            or old is supervisor.lost_conn
            or old.closing
            or self.error is not None
            or self.closed
        ):
            return
        self._connected = False
        if self._restored.is_set():  # else callers already wait on it (a failed restore)
            self._restored = trio.Event()
        self.generation += 1
        lost = ConnectionLost(f"the connection to {old.url} was lost: {error}")
        for receipt_id, waiter in list(self.receipts.items()):
            if receipt_id not in supervisor.replays:
                waiter.fail(lost)
                del self.receipts[receipt_id]
        for sub in self.subscriptions.by_id.values():
            sub.connection_lost()
        if self.replies is not None:
            self.replies.fail(lost)
        supervisor.lost(old, error)

    async def _restore(self, conn: Connection) -> None:
        """On a new connection: resubscribe (awaiting receipts), then replay sends.

        If the new connection fails meanwhile, it is marked failed and the
        supervisor starts over with the next one.
        """
        assert self._supervisor is not None
        try:
            await self._resubscribe(conn)
            await self._supervisor.replay_on(conn)
        except StompError as exc:
            conn.fail(exc)
            return
        self.reconnects += 1
        self._connected = True
        self._restored.set()
        self._supervisor.restored(conn)

    async def _resubscribe(self, conn: Connection) -> None:
        waiters = []
        for sub in self.subscriptions.by_id.values():
            receipt_id = self.next_id("r-")
            pairs = [*sub.subscribe_pairs(), ("receipt", receipt_id)]
            waiter = self.receipts[receipt_id] = ReceiptWaiter()
            waiters.append((receipt_id, waiter))
            frame = trusted_frame("SUBSCRIBE", trusted_headers(tuple(pairs)), b"")
            conn.outbox.put_nowait(encode(frame, conn.version))
        try:
            for _, waiter in waiters:
                await waiter.wait()
        finally:
            for receipt_id, _ in waiters:
                self.receipts.pop(receipt_id, None)

    async def _shutdown(self) -> None:
        """DISCONNECT (with receipt) if the connection is healthy, then close. Bounded."""
        with trio.CancelScope(shield=True):
            conn = self.conn
            if self.error is None and not self.closed:
                await self._disconnect(conn)
            self.closed = True
            closed = ClientClosed(f"{self.describe()} is closed")
            conn.stop()
            for waiter in self.receipts.values():
                waiter.fail(closed)
            for sub in list(self.subscriptions.by_id.values()):
                sub.close()
            self.subscriptions.by_id.clear()
            if self.replies is not None:
                self.replies.fail(closed)
            self._restored.set()
            self._tasks_scope.cancel()
            await conn.aclose()

    async def _disconnect(self, conn: Connection) -> None:
        if self._connected:
            conn.closing = True
            with trio.move_on_after(self._disconnect_timeout):
                try:
                    await self.send_frame("DISCONNECT", [], receipt=True)
                    self._disconnected = True
                except StompError:
                    self._disconnected = conn.closed_after_disconnect
        if not self._disconnected and self.error is None:
            self.error = ConnectionLost(
                f"no RECEIPT for DISCONNECT within {self._disconnect_timeout} s"
                if self._connected
                else "the client was closed while reconnecting"
            )
            queued = self._supervisor.queue if self._supervisor is not None else []
            if not self._connected and not queued:
                self._disconnected = True  # nothing was left unsent
