"""The client: one STOMP session over one Trio stream.

Tasks (all in the nursery that :func:`wrap_stream` opens around the caller's
``async with`` block, so none outlives it):

- the reader: reads, parses, and dispatches MESSAGE to subscription buffers
  and RECEIPT to waiters. It never waits for user code.
- the writer (:class:`Outbox`): writes queued frames in batches.
- heart-beat sender and watchdog, when heart-beats were negotiated.

A failure in any of them (the peer closed, an ERROR frame, heart-beats
stopped) is recorded once, wakes everything waiting on the connection, and
cancels the caller's block; the error is then raised at the caller's
``async with``.
"""

from __future__ import annotations

import itertools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final

import attrs
import trio

from ._errors import (
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    LocalProtocolError,
    RemoteProtocolError,
    ServerError,
    StompError,
    TransactionError,
)
from ._heartbeat import format_heartbeat, negotiate, parse_heartbeat
from ._message import Message, ack_headers
from ._outbox import Outbox
from ._subscription import Subscription
from ._transaction import Transaction
from ._transport import open_stream
from ._url import Endpoint
from .frame import HEARTBEAT, VERSIONS, Frame, FrameParser, Headers, encode
from .frame._frame import trusted_frame

RECEIVE_SIZE: Final = 64 * 1024
_RESERVED_SEND: Final = frozenset({"destination", "receipt", "transaction", "content-length"})
_RESERVED_SUBSCRIBE: Final = frozenset({"id", "destination", "ack", "receipt"})

HeaderArg = Mapping[str, str] | Iterable[tuple[str, str]] | None


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


def _user_headers(headers: HeaderArg, reserved: frozenset[str]) -> list[tuple[str, str]]:
    if headers is None:
        return []
    pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
    for name, value in pairs:
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"header names and values must be str, got {name!r}: {value!r}")
        if name in reserved:
            raise LocalProtocolError(
                f"header {name!r} is set by the client; use the matching argument instead"
            )
    return pairs


