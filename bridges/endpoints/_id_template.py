"""A source's ``id_template``: the stable id made from a message's headers and body.

For a source whose messages carry no id that stays the same when they are
delivered again (RabbitMQ's STOMP ``message-id`` is new on each delivery; a
webhook without ``webhook-id``), the config may name what does stay the
same: a header the publisher sets (``"{header:order-id}"``), a digest of the
body (``"{body_hash}"``), or both (``"{header:customer}-{body_hash}"``). The
fields are those of :class:`bridges.Template` (``{header:NAME}``,
``{header:NAME|default}``, ``{id}``: the source's own id) plus
``{body_hash}``: 32 hex digits of the body's BLAKE2b digest.

A message the template cannot be filled for (a header it lacks, without a
default) gets an empty id: it is never de-duplicated, never merged with
another. Two messages that render the same id are one message to a
de-duplicating sink: a template is a statement that they are.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final
from urllib.parse import quote

import attrs

from .._endpoint import InvalidSetting
from .._message import Message
from .._template import Template, TemplateError

#: ``{body_hash}``, not the escaped ``{{body_hash}}``.
_BODY_HASH: Final = re.compile(r"(?<!\{)\{body_hash\}(?!\})")


@attrs.frozen
class IdTemplate:
    """A parsed ``id_template``; :meth:`render` gives a message's id."""

    text: str
    _pieces: tuple[Template, ...] = attrs.field(repr=False)

    @classmethod
    def parse(cls, text: str) -> IdTemplate:
        """Parse ``text``.

        Raises:
          TemplateError: empty, or a field :class:`bridges.Template` does not know.
        """
        if not text:
            raise TemplateError("an empty id template")
        return cls(text, tuple(Template.parse(piece) for piece in _BODY_HASH.split(text)))

    def render(self, message: Message) -> str:
        """The id of ``message``; empty when a header it needs is missing."""
        try:
            parts = [piece.render(message) for piece in self._pieces]
        except TemplateError:
            return ""
        if len(parts) == 1:
            return parts[0]
        digest = hashlib.blake2b(message.body, digest_size=16).hexdigest()
        return digest.join(parts)

    def apply(self, message: Message) -> Message:
        """``message`` with the id this template renders for it."""
        return attrs.evolve(message, id=self.render(message))


def id_template_setting(text: str | None) -> IdTemplate | None:
    """A source config's ``id_template``, parsed (None when it has none).

    Raises:
      InvalidSetting: naming ``id_template``, when the template does not parse.
    """
    if text is None:
        return None
    try:
        return IdTemplate.parse(text)
    except TemplateError as exc:
        raise InvalidSetting("id_template", str(exc)) from None


def id_namespace(route: str) -> str:
    """The prefix of the ids a source makes itself: its route's name and ``/``.

    Two routes are two namespaces, so two distinct messages never share an id
    (two inboxes that both hold ``a.json`` with the same mtime, two streams
    whose entry ids meet) even when they feed one queue. The route's name is
    percent-encoded (``quote(route, safe="")``: a ``/`` in it becomes ``%2F``),
    so the namespace ends at the first ``/``. It stays the same across
    redelivery, restarts and replicas (they run the same config), and across
    a directory moved or recreated, a server restarted or a stream recreated:
    the route names what it reads, whatever its device or inode is today.
    Ids a publisher set to say that two deliveries are one message
    (``bridge-id``, written by a bridges sink at the origin, itself
    namespaced there) and ``id_template`` ids (the config's own statement)
    are taken as they are.
    """
    return quote(route, safe="") + "/"
