"""The ``kafka`` family: Apache Kafka topics through confluent-kafka (librdkafka).

:mod:`.source` (a consumer group; offsets committed by the source up to
what the sink holds, out-of-order acks kept in the commit's metadata),
:mod:`.sink` (acks=all, the idempotent producer; a batch is durable once
every record is acknowledged), :mod:`._offsets` (which offset may be
committed), :mod:`._connection` (settings, names, errors, the thread rule),
:mod:`._security` (TLS and SASL), :mod:`._carry` (kafka -> kafka: the
source's offsets committed in the sink's transaction).
"""

from __future__ import annotations

from bridges import Registry

from .sink import KafkaSink, KafkaSinkConfig
from .source import KafkaSource, KafkaSourceConfig

__all__ = ["KafkaSink", "KafkaSinkConfig", "KafkaSource", "KafkaSourceConfig", "register"]


def register(registry: Registry) -> None:
    """Register the ``kafka`` source and sink."""
    registry.register("source", "kafka", KafkaSourceConfig, KafkaSource.build)
    registry.register("sink", "kafka", KafkaSinkConfig, KafkaSink.build)
