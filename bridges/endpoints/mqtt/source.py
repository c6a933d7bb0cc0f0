"""The ``mqtt`` source: QoS 1 subscriptions in a persistent session, PUBACK only after the sink.

The client connects with a fixed ``client_id`` and ``clean_start = false``
(MQTT 5: with a session expiry; 3.1.1: ``clean session = 0``), so the broker
keeps the session, and with it every QoS 1/2 message not yet acknowledged,
while the bridge is away. paho runs with ``manual_ack=True``: a message's
PUBACK (QoS 1) or PUBCOMP (QoS 2) is sent only when the route acks its
envelope, that is once the sink holds it. A crash or a restart therefore
leaves the unacknowledged messages with the broker, which sends them again
when the session resumes (with DUP set): at least once.

The id: the ``bridge-id`` user property (MQTT 5, set by an ``mqtt`` sink),
stable. MQTT's packet id is not (it is per session and reused), so a message
without one has an empty id (no sink can de-duplicate it) unless
``id_from_payload = true`` gives it ``ROUTE/mqtt-`` and a digest of its topic and
payload: stable across redelivery, but two identical payloads on one topic
are then one message to a de-duplicating sink, which is why it is a choice.
``id_template`` (``"{header:mqtt-topic}:{header:order-id}"``, ``{body_hash}``,
``{id}``: the id above) makes the id from what the publisher keeps the same
instead; see :mod:`bridges.endpoints._id_template`.

MQTT has no negative acknowledgement: a message is only sent again when the
session resumes. A nack with an error therefore makes the next
``receive`` fail, the route reconnects, and the broker redelivers.

The broker's window is the route's ``in_flight``: MQTT 5 announces it as
Receive Maximum; for 3.1.1 it is the broker's own setting (Mosquitto's
``max_inflight_messages``). Messages read but not yet taken wait in an inbox
of at most that size; when it is full the reader stops reading the socket.
"""

from __future__ import annotations

import collections
import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import attrs
import paho.mqtt.client as paho
import trio
from attrs.validators import ge
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from bridges import Context, Envelope, InvalidSetting, Message
from bridges._readfile import checked_cafile

from .._id_template import IdTemplate, id_namespace, id_template_setting
from ._connection import Broker, MqttConnection, MqttError, check_topic
from ._driver import PahoDriver, open_paho

log = logging.getLogger("bridges.mqtt")

_AT_MOST_ONCE: Final = (
    "mqtt source with qos = 0 is AT MOST ONCE: the broker neither keeps nor resends QoS 0 "
    "messages, so a crash or a disconnect loses them (use qos = 1)"
)
#: The MQTT 5 user property (and header) that carries a message's stable id.
ID_PROPERTY: Final = "bridge-id"


@attrs.frozen
class MqttSourceConfig(MqttConnection):
    """Subscribe to MQTT topics (persistent session, PUBACK after the sink).

    Attributes:
      topics: required: the topic filters to subscribe to
        (``["sensors/+/temp"]``).
      clean_start: true starts without the session the broker kept (what
        was published while the bridge was away is dropped).
      session_expiry: how long the broker keeps the session while the
        bridge is away (MQTT 5), s.
      id_from_payload: true: a message without ``bridge-id`` gets an id made
        from its topic and payload (two equal messages become one); false:
        its id is empty.
      id_template: the message id made from its headers and body
        (``{header:mqtt-topic}``, ``{body_hash}``, ``{id}``: the id above) for
        messages without ``bridge-id`` (any MQTT 3.1.1 message); default:
        none.
    """

    topics: list[str] = attrs.field(factory=list)
    clean_start: bool = False
    session_expiry: int = attrs.field(default=7 * 24 * 3600, validator=ge(0))
    id_from_payload: bool = False
    id_template: str | None = None