class Client:
    """A connected STOMP session. Get one from :func:`connect` or :func:`wrap_stream`.

    Attributes:
      version: the negotiated STOMP version ("1.0", "1.1" or "1.2").
      server: the broker's ``server`` header from CONNECTED, or None.
      session: the broker's ``session`` header from CONNECTED, or None.
      heartbeat: the negotiated ``(send_every, expect_every)`` in seconds (0: off).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        heartbeat_tolerance: float,
        disconnect_timeout: float,
        parser: FrameParser,
    ) -> None:
        self._stream = stream
        self._parser = parser
        self._outbox = Outbox(stream)
        self._tolerance = heartbeat_tolerance
        self._disconnect_timeout = disconnect_timeout
        self.version = "1.2"
        self.server: str | None = None
        self.session: str | None = None
        self.heartbeat: tuple[float, float] = (0.0, 0.0)
        self._ids = itertools.count(1)
        self._subscriptions: dict[str, Subscription] = {}
        self._receipts: dict[str, _Waiter] = {}
        self._error: StompError | None = None
        self._closing = False
        self._closed = False
        self._disconnected = False
        self._last_read = trio.current_time()
        self._early: list[Frame] = []
        self._body_scope: trio.CancelScope | None = None
        self._tasks_scope = trio.CancelScope(shield=True)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "failed" if self._error else "open"
        return f"<trio_stomp.Client STOMP {self.version} to {self.server or '?'} ({state})>"

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
        returns only once the broker has confirmed it with a RECEIPT.

        Raises:
          LocalProtocolError: a header that cannot be sent (NUL, a reserved
            name); nothing was sent.
          ServerError, ConnectionLost: the connection failed.
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

        Raises:
          LocalProtocolError: unknown ack mode or a reserved header; nothing sent.
        """
        pairs = _user_headers(headers, _RESERVED_SUBSCRIBE)
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

    async def _queue_frame(
        self, command: str, pairs: list[tuple[str, str]], body: bytes, receipt: bool
    ) -> _Waiter | None:
        """Encode and queue one frame; return its receipt waiter if it asked for one.

        Raises before queueing anything when the frame is invalid or the
        connection unusable, or when cancelled: then nothing was sent.
        """
        self._check_open()
        waiter = None
        if receipt:
            receipt_id = f"r-{next(self._ids)}"
            pairs.append(("receipt", receipt_id))
        data = encode(trusted_frame(command, Headers._trusted(tuple(pairs)), body), self.version)
        if receipt:
            waiter = self._receipts[receipt_id] = _Waiter()
        try:
            await self._outbox.put(data)
        except BaseException:
            if receipt:
                del self._receipts[receipt_id]
            raise
        return waiter

    async def _await_receipt(self, waiter: _Waiter | None) -> None:
        if waiter is None:
            return
        try:
            await waiter.wait()
        finally:
            for key, value in list(self._receipts.items()):
                if value is waiter:
                    del self._receipts[key]
                    break

    async def _send_frame(
        self, command: str, pairs: list[tuple[str, str]], body: bytes = b"", *, receipt: bool
    ) -> None:
        await self._await_receipt(await self._queue_frame(command, pairs, body, receipt))

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
        pairs = [("destination", destination)]
        if content_type is not None:
            pairs.append(("content-type", content_type))
        if transaction is not None:
            pairs.append(("transaction", transaction.id))
        if headers:
            extra = _user_headers(headers, _RESERVED_SEND)
            if content_type is not None and any(k == "content-type" for k, _ in extra):
                raise LocalProtocolError("content-type given both as header and argument")
            pairs.extend(extra)
        await self._send_frame("SEND", pairs, body, receipt=receipt)

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
        pairs = ack_headers(message, command, self.version, transaction)
        await self._send_frame(command, pairs, receipt=receipt)

    # -- subscriptions and transactions ------------------------------------

    async def _start_subscription(
        self, sub: Subscription, headers: list[tuple[str, str]], receipt: bool
    ) -> None:
        pairs = [("id", sub.id), ("destination", sub.destination), ("ack", sub.ack), *headers]
        self._subscriptions[sub.id] = sub
        sub.active = True
        try:
            waiter = await self._queue_frame("SUBSCRIBE", pairs, b"", receipt)
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
        self._outbox.put_nowait(encode(frame, self.version))

    async def _cleanup_frame(self, command: str, pairs: list[tuple[str, str]]) -> None:
        """Send a frame that must reach the wire even when we are being cancelled.

        Shielded and bounded by ``disconnect_timeout``; skipped when the
        connection has already failed or closed.
        """
        if self._error is not None or self._closed:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(self._disconnect_timeout):
            try:
                await self._send_frame(command, pairs, receipt=False)
            except StompError:
                pass

    async def _begin(self, tx: Transaction) -> None:
        if tx.state != "new":
            raise TransactionError(f"{tx!r} was already used")
        await self._send_frame("BEGIN", [("transaction", tx.id)], receipt=False)
        tx.state = "open"

    async def _commit(self, tx: Transaction) -> None:
        tx._check_open()
        tx.state = "failed"
        try:
            await self._send_frame("COMMIT", [("transaction", tx.id)], receipt=tx._receipt)
        except ClientClosed as exc:
            raise TransactionError(f"{tx!r} could not commit: {exc}") from exc
        tx.state = "committed"

    async def _abort(self, tx: Transaction) -> None:
        if tx.state != "open":
            return
        tx.state = "aborted"
        await self._cleanup_frame("ABORT", [("transaction", tx.id)])

    # -- frames in ----------------------------------------------------------

    async def _handshake(
        self,
        *,
        login: str | None,
        passcode: str | None,
        host: str,
        heartbeat: tuple[int, int],
        versions: Sequence[str],
    ) -> None:
        unknown = [v for v in versions if v not in VERSIONS]
        if unknown or not versions:
            raise ValueError(f"versions must be a non-empty subset of {VERSIONS}, got {versions}")
        pairs = [("accept-version", ",".join(versions)), ("host", host)]
        if login is not None:
            pairs.append(("login", login))
        if passcode is not None:
            pairs.append(("passcode", passcode))
        pairs.append(("heart-beat", format_heartbeat(heartbeat)))
        await self._stream.send_all(encode(Frame("CONNECT", pairs), "1.2"))
        while True:
            data = await self._stream.receive_some(RECEIVE_SIZE)
            events = self._parser.feed(data)
            if not data:
                raise ConnectFailed("the broker closed the connection before answering CONNECT")
            frames = [event for event in events if event is not HEARTBEAT]
            if frames:
                break
        reply, self._early = frames[0], frames[1:]  # type: ignore[assignment]
        assert isinstance(reply, Frame)
        if reply.command == "ERROR":
            message = reply.headers.get("message") or reply.body.decode("utf-8", "replace")
            raise ConnectFailed(f"the broker refused the connection: {message.strip()}", reply)
        if reply.command != "CONNECTED":
            raise ConnectFailed(f"expected CONNECTED, the broker sent {reply.command}", reply)
        version = reply.headers.get("version", "1.0")
        if version not in versions:
            raise ConnectFailed(
                f"the broker chose STOMP {version}, which is not in versions={tuple(versions)}",
                reply,
            )
        self.version = version
        self._parser.version = version
        self.server = reply.headers.get("server")
        self.session = reply.headers.get("session")
        theirs = parse_heartbeat(reply.headers.get("heart-beat"))
        if version != "1.0":
            send_ms, expect_ms = negotiate(heartbeat, theirs)
            self.heartbeat = (send_ms / 1000, expect_ms / 1000)
        self._last_read = trio.current_time()

    async def _read_loop(self) -> None:
        stream = self._stream
        feed = self._parser.feed
        dispatch = self._dispatch
        for frame in self._early:
            dispatch(frame)
        while True:
            try:
                data = await stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, OSError) as exc:
                raise ConnectionLost(f"reading from the broker failed: {exc!r}") from exc
            except trio.ClosedResourceError as exc:
                # _shutdown closes the stream right after cancelling us; the
                # close can wake this read before the cancellation does.
                if self._closed:
                    return
                raise ClientClosed("the connection was closed") from exc
            self._last_read = trio.current_time()
            if not data:
                feed(b"")
                if self._closing:
                    return
                raise ConnectionLost("the broker closed the connection")
            for event in feed(data):
                if event is not HEARTBEAT:
                    dispatch(event)  # type: ignore[arg-type]

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
            message = headers.get("message") or frame.body[:200].decode("utf-8", "replace")
            raise ServerError(message.strip() or "ERROR frame without a message", frame)
        else:
            raise RemoteProtocolError(f"unexpected {command} frame from the broker")

    # -- lifetime -----------------------------------------------------------

    async def _guard(self, task: Callable[[], Awaitable[None]]) -> None:
        """Run a background task; turn its StompError into a connection failure."""
        try:
            await task()
        except StompError as exc:
            self._fail(exc)

    def _fail(self, error: StompError) -> None:
        if self._error is not None or self._closed:
            return
        self._error = error
        self._outbox.close(error)
        for waiter in self._receipts.values():
            waiter.fail(error)
        for sub in self._subscriptions.values():
            sub._close(error)
        if self._body_scope is not None:
            self._body_scope.cancel()
        self._tasks_scope.cancel()

    async def _send_heartbeats(self) -> None:
        every = self.heartbeat[0]
        while True:
            idle = trio.current_time() - self._outbox.last_write
            if idle >= every:
                if self._outbox.empty:
                    self._outbox.put_nowait(b"\n")
                idle = 0.0
            await trio.sleep(every - idle)

    async def _watch_heartbeats(self) -> None:
        expect_every = self.heartbeat[1]
        connected_at = self._last_read
        while True:
            limit = expect_every * self._tolerance
            if self._last_read == connected_at:
                # Grace for the first beat: brokers start their timer after
                # CONNECTED (ActiveMQ's first beat comes after two intervals).
                limit += expect_every
            silent = trio.current_time() - self._last_read
            if silent >= limit:
                raise ConnectionLost(
                    f"nothing from the broker for {silent:.3f} s; heart-beats were expected "
                    f"every {self.heartbeat[1]:.3f} s"
                )
            await trio.sleep(limit - silent)

    async def _run_tasks(self) -> None:
        # Shielded: when the caller's block is cancelled, the writer and reader
        # must live on for the shielded cleanup (UNSUBSCRIBE, ABORT, DISCONNECT
        # and its receipt). _shutdown, which always runs, cancels the scope;
        # it exists before this task runs, so that works even if it never did.
        # (Not nursery.start: a cancelled start() never lets a shielded child go.)
        with self._tasks_scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, self._read_loop)
                nursery.start_soon(self._guard, self._outbox.run)
                if self.heartbeat[0]:
                    nursery.start_soon(self._guard, self._send_heartbeats)
                if self.heartbeat[1]:
                    nursery.start_soon(self._guard, self._watch_heartbeats)

    async def _shutdown(self) -> None:
        """DISCONNECT (with receipt) if the connection is healthy, then close. Bounded."""
        with trio.CancelScope(shield=True):
            if self._error is None and not self._closed:
                self._closing = True
                with trio.move_on_after(self._disconnect_timeout):
                    try:
                        await self._send_frame("DISCONNECT", [], receipt=True)
                        self._disconnected = True
                    except StompError:
                        pass
                if not self._disconnected and self._error is None:
                    self._error = ConnectionLost(
                        f"no RECEIPT for DISCONNECT within {self._disconnect_timeout} s; "
                        "frames sent without a receipt may not have reached the broker"
                    )
            self._closed = True
            closed = ClientClosed(f"{self!r} is closed")
            self._outbox.close(closed)
            for waiter in self._receipts.values():
                waiter.fail(closed)
            for sub in list(self._subscriptions.values()):
                sub._close()
            self._subscriptions.clear()
            self._tasks_scope.cancel()
            await trio.aclose_forcefully(self._stream)


