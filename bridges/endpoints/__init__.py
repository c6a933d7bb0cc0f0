"""Endpoint families: one package per family, registered by import path.

Each family is a package ``bridges.endpoints.<family>`` whose ``__init__``
defines ``register(registry: bridges.Registry) -> None``. The families are
imported only by :func:`bridges.default_registry`, one at a time: a family
whose third-party client library is not installed (an ImportError while
importing it) is recorded as unavailable with the extra that installs it,
so ``bridges plugins`` lists it and ``bridges check`` names it, and every
other family still works.
"""

from __future__ import annotations

from typing import Final

#: family -> (module that defines ``register``, the pip extra it needs or None).
FAMILIES: Final[dict[str, tuple[str, str | None]]] = {
    "file": ("bridges.endpoints.file", None),
    "stomp": ("bridges.endpoints.stomp", None),
    "http": ("bridges.endpoints.http", "http"),
    "mqtt": ("bridges.endpoints.mqtt", "mqtt"),
    "redis": ("bridges.endpoints.redis", "redis"),
    "nats": ("bridges.endpoints.nats", "nats"),
    "amqp": ("bridges.endpoints.amqp", "amqp"),
    # The data-lake sink of engine = "spark" (Spark writes it; see bridges.spark).
    "spark": ("bridges.spark.lake", "spark"),
}
