"""The ``redis`` family: Redis Streams source (consumer group) and sink (XADD), on coredis.

coredis is anyio-native: it runs on Trio through anyio's trio backend, with
its connection pool's tasks in a nursery that ends with the endpoint's
``async with``. No thread and no asyncio loop is involved.
"""

from __future__ import annotations

from bridges import Registry

from ._connection import RedisEndpointError
from .sink import RedisSink, RedisSinkConfig
from .source import RedisSource, RedisSourceConfig

__all__ = [
    "RedisEndpointError",
    "RedisSink",
    "RedisSinkConfig",
    "RedisSource",
    "RedisSourceConfig",
    "register",
]


def register(registry: Registry) -> None:
    """Register the ``redis`` source and sink."""
    registry.register("source", "redis", RedisSourceConfig, RedisSource.build)
    registry.register("sink", "redis", RedisSinkConfig, RedisSink.build)
