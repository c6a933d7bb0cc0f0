"""The bridges config schema, read from the classes the config loader checks against.

``bridges._config.parse_config`` structures each table into an attrs class
(``[bridge]`` into :class:`~bridges.BridgeSettings`, a route's ``source =
{ type = "stomp", ... }`` into the config class the ``stomp`` plugin
registered...): the fields of those classes are exactly the keys it accepts.
This module lists them, each with the type its errors name, its default and
its description: the ``Attributes:`` entry of the class's docstring (or of
the attrs base class that declares it). The config reference page renders
:func:`schema`, and ``tests/docs/test_site_config.py`` checks it against the
loader and the built page.

No Sphinx here: the tests import it as it is.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Iterator
from typing import Any

import attrs

from bridges import BridgeSettings, BrokerSettings, RetryPolicy, SparkSettings, default_registry
from bridges._config import Batching, _RouteTable
from bridges._convert import _type_name


@attrs.frozen
class Option:
    """One key of a table."""

    name: str
    type: str
    default: str | None  # TOML text; None: required
    description: str
    secret: bool = False


@attrs.frozen
class Table:
    """One table of the config: a section, a route, or one endpoint type's keys."""

    anchor: str
    title: str  # how it is written in TOML
    summary: str  # the class's first paragraph
    cls: type[Any]
    options: tuple[Option, ...]


class SchemaError(Exception):
    """The code's schema lacks documentation (an option without a description...)."""


_ENTRY = re.compile(r"^(\s*)(\w+): ?(.*)$")


def attribute_docs(cls: type[Any]) -> dict[str, str]:
    """The ``Attributes:`` entries of ``cls``'s docstring: name -> text (one paragraph)."""
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    lines = doc.splitlines()
    try:
        start = lines.index("Attributes:")
    except ValueError:
        return {}
    docs: dict[str, str] = {}
    name = None
    indent = None
    for line in lines[start + 1 :]:
        if line and not line.startswith(" "):
            break  # the next section
        match = _ENTRY.match(line)
        if match and (indent is None or len(match.group(1)) == indent):
            indent = len(match.group(1))
            name = match.group(2)
            docs[name] = match.group(3).strip()
        elif name is not None and line.strip():
            docs[name] += " " + line.strip()
    return docs


def _described(cls: type[Any]) -> dict[str, str]:
    """Every field's description, from ``cls`` and the attrs classes it derives from."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if attrs.has(klass):
            docs.update(attribute_docs(klass))
    return docs


def toml(value: object) -> str:
    """``value`` written as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {toml(item)}" for key, item in value.items()) + "}"
    if attrs.has(type(value)):
        return toml(attrs.asdict(value))  # type: ignore[arg-type]
    return repr(value)


def _default(field: attrs.Attribute[Any]) -> str | None:
    default = field.default
    if default is attrs.NOTHING:
        return None
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()  # type: ignore[union-attr]
    return "(none)" if default is None else toml(default)


def options(cls: type[Any]) -> tuple[Option, ...]:
    """The keys of the table that ``cls`` is structured from, in declaration order."""
    hints = typing.get_type_hints(cls)
    docs = _described(cls)
    return tuple(
        Option(
            name=field.alias or field.name,
            type=_type_name(hints[field.name]),
            default=None if _required(docs.get(field.name, "")) else _default(field),
            description=docs.get(field.name, ""),
            secret=bool(field.metadata.get("secret")),
        )
        for field in attrs.fields(cls)
        if field.init
    )


def _required(description: str) -> bool:
    """A key whose class has a placeholder default (``destination = ""``) and whose
    endpoint refuses it unset says so: its description starts with "required"."""
    return description.startswith("required")


def _summary(cls: type[Any]) -> str:
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    return doc.split("\n\n")[0].replace("\n", " ")


def _table(anchor: str, title: str, cls: type[Any]) -> Table:
    return Table(anchor, title, _summary(cls), cls, options(cls))


def _spark_conf(option: Option) -> Option:
    """``[spark]``'s ``conf`` is written as ``spark.NAME`` keys, never as ``conf``."""
    if option.name != "conf":
        return option
    kinds = "a string, number or boolean"
    return attrs.evolve(option, name="spark.NAME", type=kinds, default="(none)")


def _spark() -> Table:
    table = _table("spark", "[spark]", SparkSettings)
    return attrs.evolve(table, options=tuple(_spark_conf(option) for option in table.options))


def schema() -> list[Table]:
    """Every table a config may hold, and each one's keys (built-ins only, no plugins)."""
    tables = [
        _table("bridge", "[bridge]", BridgeSettings),
        _table("broker", "[broker]", BrokerSettings),
        _spark(),
        _table("routes", "[routes.NAME]", _RouteTable),
        _table("batch", "[routes.NAME] batch = {...}", Batching),
        _table("retry", "[routes.NAME] retry = {...}", RetryPolicy),
    ]
    registry = default_registry(plugins=False)
    for plugin in registry.plugins():
        title = f'{plugin.kind} type = "{plugin.name}"'
        tables.append(_table(f"{plugin.kind}-{plugin.name}", title, plugin.config))
    return tables


def problems(tables: list[Table]) -> Iterator[str]:
    """What is missing or wrong in the documentation of ``tables``."""
    for table in tables:
        if not table.summary:
            yield f"{table.title} ({table.cls.__qualname__}): no docstring"
        for option in table.options:
            if not option.description:
                where = f"{table.cls.__module__}.{table.cls.__qualname__}"
                yield f"{table.title}: {option.name}: no description (Attributes: of {where})"
        names = {field.name for field in attrs.fields(table.cls)}
        for name in _described(table.cls).keys() - names:
            yield f"{table.title}: {name}: described, but {table.cls.__qualname__} has no such key"
