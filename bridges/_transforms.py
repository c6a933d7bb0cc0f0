"""Built-in transforms, and Python callables as transforms.

A transform is any callable ``f(message) -> Message | None``, plain or
``async``: it returns a new :class:`Message` (they are values: use
``attrs.evolve``), or None to drop the message (it is acked: filtered out is
done). An exception sends the message to the dead-letter sink (or nacks it)
with the error: a transform is never retried, it would fail the same way.

Each built-in is a small frozen class built from its config table; see
``docs/reference/config.rst`` for the tables.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import attrs

from ._endpoint import Context, InvalidSetting
from ._flow import TransformFailed
from ._message import Message
from ._template import Template, TemplateError

Transform = Callable[[Message], Message | Awaitable[Message | None] | None]


def _template(key: str, text: str) -> Template:
    try:
        return Template.parse(text)
    except TemplateError as exc:
        raise InvalidSetting(key, str(exc)) from None


# -- set / remove / rename headers -------------------------------------------------


@attrs.frozen
class SetHeadersConfig:
    """``type = "set_headers"``: add or replace headers; values are templates.

    Attributes:
      headers: required: name -> value, each value a template (``{id}``,
        ``{header:NAME}``...).
      overwrite: false keeps a header the message already has.
    """

    headers: dict[str, str]
    overwrite: bool = True


@attrs.frozen
class SetHeaders:
    """Set headers from templates (``{id}``, ``{header:NAME}``...)."""

    headers: tuple[tuple[str, Template], ...]
    overwrite: bool = True

    @classmethod
    def build(cls, config: SetHeadersConfig, context: Context) -> SetHeaders:
        pairs = tuple((k, _template(f"headers.{k}", v)) for k, v in config.headers.items())
        return cls(pairs, config.overwrite)

    def __call__(self, message: Message) -> Message:
        headers = dict(message.headers)
        for name, template in self.headers:
            if self.overwrite or name not in headers:
                headers[name] = template.render(message)
        return attrs.evolve(message, headers=headers)


@attrs.frozen
class RemoveHeadersConfig:
    """``type = "remove_headers"``: drop the named headers.

    Attributes:
      names: required: the headers to drop.
    """

    names: tuple[str, ...]


@attrs.frozen
class RemoveHeaders:
    """Drop headers by name."""

    names: frozenset[str]

    @classmethod
    def build(cls, config: RemoveHeadersConfig, context: Context) -> RemoveHeaders:
        return cls(frozenset(config.names))

    def __call__(self, message: Message) -> Message:
        headers = {k: v for k, v in message.headers.items() if k not in self.names}
        return attrs.evolve(message, headers=headers)


@attrs.frozen
class RenameHeadersConfig:
    """``type = "rename_headers"``: ``names = { old = "new" }``.

    Attributes:
      names: required: old name -> new name; a renamed header replaces one
        already called by the new name.
    """

    names: dict[str, str]


@attrs.frozen
class RenameHeaders:
    """Rename headers; a renamed header replaces one already called by the new name."""

    names: Mapping[str, str]

    @classmethod
    def build(cls, config: RenameHeadersConfig, context: Context) -> RenameHeaders:
        return cls(dict(config.names))

    def __call__(self, message: Message) -> Message:
        headers: dict[str, str] = {}
        renamed: dict[str, str] = {}
        for name, value in message.headers.items():
            if name in self.names:
                renamed[self.names[name]] = value
            else:
                headers[name] = value
        headers.update(renamed)
        return attrs.evolve(message, headers=headers)


# -- destination ------------------------------------------------------------------


@attrs.frozen
class DestinationConfig:
    """``type = "destination"``: where the sink sends it, from a template.

    Attributes:
      template: required: the destination, a template
        (``/queue/orders.{header:region}``); it overrides the sink's own.
    """

    template: str


@attrs.frozen
class SetDestination:
    """Choose the message's destination from a template (the sink then uses it)."""

    template: Template

    @classmethod
    def build(cls, config: DestinationConfig, context: Context) -> SetDestination:
        return cls(_template("template", config.template))

    def __call__(self, message: Message) -> Message:
        return attrs.evolve(message, destination=self.template.render(message))


# -- filter -----------------------------------------------------------------------


@attrs.frozen
class FilterConfig:
    """``type = "filter"``: keep (or drop) messages whose header matches.

    Give one test: ``equals`` (a value or a list of values), ``matches`` (a
    regular expression the whole value must match) or ``present``.

    Attributes:
      header: required: the header tested.
      equals: matches when the header's value is this (or one of this list).
      matches: matches when this regular expression matches the whole value.
      present: matches when the header is there (true) or is not (false).
      action: ``"keep"``: keep the matches, drop the rest; ``"drop"``: drop
        the matches. A dropped message is acked (counted as filtered).
    """

    header: str
    equals: str | tuple[str, ...] | None = None
    matches: str | None = None
    present: bool | None = None
    action: Literal["keep", "drop"] = "keep"


@attrs.frozen
class Filter:
    """Keep or drop a message by a test on one header."""

    header: str
    test: Callable[[str | None], bool]
    keep: bool

    @classmethod
    def build(cls, config: FilterConfig, context: Context) -> Filter:
        given = [k for k in ("equals", "matches", "present") if getattr(config, k) is not None]
        if len(given) != 1:
            raise InvalidSetting(
                "equals", f"give exactly one of equals, matches, present (got {given or 'none'})"
            )
        test: Callable[[str | None], bool]
        if config.equals is not None:
            values = (
                frozenset([config.equals])
                if isinstance(config.equals, str)
                else frozenset(config.equals)
            )
            test = values.__contains__
        elif config.matches is not None:
            try:
                pattern = re.compile(config.matches)
            except re.error as exc:
                raise InvalidSetting("matches", f"not a regular expression: {exc}") from None
            test = lambda value: value is not None and pattern.fullmatch(value) is not None  # noqa: E731
        else:
            wanted = bool(config.present)
            test = lambda value: (value is not None) == wanted  # noqa: E731
        return cls(config.header, test, config.action == "keep")

    def __call__(self, message: Message) -> Message | None:
        matched = self.test(message.headers.get(self.header))
        return message if matched == self.keep else None