class MqttSource:
    """Envelopes from MQTT subscriptions."""

    def __init__(self, config: MqttSourceConfig, context: Context) -> None:
        if not config.topics:
            raise InvalidSetting("topics", "give at least one topic filter")
        if config.qos == 2:
            # paho answers a QoS 2 PUBLISH with PUBREC before handing it over, and after a
            # crash the broker resends only PUBREL: the message would be lost.
            raise InvalidSetting(
                "qos", "2 is not at least once for a source (use 1: a crash resends it)"
            )
        for index, topic in enumerate(config.topics):
            problem = check_topic(topic, filter=True)
            if problem is not None:
                raise InvalidSetting(f"topics[{index}]", problem)
        self._config = config
        self._context = context
        self._namespace = id_namespace(context.route)
        self._broker = Broker.from_config(config)
        checked_cafile("ca_file", config.ca_file, context)
        self._client_id = config.client_id or f"bridge-{context.route}"
        self._id_template = id_template_setting(config.id_template)
        if config.qos == 0 and not context.checking:
            log.warning("route %r: %s", context.route, _AT_MOST_ONCE)

    def check_warnings(self) -> list[str]:
        """What ``bridges check`` should say: settings under which messages can be lost."""
        config = self._config
        warnings = [_AT_MOST_ONCE] if config.qos == 0 else []
        if config.clean_start or (config.protocol == 5 and config.session_expiry == 0):
            warnings.append(
                "mqtt source without a persistent session (clean_start = true or "
                "session_expiry = 0): what is published while the bridge is away, and what "
                "it had not acked, is lost"
            )
        return warnings

    @classmethod
    def build(cls, config: MqttSourceConfig, context: Context) -> MqttSource:
        """The registry's constructor (connects to nothing)."""
        return cls(config, context)

    def describe(self) -> str:
        """``mqtt TOPICS (qos N) on URL``."""
        topics = ", ".join(self._config.topics)
        return f"mqtt {topics} (qos {self._config.qos}) on {self._broker.where}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_MqttReceiver]:
        """Connect (resuming the session), subscribe, and hand out what arrives."""
        config = self._config
        window = min(self._context.in_flight, 65535)
        receiver = _MqttReceiver(
            self._broker.where, window, config.protocol == 5, id_from_payload=config.id_from_payload
        )
        receiver.id_template = self._id_template
        receiver.namespace = self._namespace
        properties = None
        if config.protocol == 5:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]  # paho is untyped here
            properties.SessionExpiryInterval = config.session_expiry
            properties.ReceiveMaximum = window
            properties.MaximumPacketSize = config.max_bytes
        async with open_paho(
            config,
            self._broker,
            self._client_id,
            clean_start=config.clean_start,
            ssl_context=await self._broker.ssl_context(config, self._context),
            properties=properties,
            on_message=receiver.arrived,
        ) as driver:
            receiver.driver = driver
            driver.on_broken.append(receiver.wake)
            if config.protocol == 5:
                # retainHandling 1: retained messages only for a new subscription, not
                # again each time the session resumes.
                options = [
                    (topic, SubscribeOptions(qos=config.qos, retainHandling=1))
                    for topic in config.topics
                ]
                await driver.subscribe(options)
            else:
                await driver.subscribe([(topic, config.qos) for topic in config.topics])
            receiver.subscribed = True
            yield receiver


async def _unused_ack() -> None:
    raise AssertionError("an _MqttEnvelope settles through its receiver")


async def _unused_nack(error: BaseException | None) -> None:
    raise AssertionError("an _MqttEnvelope settles through its receiver")


class _MqttEnvelope(Envelope):
    """An envelope settled through its receiver: no closure per message in flight."""

    __slots__ = ("_mid", "_qos", "_receiver")

    def __init__(self, message: Message, receiver: _MqttReceiver, mid: int, qos: int) -> None:
        origin = "mqtt " + message.headers["mqtt-topic"]
        super().__init__(message, ack=_unused_ack, nack=_unused_nack, origin=origin)
        self._receiver = receiver
        self._mid = mid
        self._qos = qos

    async def ack(self) -> None:
        if self.state == "open":
            self.state = "acked"
            self._receiver.acked(self._mid, self._qos)

    async def nack(self, error: BaseException | None = None) -> None:
        if self.state == "open":
            self.state = "nacked"
            self._receiver.nacked(error)


