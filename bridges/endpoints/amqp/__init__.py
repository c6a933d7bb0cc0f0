"""The ``amqp`` family: AMQP 0-9-1 (RabbitMQ) on its own Trio connection (pamqp as the codec).

:mod:`.source` (a queue, manual acks, ``basic.qos`` = the window),
:mod:`.sink` (publisher confirms, persistent, mandatory: unroutable messages
are rejected, never confirmed into nowhere), :mod:`._headers` (properties
<-> headers), :mod:`._connection` (settings, URL checks, connecting),
:mod:`._client` (the connection: handshake, reader, heartbeats),
:mod:`._channel` (calls, confirms, deliveries), :mod:`._frames` (bytes <-> frames).
"""

from __future__ import annotations

from bridges import Registry

from .sink import AmqpSink, AmqpSinkConfig
from .source import AmqpSource, AmqpSourceConfig

__all__ = ["AmqpSink", "AmqpSinkConfig", "AmqpSource", "AmqpSourceConfig", "register"]


def register(registry: Registry) -> None:
    """Register the ``amqp`` source and sink."""
    registry.register("source", "amqp", AmqpSourceConfig, AmqpSource.build)
    registry.register("sink", "amqp", AmqpSinkConfig, AmqpSink.build)
