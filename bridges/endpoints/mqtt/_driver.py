"""paho-mqtt driven by Trio: the library speaks MQTT, Trio tasks move its bytes.

paho-mqtt 2.x has an "external event loop" API (``loop_read``,
``loop_write``, ``loop_misc``, ``want_write`` and the socket-register
callbacks) for running its client inside someone else's loop. Here that loop
is Trio: one task waits until the socket is readable and calls
``loop_read`` (paho parses packets and calls our callbacks, synchronously, in
that task), one writes whatever paho has queued when it says it wants to,
one calls ``loop_misc`` for keep-alive. They live in a nursery inside
:func:`open_paho`'s ``async with``, so nothing outlives the endpoint.

Why this and not paho's own thread (``loop_start``) bridged with
``trio.from_thread``, or aiomqtt through trio-asyncio: every callback runs in
the Trio thread, so handing a message to the route costs a deque append (no
cross-thread call per message, no lock), acks (``Client.ack`` with
``manual_ack=True``) are plain calls, and shutdown is a cancel scope; there is
no thread to join and no foreign loop to stop. The only blocking call is
paho's ``connect`` (TCP connect, TLS handshake, CONNECT sent): it runs in
``trio.to_thread.run_sync`` bounded by ``connect_timeout`` and is never
abandoned, so that thread too ends inside the ``async with``. The host name
is resolved by Trio first, so an unknown host fails fast and cancellably.
bench/speed/mqtt_throughput.py measures this driver against paho's own thread.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from typing import Any, Final

import paho.mqtt.client as paho
import trio
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from ._connection import Broker, MqttConnection, MqttError

#: Bound on DISCONNECT reaching the broker when an endpoint closes, s.
_GOODBYE_TIMEOUT: Final = 2.0
#: Seconds between paho's housekeeping calls (keep-alive PINGREQ, its timeout).
_MISC_INTERVAL: Final = 1.0
#: Linux's TCP_CORK (None elsewhere: there, TCP_NODELAY alone).
_TCP_CORK: Final[int | None] = getattr(socket, "TCP_CORK", None)
#: loop_read calls per socket wakeup at most (then other tasks get a turn).
_READS_PER_WAKEUP: Final = 256

OnMessage = Callable[[paho.MQTTMessage], None]


class PahoDriver:
    """One paho client served by Trio tasks; use :func:`open_paho` to get one.

    Attributes:
      client: the paho client (publish, subscribe and ack through it; its
        packets go out on the next pass of the writer task).
      broker: where it is connected.
      max_packet: the broker's Maximum Packet Size (MQTT 5 CONNACK), or None.
      receive_maximum: the broker's Receive Maximum (MQTT 5 CONNACK; 65,535
        when it sets none): publishers keep fewer unconfirmed than this,
        because paho cannot change its own limit once connected.
    """

    def __init__(self, client: paho.Client, broker: Broker, on_message: OnMessage | None) -> None:
        self.client = client
        self.broker = broker
        self.max_packet: int | None = None
        #: QoS 1/2 publishes the broker takes unconfirmed at once (MQTT 5 CONNACK).
        self.receive_maximum = 65535
        self._on_message = on_message
        self._connack = trio.Event()
        self._connack_reason: ReasonCode | None = None
        self._write_wanted = trio.Event()
        self._lost: str | None = None
        self._broken = trio.Event()
        #: Why the connection broke, once it has: every later call raises it.
        self.error: MqttError | None = None
        #: Called once when the connection breaks (a source wakes its receive()).
        self.on_broken: list[Callable[[], object]] = []
        #: mid -> reason code (None until the PUBACK/PUBCOMP arrives).
        self._confirms: dict[int, ReasonCode | None] = {}
        self._unconfirmed = 0
        self._confirmed = trio.Event()
        self._subacks: dict[int, list[ReasonCode] | None] = {}
        self._suback = trio.Event()
        #: Set while the reader may read; a source replaces it with a fresh
        #: Event to pause reading when its inbox is full (TCP backpressure).
        self.reading = trio.Event()
        self.reading.set()
        #: Packets handled (messages, confirmations, SUBACKs), for the reader's loop.
        self.packets = 0

    # -- paho's callbacks (called synchronously from loop_read / loop_write) ----

    def _install(self) -> None:
        client = self.client
        client.on_connect = self._cb_connect
        client.on_disconnect = self._cb_disconnect
        client.on_publish = self._cb_publish
        client.on_subscribe = self._cb_subscribe
        if self._on_message is not None:
            client.on_message = self._cb_message
        client.on_socket_register_write = self._cb_register_write
        client.on_socket_unregister_write = self._cb_unregister_write
        client.on_socket_close = self._cb_socket_close

    def _cb_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode, props: Any
    ) -> None:
        self._connack_reason = reason
        if reason.is_failure:
            self._lost = f"the broker refused the connection: {reason}"
        if props is not None and hasattr(props, "MaximumPacketSize"):
            self.max_packet = int(props.MaximumPacketSize)
        if props is not None and hasattr(props, "ReceiveMaximum"):
            self.receive_maximum = int(props.ReceiveMaximum)
        self._connack.set()

    def _cb_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode, props: Any
    ) -> None:
        if self._lost is None:
            by_server = getattr(flags, "is_disconnect_packet_from_server", False)
            self._lost = f"the broker disconnected us ({reason})" if by_server else str(reason)
        self._break(self._failed(MQTTErrorCode.MQTT_ERR_CONN_LOST))

    def _cb_publish(
        self, client: paho.Client, userdata: Any, mid: int, reason: ReasonCode, props: Any
    ) -> None:
        self.packets += 1
        if mid in self._confirms and self._confirms[mid] is None:
            self._confirms[mid] = reason
            self._unconfirmed -= 1
            if self._unconfirmed == 0:
                self._confirmed.set()

    def _cb_subscribe(
        self, client: paho.Client, userdata: Any, mid: int, reasons: list[ReasonCode], props: Any
    ) -> None:
        self.packets += 1
        self._subacks[mid] = list(reasons)
        self._suback.set()

    def _cb_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        assert self._on_message is not None
        self.packets += 1
        self._on_message(message)

    def _cb_register_write(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        self._write_wanted.set()

    def _cb_unregister_write(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        pass

    def _cb_socket_close(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        # paho closes its socket itself (a read error, a missed keep-alive, DISCONNECT
        # written): tell Trio first, so that a task waiting on it wakes instead of
        # waiting on a closed descriptor.
        if isinstance(sock, socket.socket) and sock.fileno() >= 0:
            trio.lowlevel.notify_closing(sock)

    # -- the tasks ---------------------------------------------------------------
    #
    # A broken connection does not cancel anything: the tasks record why and end,
    # and the error is raised by the next call that needs the connection (so a
    # batch whose confirmations all arrived just before the broker hung up still
    # counts as written, and an idle endpoint fails when it is next used).

    def _break(self, error: MqttError) -> None:
        if self.error is not None:
            return
        self.error = error
        self._broken.set()
        self._confirmed.set()
        self._suback.set()
        self._connack.set()
        for callback in self.on_broken:
            callback()

    def check(self) -> None:
        """Raise why the connection broke, if it has."""
        if self.error is not None:
            raise self.error

    def _failed(self, rc: MQTTErrorCode | int) -> MqttError:
        if self._lost is not None and self._lost.startswith("the broker refused"):
            return MqttError(f"mqtt {self.broker.where}: {self._lost}")
        why = self._lost or paho.error_string(rc)
        return MqttError(f"mqtt {self.broker.where}: connection lost: {why}")

    async def _read(self, sock: socket.socket) -> None:
        client = self.client
        pending = sock.pending if isinstance(sock, ssl.SSLSocket) else None
        block = True
        while True:
            await self.reading.wait()
            try:
                if block:
                    await trio.lowlevel.wait_readable(sock)
                else:
                    await trio.lowlevel.checkpoint()
            except trio.ClosedResourceError:
                self._break(self._failed(MQTTErrorCode.MQTT_ERR_CONN_LOST))
                return
            # loop_read handles one packet per call (QoS 1); go on while packets come
            # (each handled one bumps ``packets``), so a burst costs one wakeup.
            handled = 0
            for _ in range(_READS_PER_WAKEUP):
                before = self.packets
                rc = client.loop_read()
                if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or client.socket() is None:
                    self._break(self._failed(rc))
                    return
                if self.packets == before and not (pending is not None and pending()):
                    break
                handled += 1
                if not self.reading.is_set():
                    break
            # After a burst, let the other tasks run and look again without waiting on
            # the socket: a broker sending a packet per segment (each PUBACK frees a
            # slot of the window) has usually sent more by then, and a wakeup per
            # packet would cost more than paho's parsing of it.
            block = handled == 0

    async def _write(self, sock: socket.socket) -> None:
        client = self.client
        # paho sends each packet with a send() of its own: corked, a burst (a batch's
        # PUBLISHes, a batch's PUBACKs) leaves in full segments, and at once when
        # uncorked (TCP_NODELAY is set), never held back for the peer's delayed ACK.
        cork = _TCP_CORK if sock.family in (socket.AF_INET, socket.AF_INET6) else None
        while True:
            await self._write_wanted.wait()
            self._write_wanted = trio.Event()
            while client.want_write() and self.error is None:
                if cork is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, cork, 1)
                rc = client.loop_write()
                if cork is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, cork, 0)
                if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or client.socket() is None:
                    self._break(self._failed(rc))
                    return
                if client.want_write():
                    try:
                        await trio.lowlevel.wait_writable(sock)
                    except trio.ClosedResourceError:
                        self._break(self._failed(MQTTErrorCode.MQTT_ERR_CONN_LOST))
                        return

    async def _misc(self) -> None:
        while True:
            await trio.sleep(_MISC_INTERVAL)
            if self.error is not None:
                return
            rc = self.client.loop_misc()
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or self.client.socket() is None:
                self._lost = self._lost or "no answer to the keep-alive ping"
                self._break(self._failed(rc))
                return

    # -- what endpoints call -----------------------------------------------------

    def kick(self) -> None:
        """Make the writer look at paho's queue (after calls made outside a callback)."""
        self._write_wanted.set()

    async def subscribe(self, topics: Sequence[tuple[str, Any]]) -> None:
        """Subscribe and wait for the SUBACK; a refused filter is an :class:`MqttError`."""
        self.check()
        rc, mid = self.client.subscribe(list(topics))
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS or mid is None:
            raise self._failed(rc)
        self._subacks[mid] = None
        self.kick()
        while self._subacks.get(mid) is None:
            self.check()
            self._suback = trio.Event()
            await self._suback.wait()
        reasons = self._subacks.pop(mid) or []
        for (topic, _), reason in zip(topics, reasons, strict=False):
            if reason.is_failure:
                raise MqttError(
                    f"mqtt {self.broker.where}: the broker refused the subscription "
                    f"to {topic!r} ({reason})"
                )

    def publish(
        self, topic: str, payload: bytes, qos: int, retain: bool, properties: Properties | None
    ) -> int:
        """Queue one PUBLISH; :meth:`confirm` waits for it. Returns its mid."""
        self.check()
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            if info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN:
                raise self._failed(info.rc)
            raise ValueError(paho.error_string(info.rc))
        self._confirms[info.mid] = None
        self._unconfirmed += 1
        return info.mid

    async def confirm(self, mids: Sequence[int]) -> list[ReasonCode]:
        """Wait for the PUBACK (QoS 1) / PUBCOMP (QoS 2) / write (QoS 0) of every mid."""
        self.kick()
        while self._unconfirmed:
            if self.error is not None:
                if all(self._confirms.get(mid) is not None for mid in mids):
                    break  # all in before the connection broke: written
                self.abandon()
                raise self.error
            self._confirmed = trio.Event()
            await self._confirmed.wait()
        reasons = [self._confirms.pop(mid) for mid in mids]
        return [r if r is not None else ReasonCode(PacketTypes.PUBACK) for r in reasons]

    def abandon(self) -> None:
        """Forget unconfirmed publishes (a write that was cancelled)."""
        self._confirms.clear()
        self._unconfirmed = 0

    async def _goodbye(self) -> None:
        """DISCONNECT, written out, and the broker's close awaited (bounded by the caller).

        paho closes its socket as soon as DISCONNECT is written; a duplicate of
        the descriptor lets us wait for the broker to close its end, which it
        does only after it handled everything sent before (our last PUBACKs).
        Without that wait a reconnect under the same client id could take the
        session over before the broker read those acks, and get the messages
        again.
        """
        client = self.client
        sock = client.socket()
        if not isinstance(sock, socket.socket) or self.error is not None:
            return
        watch = socket.socket(fileno=os.dup(sock.fileno()))
        try:
            client.disconnect()
            with contextlib.suppress(trio.ClosedResourceError):
                while client.want_write() and client.socket() is not None:
                    client.loop_write()
                    if client.want_write() and client.socket() is not None:
                        await trio.lowlevel.wait_writable(sock)
            watch.setblocking(False)
            while True:
                await trio.lowlevel.wait_readable(watch)
                try:
                    if not watch.recv(65536):
                        return
                except BlockingIOError:
                    continue
                except OSError:
                    return
        finally:
            trio.lowlevel.notify_closing(watch)
            watch.close()