class _MqttReceiver:
    """Messages as paho's callback delivered them, handed out in order."""

    def __init__(self, where: str, window: int, v5: bool, *, id_from_payload: bool) -> None:
        self.driver: PahoDriver | None = None
        self._where = where
        self._window = window
        self._v5 = v5
        self._id_from_payload = id_from_payload
        #: Makes each message's id, when the config gives one.
        self.id_template: IdTemplate | None = None
        #: The namespace of the ids this source makes (its route): :func:`id_namespace`.
        self.namespace = ""
        #: (message, packet id, QoS): converted on arrival, so that paho's objects
        #: (properties, locks) do not live on while a message is in flight: with a
        #: window of them alive, the garbage collector's passes cost more than the
        #: rest of the route together.
        self._inbox: collections.deque[tuple[Message, int, int]] = collections.deque()
        self._more = trio.Event()
        self._nacked = 0
        #: Reading pauses for a full inbox only once subscribed: a resumed session's
        #: messages may fill it before the SUBACK arrives behind them.
        self.subscribed = False

    def arrived(self, message: paho.MQTTMessage) -> None:
        """paho's on_message (in the reader task): keep it; pause reading when full."""
        self._inbox.append((self._convert(message), message.mid, message.qos))
        self._more.set()
        if len(self._inbox) >= self._window and self.subscribed and self.driver is not None:
            self.driver.reading = trio.Event()

    def wake(self) -> None:
        """Make a waiting :meth:`receive` look again (the connection broke)."""
        self._more.set()

    async def receive(self) -> Envelope:
        """The next message; cancel-safe (nothing is taken until it is returned)."""
        driver = self.driver
        assert driver is not None
        while not self._inbox:
            driver.check()
            self._check_nacks()
            if self._more.is_set():
                self._more = trio.Event()
            await self._more.wait()
        driver.check()  # (the broker redelivers what the inbox holds)
        self._check_nacks()
        message, mid, qos = self._inbox.popleft()
        if not driver.reading.is_set():
            driver.reading.set()
        return _MqttEnvelope(message, self, mid, qos)

    def _check_nacks(self) -> None:
        if self._nacked:
            raise MqttError(
                f"mqtt {self._where}: {self._nacked} message(s) nacked; reconnecting so that "
                "the broker sends them again (MQTT has no nack)"
            )

    def _convert(self, message: paho.MQTTMessage) -> Message:
        headers = {
            "mqtt-topic": message.topic,
            "mqtt-qos": str(message.qos),
            "mqtt-retain": "true" if message.retain else "false",
        }
        message_id = ""
        props = message.properties if self._v5 else None
        if props is not None:
            for name, value in getattr(props, "UserProperty", ()):
                if name == ID_PROPERTY:
                    message_id = message_id or value
                else:
                    headers.setdefault(name, value)
            content_type = getattr(props, "ContentType", None)
            if content_type:
                headers.setdefault("content-type", content_type)
        if not message_id and self._id_from_payload:
            # Stable across redeliveries (the packet id is not): topic and payload.
            digest = hashlib.blake2b(message.topic.encode(), digest_size=16)
            digest.update(b"\0")
            digest.update(message.payload)
            message_id = f"{self.namespace}mqtt-{digest.hexdigest()}"
        converted = Message(bytes(message.payload), headers, message_id)
        return converted if self.id_template is None else self.id_template.apply(converted)

    def acked(self, mid: int, qos: int) -> None:
        """Send the PUBACK (QoS 1) now that the sink holds the message."""
        driver = self.driver
        if qos and driver is not None and driver.error is None:
            driver.client.ack(mid, qos)
            driver.kick()

    def nacked(self, error: BaseException | None) -> None:
        """No negative ack in MQTT: fail the next receive so that the session resumes."""
        if error is not None:
            self._nacked += 1
            self._more.set()
        # A release: not acked, so the broker sends it again when the session resumes.
