"""What comes with bridges: the built-in transforms and endpoint families, in one registry.

:func:`default_registry` puts together what :mod:`bridges._registry` (the
mechanism) and the built-ins provide: the transforms of
:mod:`bridges._transforms`, each family of :data:`FAMILIES` (imported by
name, one at a time: a family whose client library is missing is recorded as
unavailable, with the extra that installs it, and every other one still
works), and the installed plugins. The families are named, never imported
here: the core depends on no family.
"""

from __future__ import annotations

from typing import Final

from ._registry import Registry
from ._transforms import (
    DestinationConfig,
    Filter,
    FilterConfig,
    JsonExtract,
    JsonExtractConfig,
    PythonConfig,
    RemoveHeaders,
    RemoveHeadersConfig,
    RenameHeaders,
    RenameHeadersConfig,
    SetDestination,
    SetHeaders,
    SetHeadersConfig,
    build_python,
)

#: family -> (module that defines ``register``, the pip extra it needs or None).
FAMILIES: Final[dict[str, tuple[str, str | None]]] = {
    "file": ("bridges.endpoints.file", None),
    "stomp": ("bridges.endpoints.stomp", None),
    "http": ("bridges.endpoints.http", "http"),
    "mqtt": ("bridges.endpoints.mqtt", "mqtt"),
    "redis": ("bridges.endpoints.redis", "redis"),
    "nats": ("bridges.endpoints.nats", "nats"),
    "amqp": ("bridges.endpoints.amqp", "amqp"),
    "kafka": ("bridges.endpoints.kafka", "kafka"),
    # The data-lake sink of engine = "spark" (Spark writes it; see bridges.spark).
    "spark": ("bridges.spark.lake", "spark"),
}


def register_transforms(registry: Registry) -> None:
    """Register the built-in transforms (not a family: they need nothing installed)."""
    registry.register("transform", "set_headers", SetHeadersConfig, SetHeaders.build)
    registry.register("transform", "remove_headers", RemoveHeadersConfig, RemoveHeaders.build)
    registry.register("transform", "rename_headers", RenameHeadersConfig, RenameHeaders.build)
    registry.register("transform", "destination", DestinationConfig, SetDestination.build)
    registry.register("transform", "filter", FilterConfig, Filter.build)
    registry.register("transform", "json_extract", JsonExtractConfig, JsonExtract.build)
    registry.register("transform", "python", PythonConfig, build_python)


def default_registry(*, plugins: bool = True) -> Registry:
    """The built-in transforms and endpoint families, plus installed plugins when ``plugins``.

    A family whose dependencies are missing is listed by
    :meth:`Registry.unavailable` instead of registered.
    """
    registry = Registry()
    register_transforms(registry)
    for family, (module, extra) in FAMILIES.items():
        registry.load_family(family, module, extra)
    if plugins:
        registry.load_entry_points()
    return registry