def _resolve_error(broker: Broker, exc: OSError) -> MqttError:
    return MqttError(f"mqtt {broker.where}: cannot resolve {broker.host!r}: {exc}")


async def _connect(
    client: paho.Client, broker: Broker, config: MqttConnection, clean_start: bool, props: Any
) -> None:
    try:
        await trio.socket.getaddrinfo(broker.host, broker.port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise _resolve_error(broker, exc) from None
    kwargs: dict[str, Any] = {"keepalive": config.keepalive}
    if config.protocol == 5:
        kwargs["clean_start"] = clean_start
        kwargs["properties"] = props
    try:
        # Bounded by connect_timeout (paho's socket timeout), never abandoned.
        await trio.to_thread.run_sync(partial(client.connect, broker.host, broker.port, **kwargs))
    except ssl.SSLError as exc:
        raise MqttError(f"mqtt {broker.where}: TLS failed: {exc}") from None
    except OSError as exc:
        raise MqttError(f"mqtt {broker.where}: cannot connect: {exc}") from None


def new_client(
    config: MqttConnection,
    broker: Broker,
    client_id: str,
    *,
    clean_start: bool,
    ssl_context: ssl.SSLContext | None,
) -> paho.Client:
    """A paho client (not connected): manual acks, no automatic reconnect."""
    v5 = config.protocol == 5
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
        clean_session=None if v5 else clean_start,
        manual_ack=True,
        reconnect_on_failure=False,
    )
    client.connect_timeout = config.connect_timeout
    client.max_queued_messages_set(0)
    client.max_inflight_messages_set(0)  # no limit of paho's: the sink keeps its own
    if broker.username is not None:
        client.username_pw_set(broker.username, broker.password)
    if ssl_context is not None:
        client.tls_set_context(ssl_context)
    return client