def _sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one leaf exception of a (nested) group, or None if it holds several."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return None


@asynccontextmanager
async def wrap_stream(
    stream: trio.abc.Stream,
    *,
    login: str | None = None,
    passcode: str | None = None,
    host: str = "/",
    heartbeat: tuple[int, int] = (10_000, 10_000),
    versions: Sequence[str] = VERSIONS,
    heartbeat_tolerance: float = 2.0,
    connect_timeout: float = 10.0,
    disconnect_timeout: float = 5.0,
    lenient: bool = False,
    max_frame_size: int | None = None,
) -> AsyncIterator[Client]:
    """Speak STOMP over any Trio stream (TLS, WebSocket, memory): see :func:`connect`.

    The stream is closed when the block is left, whatever happens.
    """
    parser = FrameParser("1.2", lenient=lenient)
    if max_frame_size is not None:
        parser.max_frame_size = max_frame_size
    client = Client(
        stream,
        heartbeat_tolerance=heartbeat_tolerance,
        disconnect_timeout=disconnect_timeout,
        parser=parser,
    )
    try:
        with trio.fail_after(connect_timeout):
            await client._handshake(
                login=login, passcode=passcode, host=host, heartbeat=heartbeat, versions=versions
            )
    except trio.TooSlowError:
        await trio.aclose_forcefully(stream)
        raise ConnectFailed(f"no CONNECTED from the broker within {connect_timeout} s") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        await trio.aclose_forcefully(stream)
        raise ConnectFailed(f"the connection failed during CONNECT: {exc!r}") from exc
    except RemoteProtocolError as exc:
        await trio.aclose_forcefully(stream)
        raise ConnectFailed(f"the broker's reply to CONNECT is not valid STOMP: {exc}") from exc
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise

    sole: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._run_tasks)
            try:
                with trio.CancelScope() as client._body_scope:
                    yield client
            finally:
                await client._shutdown()
    except BaseExceptionGroup as group:
        sole = _sole_exception(group)
        if sole is None:
            raise
    if sole is not None:
        raise sole
    if client._error is not None and not client._disconnected:
        raise client._error


