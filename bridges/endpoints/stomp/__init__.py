"""The ``stomp`` family: a subscription in, SENDs confirmed per batch out.

:mod:`.source`, :mod:`.sink`, and :mod:`._connection` (the settings both
share, URL checks, ``url = "embedded"``).
"""

from __future__ import annotations

from ..._registry import Registry
from ._connection import EMBEDDED_BROKER, ID_HEADER, StompConnection
from .sink import StompSink, StompSinkConfig
from .source import StompSource, StompSourceConfig

__all__ = [
    "EMBEDDED_BROKER",
    "ID_HEADER",
    "StompConnection",
    "StompSink",
    "StompSinkConfig",
    "StompSource",
    "StompSourceConfig",
    "register",
]


def register(registry: Registry) -> None:
    """Register the ``stomp`` source and sink."""
    registry.register("source", "stomp", StompSourceConfig, StompSource.build)
    registry.register("sink", "stomp", StompSinkConfig, StompSink.build)
