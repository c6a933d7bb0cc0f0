"""The ``nats`` family: NATS JetStream (core NATS too, as a sink) through nats-py.

:mod:`.source` (a durable pull consumer, explicit acks, fetches bounded by
the window), :mod:`.sink` (JetStream publish acks per batch, ``Nats-Msg-Id``
= the stable id; core NATS at most once), :mod:`._connection` (settings,
URL and subject checks, connecting).
"""

from __future__ import annotations

from bridges import Registry

from .sink import NatsSink, NatsSinkConfig
from .source import NatsSource, NatsSourceConfig

__all__ = ["NatsSink", "NatsSinkConfig", "NatsSource", "NatsSourceConfig", "register"]


def register(registry: Registry) -> None:
    """Register the ``nats`` source and sink."""
    registry.register("source", "nats", NatsSourceConfig, NatsSource.build)
    registry.register("sink", "nats", NatsSinkConfig, NatsSink.build)