@contextlib.asynccontextmanager
async def open_paho(
    config: MqttConnection,
    broker: Broker,
    client_id: str,
    *,
    clean_start: bool,
    ssl_context: ssl.SSLContext | None,
    properties: Properties | None = None,
    on_message: OnMessage | None = None,
) -> AsyncIterator[PahoDriver]:
    """Connect (CONNACK accepted) and serve the connection until the block ends.

    Leaving the block sends DISCONNECT (shielded, bounded) unless the
    connection is already broken; a persistent session stays on the broker.

    Raises:
      MqttError: cannot resolve, connect, or the broker refused the CONNECT;
        the connection broke (raised at the ``async with``).
    """
    client = new_client(config, broker, client_id, clean_start=clean_start, ssl_context=ssl_context)
    driver = PahoDriver(client, broker, on_message)
    try:
        await _connect(client, broker, config, clean_start, properties)
        sock = client.socket()
        if not isinstance(sock, socket.socket):
            raise MqttError(f"mqtt {broker.where}: no socket after connect")
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            # paho writes a packet per send(): without this, a batch's last PUBLISH
            # (or PUBACK) can wait for the peer's delayed ACK (40 ms on Linux).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        driver._install()  # noqa: SLF001 (the driver's own module)
        driver.kick()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(driver._read, sock)  # noqa: SLF001
                nursery.start_soon(driver._write, sock)  # noqa: SLF001
                nursery.start_soon(driver._misc)  # noqa: SLF001
                await _await_connack(driver, config)
                try:
                    yield driver
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_GOODBYE_TIMEOUT):
                await driver._goodbye()  # noqa: SLF001
    except BaseExceptionGroup as group:
        leaf = _first_error(group)
        if leaf is not None:
            raise leaf from None
        raise
    finally:
        _close(client)


async def _await_connack(driver: PahoDriver, config: MqttConnection) -> None:
    where = driver.broker.where
    with trio.move_on_after(config.connect_timeout) as scope:
        await driver._connack.wait()  # noqa: SLF001
    if scope.cancelled_caught:
        raise MqttError(f"mqtt {where}: no CONNACK within {config.connect_timeout} s")
    driver.check()
    reason = driver._connack_reason  # noqa: SLF001
    if reason is not None and reason.is_failure:
        raise MqttError(f"mqtt {where}: the broker refused the connection: {reason}")


def _close(client: paho.Client) -> None:
    sock = client.socket()
    if isinstance(sock, socket.socket) and sock.fileno() >= 0:
        trio.lowlevel.notify_closing(sock)
        sock.close()


def _first_error(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    """The error to raise for ``group``: its first leaf when every leaf is an Exception
    (the reader and the body often fail with the same cause at once), else None."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            pending[:0] = exc.exceptions
        else:
            leaves.append(exc)
    errors = [leaf for leaf in leaves if isinstance(leaf, Exception)]
    if leaves and len(errors) == len(leaves):
        return errors[0]
    return None
