"""Secrets redacted by value from everything the process says.

A target may answer with what it was sent: a 400 that echoes the request's
``Authorization`` header, a STOMP ERROR frame quoting the CONNECT frame, a
library's error that prints its URL. Redacting a field by name cannot catch
those, so every secret the config resolved is redacted by value wherever it
shows up: log lines (every handler ``bridges run`` installs), status lines,
``STATUS=``, ``/metrics``, ``/healthz``, ``/readyz``, the ``bridge-error``
header of a dead letter, the route's error text, the command's error lines.

The secrets are what the config gave to a field marked ``secret`` (however
it was written: a literal, ``${NAME}``, ``${credential:NAME}`` or
``NAME_file``), every ``${credential:NAME}`` wherever it is used, and the
password of any URL (``scheme://user:password@host``). Each is matched in
every form a peer's encoding gives it: as is, JSON-escaped (``\\/`` or ``/``,
``\\u00e9``), as Python's ``repr`` writes it, percent-encoded (upper- or
lower-case hex, ``+`` for a space, some characters left raw as httpx leaves
``/`` in a query string), any of these escaped again, and in base64 (standard
and URL-safe, alone or at any of the three alignments inside a longer base64
text, which covers HTTP Basic's ``user:password`` whoever the user). The
character-wise encodings are matched by one pattern per secret that accepts
each character in any of its encodings (:func:`secret_pattern`): the text is
in effect decoded as it is matched, whatever mix of forms it holds. A match
becomes :data:`MASK`.

A secret shorter than :data:`MIN_SECRET_CHARS` characters is not redacted:
matching ``ab`` would mangle every line, and a secret that short is no
secret. Text cut to a length (a dead letter's error, a rejected answer's
first bytes) is redacted before the cut, and a cut that leaves the start of
a secret at its end has that start masked too.

:func:`redacting` and :func:`redact` are public (``bridges.redacting``,
``bridges.redact``): code that runs routes' endpoints outside ``bridges run``
(Spark executors, an embedding program) redacts the same way.

The process-wide :class:`Redactor` is filled for the duration of a
:func:`redacting` block (``bridges`` holds one around its command,
:func:`~bridges.run_bridge` one around the process, a reload adds the new
config's secrets to it) and applied by :func:`redact`.
"""

from __future__ import annotations

import base64
import collections
import json
import re
import threading
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Final

#: What a secret is replaced with.
MASK: Final = "***"
#: Secrets shorter than this (in characters) are not redacted.
MIN_SECRET_CHARS: Final = 4


def basic_credentials(user: str, password: str) -> str:
    """``user:password`` as HTTP Basic auth sends it (base64 of its UTF-8)."""
    return base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


# -- the forms a secret travels in -----------------------------------------------------------
#
# A peer that echoes a secret may have encoded it: JSON (``\u00e9``, ``\/``), Python's repr
# (``\xe9``), percent-encoding (``%2F`` or ``%2f``, ``+`` for a space, some characters left
# as they are, as httpx leaves ``/`` in a query), any of these escaped again (``\\/`` in the
# repr of a JSON text). Rather than list every combination, each character of a secret
# becomes a pattern of every way it may be written (_char), so a match decodes as it goes.
# Base64 mixes characters, so its forms are listed (_base64_forms).

_SHORT_ESCAPES: Final = {"\n": "n", "\r": "r", "\t": "t", "\b": "b", "\f": "f"}
#: One or more backslashes: an escape, escaped again any number of times (written as
#: one then any more, so that the pattern starts with a literal: see _compile).
_BACKSLASHES: Final = r"\\\\*"


def _hex(value: int, digits: int) -> str:
    """``value`` in hex, either case (``[aA]`` for a letter)."""
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{value:0{digits}x}")


