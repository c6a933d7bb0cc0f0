"""Templates for destinations, file names and header values: ``/queue/orders.{header:region}``.

Fields in braces are replaced from the message:

- ``{id}``: the message's stable id;
- ``{destination}``: the destination chosen so far (empty when none);
- ``{header:NAME}``: the value of header NAME; it is an error when the
  message has no such header, unless a default follows a ``|``:
  ``{header:region|eu}``.

``{{`` and ``}}`` stand for literal braces. A template is parsed when the
config is loaded, so an unknown field is a config error, not a runtime one.
"""

from __future__ import annotations

import re
from typing import Final

import attrs

from ._message import Message

_FIELD: Final = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


class TemplateError(ValueError):
    """A template is malformed, or a message lacks a header it needs."""


@attrs.frozen
class Template:
    """A parsed template; :meth:`render` fills it in for one message."""

    text: str
    # Literal strings and (kind, name, default) fields, in order.
    _parts: tuple[str | tuple[str, str, str | None], ...] = attrs.field(repr=False)

    @classmethod
    def parse(cls, text: str) -> Template:
        """Parse ``text``.

        Raises:
          TemplateError: an unknown field, or a stray brace.
        """
        parts: list[str | tuple[str, str, str | None]] = []
        pos = 0
        for match in _FIELD.finditer(text):
            if match.start() > pos:
                parts.append(text[pos : match.start()])
            pos = match.end()
            token = match.group(0)
            if token in ("{{", "}}"):
                parts.append(token[0])
            elif token in ("{", "}"):
                raise TemplateError(f"stray {token!r} in template {text!r} (write {token * 2})")
            else:
                parts.append(_field(match.group(1), text))
        if pos < len(text):
            parts.append(text[pos:])
        return cls(text, tuple(parts))

    @property
    def constant(self) -> bool:
        """True when the template has no fields."""
        return all(isinstance(part, str) for part in self._parts)

    def render(self, message: Message) -> str:
        """The template filled in from ``message``.

        Raises:
          TemplateError: a ``{header:NAME}`` without default and no such header.
        """
        out: list[str] = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
                continue
            kind, name, default = part
            if kind == "id":
                out.append(message.id)
            elif kind == "destination":
                out.append(message.destination or "")
            else:
                value = message.headers.get(name, default)
                if value is None:
                    raise TemplateError(f"the message has no {name!r} header for {self.text!r}")
                out.append(value)
        return "".join(out)


def _field(spec: str, text: str) -> tuple[str, str, str | None]:
    name, bar, default = spec.partition("|")
    kind, colon, header = name.partition(":")
    if kind in ("id", "destination") and not colon and not bar:
        return (kind, "", None)
    if kind == "header" and colon and header:
        return ("header", header, default if bar else None)
    raise TemplateError(
        f"unknown field {{{spec}}} in template {text!r}; "
        "expected {id}, {destination} or {header:NAME} ({header:NAME|default})"
    )


_UNSAFE: Final = re.compile(r"[\x00-\x1f\x7f/\\]")


def safe_filename(name: str, limit: int = 200) -> str:
    """``name`` made safe as one file name: no separators, no control characters,
    no leading dot (so never ``.`` or ``..`` or hidden), at most ``limit`` chars."""
    cleaned = _UNSAFE.sub("_", name)[:limit]
    if not cleaned or cleaned.startswith("."):
        cleaned = "_" + cleaned[: limit - 1]
    return cleaned
