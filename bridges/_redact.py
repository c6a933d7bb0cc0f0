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
the forms it travels in: as is, JSON-escaped, as Python's ``repr`` writes
it, percent-encoded, and for a URL's password, ``user:password`` in base64
(HTTP Basic auth). A match becomes :data:`MASK`.

A secret shorter than :data:`MIN_SECRET_CHARS` characters is not redacted:
matching ``ab`` would mangle every line, and a secret that short is no
secret. Text cut to a length (a dead letter's error, a rejected answer's
first bytes) is redacted before the cut, and a cut that leaves the start of
a secret at its end has that start masked too.

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


def forms(secret: str) -> set[str]:
    """The ways ``secret`` may be written in text (see the module docs), long enough to match."""
    written = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret, safe=""),
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
        self._pattern: re.Pattern[str] | None = None
        self._forms: tuple[str, ...] = ()

    def add(self, secrets: Iterable[str]) -> list[str]:
        """Redact ``secrets`` (in all their forms) from now on; returns the forms added."""
        added = sorted({form for secret in secrets for form in forms(secret)})
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
        longest = sorted(self._held, key=len, reverse=True)
        self._forms = tuple(longest)
        self._pattern = re.compile("|".join(map(re.escape, longest))) if longest else None

    def redact(self, text: str) -> str:
        """``text`` with every secret held masked."""
        pattern = self._pattern
        return text if pattern is None else pattern.sub(MASK, text)

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
    """``text`` with every secret the process holds masked (see the module docs)."""
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
    """Redact ``secrets`` from everything the process says, for the block."""
    scope = Secrets(redactor)
    scope.add(secrets)
    try:
        yield scope
    finally:
        scope.close()
