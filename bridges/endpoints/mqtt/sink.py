"""The ``mqtt`` sink: a batch published at once, durable when every PUBACK (QoS 2: PUBCOMP) is in.

``write`` queues every PUBLISH of the batch (they leave in one burst), then
waits for all the confirmations: one round trip per batch. QoS 0 has no
confirmation; it counts as written once on the socket, which is at most once
(``bridges check`` warns).

The topic comes from a template; a topic with a wildcard or NUL, an empty
one, or a message over ``max_bytes`` (or the broker's Maximum Packet Size,
MQTT 5) is rejected before anything is sent (dead letter). With MQTT 5, a
PUBACK whose reason code refuses the message (not authorized, topic name
invalid, packet too large, payload format invalid) rejects that message;
MQTT 3.1.1 has no such code, and a broker that refuses a publish there
(Mosquitto's ACLs) still acknowledges it and drops it: use MQTT 5.

MQTT 5 carries the message's headers as user properties (and ``bridge-id``
with its stable id; ``content-type`` as the Content Type property); MQTT
3.1.1 can carry only the body.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

import attrs
import trio
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bridges import (
    Context,
    InvalidSetting,
    Message,
    MessageRejected,
    Template,
    TemplateError,
    prepare_each,
)
from bridges._readfile import checked_cafile

from ._connection import Broker, MqttConnection, check_string, check_topic
from ._driver import PahoDriver, open_paho
from .source import ID_PROPERTY

#: Headers a source sets about one delivery: not sent on.
_DELIVERY: Final = frozenset({"mqtt-topic", "mqtt-qos", "mqtt-retain"})
#: MQTT 5 PUBACK/PUBREC reason codes that sending the same message again cannot fix.
_REFUSED: Final = frozenset({0x87, 0x90, 0x95, 0x99})
#: An empty PUBLISH property set: each message's is a copy of it. paho's
#: ``Properties()`` builds its tables of every property name and type afresh for
#: each instance, a quarter of the sink's CPU per message; a copy shares them
#: (paho only reads them) and is checked by ``Properties`` like a new one.
_PUBLISH_PROPERTIES: Final = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]


@attrs.frozen
class MqttSinkConfig(MqttConnection):
    """Publish to MQTT (a batch at once, then every PUBACK awaited).

    Attributes:
      topic: required: the topic to publish to, a template
        (``alerts/{header:site}``); a ``destination`` transform overrides it.
      retain: true publishes with the retain flag.
    """

    topic: str = ""
    retain: bool = False


class MqttSink:
    """Batches published to an MQTT broker, confirmed by PUBACK / PUBCOMP."""

    def __init__(self, config: MqttSinkConfig, context: Context) -> None:
        if not config.topic:
            raise InvalidSetting("topic", "missing (required)")
        try:
            self._topic = Template.parse(config.topic)
        except TemplateError as exc:
            raise InvalidSetting("topic", str(exc)) from None
        if self._topic.constant:
            problem = check_topic(config.topic.replace("{{", "{").replace("}}", "}"), filter=False)
            if problem is not None:
                raise InvalidSetting("topic", problem)
        self._config = config
        self._context = context
        self._broker = Broker.from_config(config)
        checked_cafile("ca_file", config.ca_file, context)

    def check_warnings(self) -> list[str]:
        """What ``bridges check`` should say about this sink: QoS 0 is at most once."""
        if self._config.qos == 0:
            return [
                "mqtt sink with qos = 0 is AT MOST ONCE: there is no PUBACK, a message counts "
                "as written once it is on the socket (use qos = 1)"
            ]
        return []

    @classmethod
    def build(cls, config: MqttSinkConfig, context: Context) -> MqttSink:
        """The registry's constructor (connects to nothing)."""
        return cls(config, context)

    def describe(self) -> str:
        """``mqtt TOPIC (qos N) on URL``."""
        return f"mqtt {self._config.topic} (qos {self._config.qos}) on {self._broker.where}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_MqttWriter]:
        """Connect with a clean session (a publisher needs none kept)."""
        config = self._config
        client_id = config.client_id or f"bridge-{self._context.route}-{secrets.token_hex(4)}"
        async with open_paho(
            config,
            self._broker,
            client_id,
            clean_start=True,
            ssl_context=await self._broker.ssl_context(config, self._context),
        ) as driver:
            yield _MqttWriter(self, driver)

    def prepare(self, message: Message) -> tuple[str, Properties | None]:
        """The topic and the MQTT 5 properties of ``message``.

        Raises:
          ValueError: it can never be published (why, in one line).
        """
        topic = message.destination or self._topic.render(message)
        problem = check_topic(topic, filter=False)
        if problem is not None:
            raise ValueError(problem)
        if len(message.body) > self._config.max_bytes:
            raise ValueError(
                f"body of {len(message.body)} bytes is over max_bytes ({self._config.max_bytes})"
            )
        if self._config.protocol != 5:
            return topic, None
        properties = copy.copy(_PUBLISH_PROPERTIES)
        pairs = []
        for name, value in message.headers.items():
            if name in _DELIVERY or name == ID_PROPERTY:
                continue
            _check_string(name, "header name")
            _check_string(value, f"header {name!r}")
            if name == "content-type":
                properties.ContentType = value
                continue
            pairs.append((name, value))
        _check_string(message.id, "the message id")
        pairs.append((ID_PROPERTY, message.id))
        properties.UserProperty = pairs
        return topic, properties


def _check_string(text: str, what: str) -> None:
    problem = check_string(text, what)
    if problem is not None:
        raise ValueError(problem)


class _MqttWriter:
    def __init__(self, sink: MqttSink, driver: PahoDriver) -> None:
        self._sink = sink
        self._driver = driver
        config = sink._config  # noqa: SLF001 (the writer is part of its sink)
        self._qos = config.qos
        self._retain = config.retain

    async def write(self, batch: Sequence[Message]) -> None:
        limit = self._driver.max_packet

        def prepare(message: Message) -> tuple[str, bytes, Properties | None]:
            topic, properties = self._sink.prepare(message)
            if limit is not None and len(message.body) + len(topic) + 64 > limit:
                raise ValueError(
                    f"body of {len(message.body)} bytes is over the broker's "
                    f"Maximum Packet Size ({limit})"
                )
            return topic, message.body, properties

        prepared = prepare_each(batch, prepare)  # (TemplateError is a ValueError)
        driver = self._driver
        step = driver.receive_maximum if self._qos else len(prepared)
        codes = []
        try:
            for start in range(0, len(prepared), step):
                mids = [
                    driver.publish(topic, body, self._qos, self._retain, properties)
                    for topic, body, properties in prepared[start : start + step]
                ]
                codes += await driver.confirm(mids)
        except BaseException:
            driver.abandon()
            raise
        refused = [i for i, code in enumerate(codes) if code.value in _REFUSED]
        failed = [code for code in codes if code.is_failure and code.value not in _REFUSED]
        if refused:
            raise MessageRejected.each({i: f"the broker refused it: {codes[i]}" for i in refused})
        if failed:
            raise trio.BrokenResourceError(f"the broker did not take a message: {failed[0]}")
