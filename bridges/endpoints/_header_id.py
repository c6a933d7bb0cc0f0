"""A message id as a header value any protocol carries: visible ASCII, the same each time.

A sink that puts the id into a header its target de-duplicates on (the http
sink's ``webhook-id`` and ``Idempotency-Key``, the nats sink's
``Nats-Msg-Id``) needs a value the header can hold whatever the id is: a
file source's ``café.json@17``, a ``bridge-id`` with a line break some other
publisher set. :func:`header_id` keeps the usual id as it is and
percent-encodes the rest, reversibly, so distinct ids stay distinct keys.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import quote

#: A character an id keeps in a header: visible ASCII (``!`` to ``~``) but ``%``.
_UNSAFE: Final = re.compile(r"[^!-$&-~]")
#: What :func:`quote` leaves as it is: the same set.
_SAFE: Final = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def header_id(message_id: str) -> str:
    """``message_id`` as a header value: visible ASCII, deterministic, reversible.

    Unchanged when every character is visible ASCII other than ``%``; else
    each other character percent-encoded as UTF-8 (a lone surrogate as
    UTF-8 would spell it), as :func:`urllib.parse.quote` does: ``café.json``
    is ``caf%C3%A9.json``, ``a b`` is ``a%20b``, ``100%`` is ``100%25``.
    ``urllib.parse.unquote(value, errors="surrogatepass")`` gives the id
    back, so distinct ids never share a value.
    """
    if _UNSAFE.search(message_id) is None:
        return message_id
    return quote(message_id, safe=_SAFE, errors="surrogatepass")
