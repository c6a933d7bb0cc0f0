"""One client connection's STOMP session, sans-IO: bytes in, bytes out.

A :class:`Session` parses what the client sends, acts on the shared
:class:`~trio_stomp.broker._destinations.Router`, and queues encoded frames
for the client. It never does I/O and never reads a clock: the Trio edge
(:mod:`trio_stomp.broker._connection`) feeds it bytes, takes its output,
runs the heart-beat timers and tells it when the socket is gone.

The edge learns what to do through :class:`SessionEvents`: ``wake`` when
there is output (or the session wants to close), ``abort`` when the session
must be dropped at once (its client stopped reading).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Final, Protocol

from .._version import version as package_version
from ..frame import (
    Frame,
    FrameParser,
    LocalProtocolError,
    Version,
    encode,
)
from ._budget import Budget
from ._config import Limits
from ._dedup import Duplicates
from ._destinations import Router, Subscription
from ._durable import CLIENT_ID_HEADER, NAME_HEADER, DurableSubscriptions, durable_name
from ._intake import UNBOUNDED, Intake
from ._message import Message
from ._negotiation import (
    SUPPORTED,
    agree_heartbeats,
    check_credentials,
    choose_version,
    encode_message,
)
from ._subscribe import subscribe_options
from ._temporary import TemporaryQueues
from ._transactions import ClientError, Transactions
from ._unacked import Unacked
from ._wire import delivery

#: The product in CONNECTED's ``server`` header, followed by ``/VERSION``.
SERVER: Final = "trio-stomp"


class SessionEvents(Protocol):
    """What a session asks of the I/O edge that runs it."""

    def wake(self) -> None:
        """There is output to take, or the session is closing."""

    def abort(self) -> None:
        """Drop the connection now, without flushing (the client is not reading)."""


Handler = Callable[["Session", Frame, bool], None]


class Session:
    """The broker side of one STOMP connection.

    Args:
      router: the broker's destinations.
      events: how to reach the edge running this session.
      session_id: the ``session`` header of CONNECTED.
      users: login -> passcode, or None to accept any login.
      limits: the broker's limits.
      budget: shared by the broker's sessions: the bound on incomplete frames
        across them (a session of its own when None).
      duplicates: the broker's window of accepted ``bridge-id`` values (see
        :mod:`._dedup`); None: every SEND is accepted (a window that is off).

    Lifecycle: :meth:`receive_data` until :attr:`closing` (ERROR sent, or
    DISCONNECT); the edge then flushes :meth:`take_output` and closes, and
    calls :meth:`connection_lost` in every case (also when the socket broke),
    which gives back what the session held: unacknowledged messages return to
    their queues and open transactions are dropped.
    """

    def __init__(
        self,
        router: Router[DurableSubscriptions],
        events: SessionEvents,
        *,
        session_id: str,
        users: Mapping[str, str] | None = None,
        limits: Limits | None = None,
        budget: Budget | None = None,
        duplicates: Duplicates | None = None,
    ) -> None:
        self.router = router
        self.events = events
        self.session_id = session_id
        self.users = users
        self.limits = limits = limits if limits is not None else Limits()
        self.budget = budget if budget is not None else Budget(limits.max_buffered_bytes)
        self.duplicates = duplicates if duplicates is not None else Duplicates(0, 0)
        self.meter = router.meter
        self._intake = Intake()
        self.parser = FrameParser(  # (until CONNECT succeeds, only a small frame)
            max_frame_size=min(limits.max_frame_size, limits.max_preconnect_frame),
            max_header_count=limits.max_header_count,
            max_header_length=limits.max_header_length,
        )
        #: The negotiated version; None until CONNECT succeeds.
        self.version: Version | None = None
        #: True once ERROR or DISCONNECT ended the session (output may remain).
        self.closing = False
        #: Why the session ended, for logs; None while it runs.
        self.close_reason: str | None = None
        #: True when the edge must drop the connection without flushing.
        self.aborted = False
        #: The largest frame (or topic backlog entry) queued for the client, bytes.
        self._largest_frame = 0
        self._max_outbound = limits.max_outbound_bytes
        #: Heart-beat intervals agreed at CONNECT, in ms (0: none).
        self.heartbeat_send_ms = 0
        self.heartbeat_receive_ms = 0
        self.subscriptions: dict[str, Subscription] = {}
        #: The CONNECT's ``client-id``, which this session holds (see :mod:`._durable`).
        self.client_id: str | None = None
        self.temporary = TemporaryQueues(router, self, limits.max_subscriptions)
        self._unacked = Unacked(router)
        self._transactions = Transactions(limits)
        self._out: list[bytes] = []
        self._pending_bytes = 0  # queued plus taken and not yet sent
        self._backlog_bytes = 0  # waiting in this session's private (topic) queues
        self._detached = False
        # Durable store: the commit that makes this session's last queue SEND
        # durable, and RECEIPTs held until their commit (ticket, id, disconnect).
        self._ticket = 0
        self._held: deque[tuple[int, str, bool]] = deque()

    # -- input -----------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True once CONNECT succeeded (and stays so while closing)."""
        return self.version is not None

    def receive_data(
        self,
        data: bytes | bytearray,
        *,
        max_frames: int = UNBOUNDED,
        max_work: int = UNBOUNDED,
    ) -> bool:
        """Parse and act on ``data``, bytes as they came from the client.

        Bytes that are not valid STOMP end the session with an ERROR.
        Nothing here raises because of what the client sent.

        Args:
          max_frames: act on at most this many frames now (a turn: see
            :mod:`._intake`); the rest wait for :meth:`receive_more`.
          max_work: nor on any more frame once the turn's selector
            evaluations have spent this many work units.

        Returns:
          True when frames of ``data`` wait for :meth:`receive_more` (which
          the edge calls, after a checkpoint, before it reads again).
        """
        if not data:
            return False
        if not isinstance(data, bytes):
            data = bytes(data)
        return self._receive(data, max_frames, max_work)

    def receive_more(self, *, max_frames: int = UNBOUNDED, max_work: int = UNBOUNDED) -> bool:
        """Act on the frames the last :meth:`receive_data` left, for one more turn;
        True while some still wait."""
        return self._receive(None, max_frames, max_work)

    def malformed(self, detail: str) -> None:
        """The client's bytes are not STOMP (``detail`` says how): ERROR, and the end."""
        self._error("malformed frame", detail)

    def _receive(self, data: bytes | None, max_frames: int, max_work: int) -> bool:
        more = self._intake.act(self, data, max_frames, max_work)
        if self._detached:
            return False  # (a DISCONNECT gave everything back, the budget's share too)
        if not self.budget.hold(self, self.parser.buffered) and not self.closing:
            self._error("too much buffered", self.budget.exceeded)
        return more and not self.closing

    def receive_eof(self) -> None:
        """The client closed its side: the session ends without output."""
        self._close("the client closed the connection")

    def handle_frame(self, frame: Frame) -> None:
        """Act on one client frame (receive_data calls this for each)."""
        if self.closing or (self._held and self._held[-1][2]):
            return  # (after a DISCONNECT whose RECEIPT waits for the store, nothing)
        receipt = frame.headers.get("receipt")
        try:
            if self.version is None:
                if frame.command not in ("CONNECT", "STOMP"):
                    raise ClientError("expected CONNECT", f"got {frame.command} before CONNECT")
                self._on_connect(frame)
                return
            handler = self._HANDLERS.get(frame.command)
            if handler is None:
                raise ClientError(f"unexpected {frame.command} frame")
            handler(self, frame, False)
        except ClientError as exc:
            self._error(exc.message, exc.detail, receipt)
            return
        if receipt is not None:
            self._receipt(receipt, disconnect=frame.command == "DISCONNECT")

    def _receipt(self, receipt: str, *, disconnect: bool) -> None:
        # A RECEIPT waits until every queue message this session sent before
        # it is on disk, and RECEIPTs keep their order.
        store = self.router.store
        if store is not None and (self._held or store.durable < self._ticket):
            self._held.append((self._ticket, receipt, disconnect))
            store.watch(self)
            return
        self._emit_frame(Frame("RECEIPT", {"receipt-id": receipt}))
        if disconnect:
            self._disconnected()

    def durable(self, batch: int) -> bool:
        """The store's commits up to ``batch`` are on disk: send the RECEIPTs they held.

        Returns:
          True while RECEIPTs are still held (the store calls again).
        """
        held = self._held
        while held and held[0][0] <= batch and not self.closing:
            _, receipt, disconnect = held.popleft()
            self._emit_frame(Frame("RECEIPT", {"receipt-id": receipt}))
            if disconnect:
                self._disconnected()
        return bool(held) and not self.closing

    # -- frames ----------------------------------------------------------------

    def _on_connect(self, frame: Frame) -> None:
        headers = frame.headers
        version = choose_version(headers.get("accept-version"))
        if version is None:
            self._error(
                "no common STOMP version",
                f"the client accepts {headers.get('accept-version')!r}; "
                f"this broker speaks {', '.join(SUPPORTED)}",
                extra={"version": ",".join(SUPPORTED)},
            )
            return
        heartbeats = agree_heartbeats(headers.get("heart-beat"), self.limits.min_heartbeat_ms)
        if not check_credentials(self.users, headers.get("login"), headers.get("passcode")):
            raise ClientError("access refused", "the login or passcode is not valid")
        self._claim_client_id(headers.get(CLIENT_ID_HEADER))
        self.version = version
        self.parser.version = version
        self.parser.max_frame_size = self.limits.max_frame_size
        self.heartbeat_send_ms = heartbeats.send_ms
        self.heartbeat_receive_ms = heartbeats.receive_ms
        sx, sy = heartbeats.header
        server = f"{SERVER}/{package_version()}"
        connected = {"version": version, "server": server, "session": self.session_id}
        self._emit_frame(Frame("CONNECTED", {**connected, "heart-beat": f"{sx},{sy}"}))

    def _claim_client_id(self, client_id: str | None) -> None:
        durables = self.router.durables
        if not client_id or durables is None:
            return
        if not durables.claim(client_id, self):
            raise ClientError(
                "client-id in use", f"client-id {client_id!r} is held by another connection"
            )
        self.client_id = client_id

    def _on_send(self, frame: Frame, committing: bool) -> None:
        headers = frame.headers
        destination = headers.get("destination")
        if not destination:
            raise ClientError("SEND without destination")
        if not committing and self._transactions.hold(frame):
            return
        destination, items = self.temporary.rewrite(destination, headers)
        key, seen = self.duplicates.check(destination, headers)
        if seen is not None:  # a repeat: dropped; its RECEIPT once the first is durable
            self._ticket = max(self._ticket, seen)
            return
        ticket = self.router.send(destination, items, frame.body)
        if key is not None:
            self.duplicates.accept(key, ticket)
        if ticket:
            self._ticket = ticket

    def _on_subscribe(self, frame: Frame, committing: bool) -> None:
        headers = frame.headers
        destination = headers.get("destination")
        if not destination:
            raise ClientError("SUBSCRIBE without destination")
        sub_id, ack_mode, window, selector = subscribe_options(
            headers, destination, self.version or "1.2", self.subscriptions, self.limits
        )
        temporary = self.temporary.to_subscribe(destination)
        durable = durable_name(headers, destination)
        sub = Subscription(self, sub_id, destination, ack_mode, window, selector)
        if durable is not None and self.router.durables is not None:
            if selector is not None:
                raise ClientError(
                    "selector on a durable subscription",
                    "a durable subscription takes no selector (not supported yet)",
                )
            ticket = self.router.durables.attach(sub, self.client_id, durable)
            self._ticket = max(self._ticket, ticket)
            self.subscriptions[sub_id] = sub
            return
        self.subscriptions[sub_id] = sub
        if temporary is not None:
            temporary.add(sub)
        else:
            self.router.subscribe(sub)

    def _on_unsubscribe(self, frame: Frame, committing: bool) -> None:
        headers = frame.headers
        durable = headers.get(NAME_HEADER)
        if durable is not None and self.router.durables is not None:
            # Removes the durable subscription (ActiveMQ's way), after ending
            # the connection's subscription ``id`` names, if any.
            sub = self.subscriptions.pop(headers.get("id", ""), None)
            if sub is not None:
                self._unacked.forget(sub)
                self.router.unsubscribe(sub)
            ticket = self.router.durables.remove(self.client_id, durable)
            self._ticket = max(self._ticket, ticket)
            return
        sub_id = headers.get("id")
        if sub_id is None:
            if self.version != "1.0" or "destination" not in headers:
                raise ClientError("UNSUBSCRIBE without id")
            sub_id = self._id_of_destination(headers["destination"])
        sub = self.subscriptions.pop(sub_id, None)
        if sub is None:
            raise ClientError("unknown subscription", f"no subscription {sub_id!r}")
        self._unacked.forget(sub)
        self.router.unsubscribe(sub)

    def _id_of_destination(self, destination: str) -> str:
        for sub_id, sub in self.subscriptions.items():
            if sub.destination == destination:
                return sub_id
        raise ClientError("unknown subscription", f"no subscription to {destination!r}")

    def _on_ack(self, frame: Frame, committing: bool) -> None:
        self._acknowledge(frame, committing, nack=False)

    def _on_nack(self, frame: Frame, committing: bool) -> None:
        self._acknowledge(frame, committing, nack=True)

    def _acknowledge(self, frame: Frame, committing: bool, *, nack: bool) -> None:
        sub, message_id = self._unacked.find(frame, self.version or "1.2", self.subscriptions)
        if not committing and self._transactions.hold(frame):
            return
        self._unacked.settle(sub, message_id, nack=nack)

    def _on_begin(self, frame: Frame, committing: bool) -> None:
        self._transactions.begin(frame)

    def _on_commit(self, frame: Frame, committing: bool) -> None:
        for buffered in self._transactions.end(frame):
            self._HANDLERS[buffered.command](self, buffered, True)

    def _on_abort(self, frame: Frame, committing: bool) -> None:
        self._transactions.end(frame)

    def _on_disconnect(self, frame: Frame, committing: bool) -> None:
        if "receipt" not in frame.headers:
            self._disconnected()
        # else handle_frame sends the RECEIPT first, then closes.

    # -- output ----------------------------------------------------------------

    def can_receive(self) -> bool:
        """True when queue deliveries may go to this session now."""
        return not self.closing and self._pending_bytes < self.limits.outbound_high_water

    def deliver(self, sub: Subscription, message: Message) -> None:
        """Send ``message`` to the client as a MESSAGE of ``sub``.

        Called by the router; records the delivery as pending when the
        subscription acknowledges. A message's MESSAGE frames are put together
        from parts encoded once (see :mod:`._wire`); what has none, and every
        delivery to a 1.0 client, is encoded header by header.
        """
        version = self.version or "1.2"
        ack_id = ""
        if sub.ack_mode != "auto":
            ack_id = self._unacked.record(sub, message, by_ack_id=version == "1.2")
            if version != "1.2":
                ack_id = ""  # (pending, but named by its message-id)
        elif message.key:
            self.router.consumed(message)
        tail = message.tail
        if tail and sub.line and version != "1.0":
            self._emit(
                delivery(message.head, sub.line, ack_id, message.redelivered, tail, message.body)
            )
            return
        headers = [
            ("destination", message.destination),
            ("message-id", message.message_id),
            ("subscription", sub.id),
        ]
        if ack_id:
            headers.append(("ack", ack_id))
        if message.redelivered:
            headers.append(("redelivered", "true"))
        headers.extend(message.headers)
        self._emit(encode_message(headers, message.body, version))

    def take_output(self) -> bytes:
        """Everything queued for the client, as one write (b"" when nothing).

        The bytes count as pending until :meth:`output_sent` says they left.
        """
        out = self._out
        if not out:
            return b""
        self._out = []
        return out[0] if len(out) == 1 else b"".join(out)

    def output_sent(self, size: int) -> None:
        """``size`` bytes from :meth:`take_output` reached the socket."""
        before = self._pending_bytes
        self._pending_bytes = after = before - size
        high_water = self.limits.outbound_high_water
        if before >= high_water > after and not self.closing:
            # Deliveries paused for this session may resume.
            for sub in list(self.subscriptions.values()):
                sub.queue.dispatch()

    def send_heartbeat(self) -> None:
        """Queue a heart-beat, unless something else is already queued."""
        if not self._out and not self.closing:
            self._emit(b"\n")

    def heartbeat_timeout(self) -> None:
        """Nothing arrived from the client in time: ERROR and close."""
        self._error("heart-beat timeout", "nothing arrived from the client in time")

    def connect_timeout(self) -> None:
        """No CONNECT arrived in time: ERROR and close."""
        if self.version is None:
            self._error("CONNECT timeout", "no CONNECT frame arrived in time")

    def shutdown(self) -> None:
        """The broker is stopping: tell the client (ERROR) and close."""
        self._error("broker shutting down", "the broker is stopping")

    def backlog_changed(self, delta: int) -> None:
        """Bytes waiting in this session's private queues changed by ``delta``."""
        before = self._pending_bytes + self._backlog_bytes
        self._backlog_bytes += delta
        if delta > 0 and self._over_bound(before, delta) and not self.aborted:
            self._abort()

    def connection_lost(self) -> None:
        """The connection is gone: give back everything the session held.

        Unacknowledged messages return to their queues, topic subscriptions
        and their backlog are dropped, open transactions are aborted. Safe to
        call more than once.
        """
        self._close("the connection closed")
        self._give_back()
        self._out = []

    def _disconnected(self) -> None:
        """DISCONNECT (its RECEIPT sent, if it asked for one): end the session and
        give back what it held now, its client-id too, as ActiveMQ does, so that
        the client can connect again at once; the socket closes once flushed."""
        self._close("the client disconnected")
        self._give_back()

    def _give_back(self) -> None:
        if self._detached:
            return
        self._detached = True
        self.budget.hold(self, 0)
        if self._held and self.router.store is not None:
            self.router.store.unwatch(self)
            self._held.clear()
        self._transactions.clear()
        subs = list(self.subscriptions.values())
        self.subscriptions.clear()
        self._unacked.clear()
        for sub in subs:
            self.router.unsubscribe(sub)
        self.temporary.release()
        if self.client_id is not None and self.router.durables is not None:
            self.router.durables.release(self.client_id, self)

    # -- internals -------------------------------------------------------------

    def _emit_frame(self, frame: Frame) -> None:
        self._emit(encode(frame, self.version or "1.2"))

    def _emit(self, data: bytes) -> None:
        if self.aborted:
            return
        if self._over_bound(self._pending_bytes + self._backlog_bytes, len(data)):
            self._abort()
            return
        out = self._out
        out.append(data)
        self._pending_bytes += len(data)
        if len(out) == 1:
            self.events.wake()

    def _over_bound(self, waiting: int, size: int) -> bool:
        """True when ``size`` more bytes would show a client that does not read.

        What waits may pass ``max_outbound_bytes`` by the largest frame the
        client was given: a frame the broker accepted can be larger than the
        bound (``max_frame_size`` is), and one still being written must not
        cut a client that keeps up when the next frame (its RECEIPT, a small
        message) is due behind it.
        """
        largest = self._largest_frame
        if size > largest:
            self._largest_frame = largest = size
        return waiting + size > self._max_outbound + largest

    def _abort(self) -> None:
        self.aborted = True
        self._close(
            f"the client is not reading: more than {self.limits.max_outbound_bytes} "
            "bytes wait for it"
        )
        self._out = []
        self.events.abort()

    def _error(
        self,
        message: str,
        detail: str = "",
        receipt: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        if self.closing:
            return
        if self.version in (None, "1.0"):
            # Unescaped headers: keep them to what any parser reads back.
            message = message.replace(":", " -")
        headers = {"message": " ".join(message.split())}
        if receipt is not None:
            headers["receipt-id"] = receipt
        if extra:
            headers.update(extra)
        headers["content-type"] = "text/plain"
        body = (detail or message).encode("utf-8", "replace")
        try:
            self._emit_frame(Frame("ERROR", headers, body))
        except LocalProtocolError:
            self._emit_frame(Frame("ERROR", {"message": "error"}, body))
        self._close(f"ERROR {message}: {detail}" if detail else f"ERROR {message}")

    def _close(self, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        self.close_reason = reason
        if not self.aborted:
            self.events.wake()

    #: The handler of each command after CONNECT.
    _HANDLERS: Final[dict[str, Handler]] = {
        "SEND": _on_send,
        "SUBSCRIBE": _on_subscribe,
        "UNSUBSCRIBE": _on_unsubscribe,
        "ACK": _on_ack,
        "NACK": _on_nack,
        "BEGIN": _on_begin,
        "COMMIT": _on_commit,
        "ABORT": _on_abort,
        "DISCONNECT": _on_disconnect,
    }