def _ways(char: str) -> list[str]:
    """Patterns for ``char`` written each way a peer's encoding may write it, each
    starting with a literal character."""
    code = ord(char)
    escaped = []
    if code < 0x10000:
        escaped.append("u" + _hex(code, 4))
    else:
        high, low = divmod(code - 0x10000, 0x400)
        escaped.append(f"u{_hex(0xD800 + high, 4)}{_BACKSLASHES}u{_hex(0xDC00 + low, 4)}")
        escaped.append("U" + _hex(code, 8))
    if code < 0x100:
        escaped.append("x" + _hex(code, 2))
    if char in "/\"'\\":
        escaped.append(re.escape(char))
    if char in _SHORT_ESCAPES:
        escaped.append(_SHORT_ESCAPES[char])
    # The escaped forms first: alternatives are tried in order, and a backslash in a
    # secret, written ``\\`` in JSON, must be masked whole, not its first half.
    ways = [f"{_BACKSLASHES}(?:{'|'.join(escaped)})"]
    ways.append("".join(f"%{_hex(byte, 2)}" for byte in char.encode("utf-8", "surrogatepass")))
    if char == " ":
        ways.append(r"\+")
    ways.append(re.escape(char))
    return ways


def secret_pattern(secret: str) -> str:
    r"""A regular expression matching ``secret`` in every character-wise encoding a peer
    may apply (see the module docs): raw, JSON (``\/`` or ``/``, ``\uXXXX`` either case),
    ``repr``, percent-encoding (either case, ``+`` for a space, any characters left raw),
    and any of these escaped again.

    It is an alternation, one branch per way of writing the first character, so that
    each branch starts with a literal character: Python's ``re`` then skips, in C, every
    position a match cannot start at (a pattern that starts otherwise is tried at every
    position of every text, some 20 times slower)."""
    rest = "".join(f"(?:{'|'.join(_ways(char))})" for char in secret[1:])
    return "|".join(way + rest for way in _ways(secret[0]))


def _base64_forms(data: bytes) -> set[str]:
    """The base64 of ``data`` alone (padded), and, for each of the 3 alignments ``data``
    may have inside a longer base64 text, the characters that depend on ``data`` alone;
    standard and URL-safe alphabets."""
    found = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data + b"\0\0").decode("ascii")
        first = -(-8 * shift // 6)  # the first character made of data's bits only
        last = 8 * (shift + len(data)) // 6  # (exclusive)
        found.add(encoded[first:last])
    found.add(base64.b64encode(data).decode("ascii"))
    urlsafe = {form.replace("+", "-").replace("/", "_") for form in found}
    return found | urlsafe


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def forms(secret: str) -> set[str]:
    """The literal ways ``secret`` may be written (long enough to match): as is,
    JSON-escaped (both escapings of ``/``), ``repr``, percent-encoded (both cases of hex,
    ``+`` for a space), base64 (standard and URL-safe, each alignment).

    :func:`secret_pattern` matches all but base64 and more; these are what a cut
    text's end is compared with (:meth:`Redactor.mask_tail`)."""
    quoted = urllib.parse.quote(secret, safe="")
    plus = urllib.parse.quote_plus(secret, safe="")
    as_json = json.dumps(secret)[1:-1]
    written = {
        secret,
        as_json,
        as_json.replace("/", "\\/"),
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        quoted,
        re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quoted),
        plus,
        re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), plus),
        *_base64_forms(_utf8(secret)),
    }
    return {form for form in written if len(form) >= MIN_SECRET_CHARS}


def too_short(secrets: Iterable[str]) -> str | None:
    """A warning when some of ``secrets`` are too short to be redacted, else None."""
    count = sum(1 for secret in secrets if 0 < len(secret) < MIN_SECRET_CHARS)
    if not count:
        return None
    return (
        f"warning: {count} secret value(s) shorter than {MIN_SECRET_CHARS} characters: "
        "not redacted from logs and errors"
    )