@asynccontextmanager
async def connect(
    url: str | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    login: str | None = None,
    passcode: str | None = None,
    vhost: str | None = None,
    heartbeat: tuple[int, int] = (10_000, 10_000),
    versions: Sequence[str] = VERSIONS,
    heartbeat_tolerance: float = 2.0,
    connect_timeout: float = 10.0,
    disconnect_timeout: float = 5.0,
    lenient: bool = False,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[Client]:
    """Connect to a STOMP broker for the duration of an ``async with`` block.

    ::

        async with trio_stomp.connect("stomp://guest:guest@127.0.0.1:61613/?vhost=/") as c:
            await c.send("/queue/a", b"hello", receipt=True)

    Keyword arguments override what the URL says.

    Args:
      url: ``stomp://[login[:passcode]@]host[:port][/?vhost=NAME]``.
      host, port: the broker's address (default 127.0.0.1:61613).
      login, passcode: credentials for CONNECT.
      vhost: the CONNECT ``host`` header; RabbitMQ takes it as the virtual
        host ("/"). Defaults to "/".
      heartbeat: ``(cx, cy)`` in ms: how often we can send heart-beats and
        how often we want them; 0 turns a direction off.
      versions: the STOMP versions we accept.
      heartbeat_tolerance: the broker is declared dead when nothing arrives
        for this many of its heart-beat intervals.
      connect_timeout: bound on TCP connect plus the CONNECT handshake, s.
      disconnect_timeout: bound on each cleanup on the wire (UNSUBSCRIBE,
        ABORT, DISCONNECT and its receipt), s.
      lenient: accept undefined escapes and raw colons in 1.2 headers.
      ssl_context: the TLS settings for ``stomp+ssl://`` and ``wss://``.

    Leaving the block sends DISCONNECT and waits (bounded) for its receipt, so
    everything sent before has reached the broker; then the socket is closed.
    Every task of the connection ends within the block.

    Raises:
      ConnectFailed: refused, timed out, bad credentials, no common version.
      ServerError: the broker sent ERROR during the session.
      ConnectionLost: the connection broke (including missed heart-beats), or
        the DISCONNECT receipt did not come.
    """
    endpoint = Endpoint.from_url(url) if url is not None else Endpoint()
    host = host if host is not None else endpoint.host
    port = port if port is not None else endpoint.port
    login = login if login is not None else endpoint.login
    passcode = passcode if passcode is not None else endpoint.passcode
    vhost = vhost if vhost is not None else (endpoint.vhost or "/")
    endpoint = attrs.evolve(endpoint, host=host, port=port)
    try:
        with trio.fail_after(connect_timeout):
            stream = await open_stream(endpoint, ssl_context=ssl_context)
    except trio.TooSlowError:
        raise ConnectFailed(f"connecting to {host}:{port} timed out") from None
    async with wrap_stream(
        stream,
        login=login,
        passcode=passcode,
        host=vhost,
        heartbeat=heartbeat,
        versions=versions,
        heartbeat_tolerance=heartbeat_tolerance,
        connect_timeout=connect_timeout,
        disconnect_timeout=disconnect_timeout,
        lenient=lenient,
    ) as client:
        yield client
