"""The mqtt source and sink held to the bridges Source/Sink contract, against a real Mosquitto.

The sink's read-back is a bare paho-mqtt client in its own thread (paho's
``loop_start``) with a persistent QoS 1 session: an independent subscriber,
and no Trio task that the contract could mistake for one the sink left.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import paho.mqtt.client as paho
import pytest
import trio
from family_kit import POISON_MIXES, POISON_SETTINGS, poison_run
from hypothesis import given
from mqtt_servers import HOSTPORT, PASSWORD, USER, require_mqtt
from paho.mqtt.enums import CallbackAPIVersion

from bridges import Context, Message
from bridges.endpoints.mqtt import MqttSink, MqttSinkConfig, MqttSource, MqttSourceConfig
from bridges.testing import SinkCase, SourceCase, check_sink, check_source


def settings(url: str) -> dict[str, Any]:
    return {"url": url, "username": USER, "password": PASSWORD}


@asynccontextmanager
async def topic_source() -> AsyncIterator[SourceCase]:
    url = require_mqtt()
    topic = f"trio-stomp-contract/{uuid.uuid4().hex[:10]}"
    config = MqttSourceConfig(
        topics=[topic], client_id=f"contract-{uuid.uuid4().hex[:10]}", **settings(url)
    )
    source = MqttSource(config, Context(route="c", in_flight=100))
    sink = MqttSink(MqttSinkConfig(topic=topic, **settings(url)), Context(route="c", role="sink"))

    async def publish(messages: Sequence[Message]) -> None:
        async with sink.open() as writer:
            await writer.write(messages)

    yield SourceCase(source, publish)


@contextmanager
def subscriber(topic: str) -> Iterator[tuple[list[bytes], threading.Lock]]:
    """A bare paho client in its own thread, collecting every payload on ``topic``."""
    held: list[bytes] = []
    lock = threading.Lock()
    subscribed = threading.Event()
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"reader-{uuid.uuid4().hex[:8]}")
    client.username_pw_set(USER, PASSWORD)

    def on_message(client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        with lock:
            held.append(bytes(message.payload))

    client.on_message = on_message
    client.on_subscribe = lambda *args: subscribed.set()
    host, _, port = HOSTPORT.partition(":")
    client.connect(host, int(port or 1883))
    client.subscribe(topic, qos=1)
    client.loop_start()
    try:
        if not subscribed.wait(10):
            raise RuntimeError("no SUBACK")
        yield held, lock
    finally:
        client.disconnect()
        client.loop_stop()


@asynccontextmanager
async def topic_sink() -> AsyncIterator[SinkCase]:
    url = require_mqtt()
    topic = f"trio-stomp-contract/{uuid.uuid4().hex[:10]}"
    sink = MqttSink(
        MqttSinkConfig(topic=topic + "{header:suffix|}", **settings(url)),
        Context(route="c", role="sink"),
    )
    with subscriber(topic) as (held, lock):

        async def read_back() -> list[Message]:
            # A PUBACK means the broker has it; its delivery to the reader follows.
            await trio.sleep(0.05)
            with lock:
                return [Message(body) for body in held]

        never = Message(b"a wildcard in the topic", {"suffix": "/+"}, "never")
        yield SinkCase(sink, read_back, reject=never)


@pytest.mark.deadline(60)
async def test_the_mqtt_source_keeps_the_source_contract() -> None:
    await check_source(topic_source)


@pytest.mark.deadline(60)
async def test_the_mqtt_sink_keeps_the_sink_contract() -> None:
    await check_sink(topic_sink)


@POISON_SETTINGS
@given(mix=POISON_MIXES)
def test_the_mqtt_sink_sets_each_poison_message_aside_alone(mix: list[int | None]) -> None:
    poison_run(topic_sink, mix)