# -- JSON field extraction ----------------------------------------------------------


@attrs.frozen
class JsonExtractConfig:
    """``type = "json_extract"``: ``fields = { header = "path.to.field" }``.

    The body is parsed as JSON; each dotted path (``order.items.0.sku``)
    becomes a header. Strings are copied as they are, other values as
    compact JSON. With ``required = false`` a body that is not JSON, or a
    missing field, leaves the message unchanged; with ``required = true``
    it is an error (the message is dead-lettered).

    Attributes:
      fields: required: header -> dotted path into the JSON body.
      required: true: a body that is not JSON, or a missing field, is an
        error (dead letter); false: the message goes on unchanged.
    """

    fields: dict[str, str]
    required: bool = False


@attrs.frozen
class JsonExtract:
    """Copy fields of a JSON body into headers."""

    fields: tuple[tuple[str, tuple[str, ...]], ...]
    required: bool

    @classmethod
    def build(cls, config: JsonExtractConfig, context: Context) -> JsonExtract:
        fields = []
        for header, path in config.fields.items():
            steps = tuple(path.split("."))
            if not all(steps):
                raise InvalidSetting(f"fields.{header}", f"bad path {path!r}")
            fields.append((header, steps))
        return cls(tuple(fields), config.required)

    def __call__(self, message: Message) -> Message:
        try:
            document = json.loads(message.body)
        except ValueError as exc:
            if self.required:
                raise ValueError(f"the body is not JSON: {exc}") from None
            return message
        headers = dict(message.headers)
        for header, steps in self.fields:
            value = _lookup(document, steps)
            if value is _MISSING:
                if self.required:
                    raise ValueError(f"the JSON body has no {'.'.join(steps)!r}")
                continue
            headers[header] = (
                value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
            )
        return attrs.evolve(message, headers=headers)


_MISSING = object()


def _lookup(document: Any, steps: tuple[str, ...]) -> Any:
    for step in steps:
        if isinstance(document, dict) and step in document:
            document = document[step]
        elif isinstance(document, list) and step.isdigit() and int(step) < len(document):
            document = document[int(step)]
        else:
            return _MISSING
    return document


# -- Python callables ------------------------------------------------------------------


@attrs.frozen
class PythonConfig:
    """``type = "python"``: your own transform, imported by name.

    ``callable = "package.module:function"`` names the transform itself
    (``function(message) -> Message | None``, plain or async). Or
    ``factory = "package.module:make"`` with ``options = {...}``: the
    transform is ``make(**options)``, built once when the route starts.

    Attributes:
      callable: ``"package.module:function"``: the transform itself
        (``function(message) -> Message | None``, plain or async; None drops
        the message).
      factory: ``"package.module:make"``: called once as ``make(**options)``
        when the route starts, it returns the transform.
      options: the keyword arguments of ``factory``.
    """

    callable: str | None = None
    factory: str | None = None
    options: dict[str, Any] = attrs.field(factory=dict)


def import_object(spec: str, key: str) -> Any:
    """Import ``package.module:attribute`` (dots after the colon walk attributes)."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise InvalidSetting(key, f"expected 'package.module:name', got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:
        raise InvalidSetting(key, f"cannot import {spec!r}: {exc!r}") from None
    return target


def build_python(config: PythonConfig, context: Context) -> Transform:
    """The transform a ``python`` table names."""
    if (config.callable is None) == (config.factory is None):
        raise InvalidSetting("callable", "give exactly one of callable, factory")
    if config.callable is not None:
        if config.options:
            raise InvalidSetting("options", "options go with factory, not callable")
        function = import_object(config.callable, "callable")
    else:
        make = import_object(config.factory or "", "factory")
        try:
            function = make(**config.options)
        except Exception as exc:
            raise InvalidSetting("factory", f"{config.factory}(...) failed: {exc!r}") from None
    if not callable(function):
        raise InvalidSetting("callable", f"{function!r} is not callable")
    return function  # type: ignore[no-any-return]


def is_async(transform: Transform) -> bool:
    """True when calling ``transform`` returns an awaitable."""
    call = getattr(transform, "__call__", None)  # noqa: B004 - instances with async __call__
    return inspect.iscoroutinefunction(transform) or inspect.iscoroutinefunction(call)


class Chain:
    """A route's transforms, applied in order: each gets what the one before made of it."""

    __slots__ = ("_steps",)

    def __init__(self, transforms: Sequence[Transform]) -> None:
        self._steps = [(t, is_async(t)) for t in transforms]

    async def __call__(self, message: Message) -> Message | None:
        """What the transforms make of ``message``; None once one dropped it.

        Raises:
          TransformFailed: a transform raised, or returned neither a Message nor None.
        """
        for index, (transform, asynchronous) in enumerate(self._steps):
            try:
                result = transform(message)
                if asynchronous:
                    result = await result  # type: ignore[misc]
            except Exception as exc:
                name = getattr(transform, "__name__", type(transform).__name__)
                raise TransformFailed(f"transform {index} ({name}) failed: {exc!r}") from exc
            if result is None:
                return None
            if not isinstance(result, Message):
                raise TransformFailed(
                    f"transform {index} returned {type(result).__name__}, not Message or None"
                )
            message = result
        return message