class Redactor:
    """A set of secrets (counted: several scopes may hold the same) and their pattern."""

    def __init__(self) -> None:
        self._held: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._patterns: tuple[re.Pattern[str], ...] = ()
        self._forms: tuple[str, ...] = ()

    def add(self, secrets: Iterable[str]) -> list[str]:
        """Redact ``secrets`` (in all their forms) from now on; returns what to pass to
        :meth:`remove` to undo it."""
        added = sorted({secret for secret in secrets if len(secret) >= MIN_SECRET_CHARS})
        with self._lock:
            self._held.update(added)
            self._compile()
        return added

    def remove(self, added: Iterable[str]) -> None:
        """Undo an :meth:`add` (what it returned)."""
        with self._lock:
            self._held.subtract(added)
            self._held = +self._held
            self._compile()

    def _compile(self) -> None:
        # Longest first: a secret that contains another is masked whole.
        literal = {form for secret in self._held for form in forms(secret)}
        self._forms = tuple(sorted(literal, key=len, reverse=True))
        held = sorted(self._held, key=len, reverse=True)
        encoded = {form for secret in held for form in _base64_forms(_utf8(secret))}
        base64_forms = sorted((f for f in encoded if len(f) >= MIN_SECRET_CHARS), key=len)
        alternations = (
            "|".join(secret_pattern(secret) for secret in held),
            "|".join(re.escape(form) for form in reversed(base64_forms)),
        )
        # Two patterns, each an alternation whose branches all start with a literal
        # character (see secret_pattern); base64 forms apart (their characters mix).
        self._patterns = tuple(re.compile(pattern) for pattern in alternations if pattern)

    def redact(self, text: str) -> str:
        """``text`` with every secret held masked, in whatever form it is written."""
        for pattern in self._patterns:
            text = pattern.sub(MASK, text)
        return text

    def redact_cut(self, text: str, limit: int) -> str:
        """``text`` redacted, then cut to ``limit`` characters; when cut, the start of a
        secret left at its end is masked too."""
        text = self.redact(text)
        if len(text) <= limit:
            return text
        return self.mask_tail(text[:limit])

    def mask_tail(self, text: str) -> str:
        """``text`` (cut short by someone) with the start of a secret at its end masked."""
        for form in self._forms:
            for size in range(len(form) - 1, MIN_SECRET_CHARS - 1, -1):
                if text.endswith(form[:size]):
                    return text[:-size] + MASK
        return text


#: The process's secrets.
REDACTOR: Final = Redactor()


def redact(text: str) -> str:
    """``text`` with every secret of the open :func:`redacting` blocks masked (``***``),
    in whatever form a peer wrote it (raw, JSON, ``repr``, percent-encoded, base64)."""
    return REDACTOR.redact(text)


def redact_cut(text: str, limit: int) -> str:
    """:meth:`Redactor.redact_cut` with the process's secrets."""
    return REDACTOR.redact_cut(text, limit)


class Secrets:
    """The secrets of one :func:`redacting` block; :meth:`add` adds more (a reload's)."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._added: list[str] = []

    def add(self, secrets: Iterable[str]) -> None:
        """Redact ``secrets`` too, until the block ends."""
        self._added += self._redactor.add(secrets)

    def close(self) -> None:
        self._redactor.remove(self._added)
        self._added = []


@contextmanager
def redacting(secrets: Iterable[str], redactor: Redactor = REDACTOR) -> Iterator[Secrets]:
    """Redact ``secrets`` by value from everything the process says, for the block.

    Log lines (every handler ``bridges run`` installs), status lines, metrics,
    the ``bridge-error`` header of a dead letter and error texts all go through
    :func:`redact`; this block adds ``secrets`` to what it masks, in every form
    a peer's encoding gives them (see ``docs/explanation/hostile-input.md``).
    Blocks nest and may hold the same secret; each is masked while any block
    holding it is open.

    Args:
      secrets: the values to mask (shorter than 4 characters: left alone), e.g.
        ``bridges.Config.secrets``.
      redactor: whose set to add them to (by default the process's).

    Yields:
      the block's set, whose ``add`` adds more until the block ends (a reload's).
    """
    scope = Secrets(redactor)
    scope.add(secrets)
    try:
        yield scope
    finally:
        scope.close()
