"""The ``mqtt`` family: MQTT 3.1.1 / 5 source (persistent session, manual PUBACK) and sink.

Built on paho-mqtt 2.x, driven by Trio tasks through paho's external-loop
API (see ``_driver.py``): no thread runs paho's loop, no asyncio loop is
involved, and everything ends with the endpoint's ``async with``.
"""

from __future__ import annotations

from bridges import Registry

from ._connection import MqttError
from .sink import MqttSink, MqttSinkConfig
from .source import MqttSource, MqttSourceConfig

__all__ = ["MqttError", "MqttSink", "MqttSinkConfig", "MqttSource", "MqttSourceConfig", "register"]


def register(registry: Registry) -> None:
    """Register the ``mqtt`` source and sink."""
    registry.register("source", "mqtt", MqttSourceConfig, MqttSource.build)
    registry.register("sink", "mqtt", MqttSinkConfig, MqttSink.build)
