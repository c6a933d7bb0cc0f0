"""An immutable, ordered multi-map of STOMP headers."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat
from typing import Final, TypeVar, Union, overload

from ._escaping import unescape

_T = TypeVar("_T")
#: What a lookup returns for a header that is absent (None is a valid default).
_ABSENT: Final = object()
#: True when this module runs compiled (mypyc): a walk over a head's text is then the fast way.
_COMPILED: Final = not __file__.endswith((".py", ".pyc"))

HeadersLike = Union["Headers", Mapping[str, str], Iterable[tuple[str, str]]]


class Headers:
    """STOMP headers: every ``(name, value)`` pair, in order, repeats kept.

    STOMP allows a header to be repeated; the spec says the *first* value wins,
    and later ones are kept only so that a frame can be forwarded unchanged.
    Lookups (``headers["x"]``, :meth:`get`, ``in``) therefore see the first
    value, :meth:`getall` sees all of them, and :meth:`items` yields every pair
    in wire order. Two ``Headers`` are equal when their pairs are equal, in
    order.

    Build one from a mapping or from a sequence of pairs::

        Headers({"destination": "/queue/a"})
        Headers([("x", "1"), ("x", "2")])
    """

    __slots__ = ("_escapes", "_first", "_pairs", "_text")

    # The pairs; None while they are still only in _text (a parsed head,
    # split on first use).
    _pairs: tuple[tuple[str, str], ...] | None
    _first: dict[str, str] | None
    # A frame head as sent ("COMMAND\nname:value\n..."), or None; and how
    # its escapes read (version, lenient), None when it holds no backslash.
    _text: str | None
    _escapes: tuple[str, bool] | None

    def __init__(self, headers: HeadersLike = ()) -> None:
        if isinstance(headers, Headers):
            pairs = headers.items()
        else:
            source = headers.items() if isinstance(headers, Mapping) else headers
            pairs = tuple((name, value) for name, value in source)
            for name, value in pairs:
                if not isinstance(name, str) or not isinstance(value, str):
                    raise TypeError(_not_str(name, value))
        self._pairs = pairs
        self._first = None
        self._text = None
        self._escapes = None

    def _lookup(self) -> dict[str, str]:
        first = self._first
        if first is None:
            first = self._first = self.as_dict()
        return first

    def _find(self, name: str) -> object:
        """The first value of ``name`` (_ABSENT when there is none).

        A parsed head not yet split is searched as text: its every header
        line holds one raw colon after a non-empty name, so ``"\\n" + name
        + ":"`` first matches where the first ``name`` header starts, for a
        name that no escape could spell otherwise (one without newline, and
        when the head holds escapes, without colon, backslash or CR).
        """
        first = self._first
        if first is not None:
            return first.get(name, _ABSENT)
        text = self._text
        escapes = self._escapes
        if (
            text is None
            or "\n" in name
            or (escapes is not None and ("\\" in name or ":" in name or "\r" in name))
        ):
            return self._lookup().get(name, _ABSENT)
        at = text.find("\n" + name + ":")
        if at < 0:
            return _ABSENT
        start = at + len(name) + 2
        stop = text.find("\n", start)
        value = text[start:stop] if stop >= 0 else text[start:]
        if escapes is not None and "\\" in value:
            return unescape(value, *escapes)
        return value

    def __getitem__(self, name: str) -> str:
        value = self._find(name)
        if value is _ABSENT:
            raise KeyError(name)
        return value  # type: ignore[return-value]

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: _T) -> str | _T: ...
    def get(self, name: str, default: object = None) -> object:
        """The first value of ``name``, or ``default`` when it is absent."""
        value = self._find(name)
        return default if value is _ABSENT else value

    def getall(self, name: str) -> list[str]:
        """Every value of ``name``, in order (empty when absent)."""
        return [value for key, value in self.items() if key == name]

    def as_dict(self) -> dict[str, str]:
        """A new dict of each name's first value, in order of first appearance.

        The first value wins, as for lookups; later repeats are left out. The
        dict is the caller's to change. For a parsed head it is built straight
        from the head's text, without splitting the pairs first: the cheapest
        way to take all of a received frame's headers as a plain mapping.
        """
        text = self._text
        if self._pairs is None and text is not None and self._escapes is None:
            return _first_values(text)
        first: dict[str, str] = {}
        for name, value in self.items():
            if name not in first:
                first[name] = value
        return first

    def items(self) -> tuple[tuple[str, str], ...]:
        """Every ``(name, value)`` pair in order, repeats included."""
        pairs = self._pairs
        if pairs is None:
            pairs = self._pairs = _split(self._text or "", self._escapes)
        return pairs

    def keys(self) -> list[str]:
        """The distinct header names, in order of first appearance."""
        return list(self._lookup())

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            return self._find(name) is not _ABSENT
        return name in self._lookup()

    def __iter__(self) -> Iterator[str]:
        return iter(self._lookup())

    def __len__(self) -> int:
        """The number of pairs, repeats included."""
        return len(self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self.items() == other.items()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.items())

    def __repr__(self) -> str:
        return f"Headers({list(self.items())!r})"

    def with_(self, headers: HeadersLike) -> Headers:
        """A copy where each name in ``headers`` is replaced (or appended)."""
        extra = Headers(headers)
        added = extra.items()
        replaced = {name for name, _ in added}
        kept = tuple(pair for pair in self.items() if pair[0] not in replaced)
        return trusted_headers(kept + added)

    def without(self, *names: str) -> Headers:
        """A copy with every pair of the given names removed."""
        return trusted_headers(tuple(p for p in self.items() if p[0] not in names))


class _Checked(Headers):
    """Headers the codec built from parts it has checked: no conversion, no copy."""

    __slots__ = ()

    def __init__(
        self,
        pairs: tuple[tuple[str, str], ...] | None,
        text: str | None,
        escapes: tuple[str, bool] | None,
    ) -> None:
        self._pairs = pairs
        self._first = None
        self._text = text
        self._escapes = escapes


def trusted_headers(pairs: tuple[tuple[str, str], ...]) -> Headers:
    """Headers from pairs of ``str`` already checked: the parser's hot path."""
    return _Checked(pairs, None, None)


def head_headers(text: str, escapes: tuple[str, bool] | None) -> Headers:
    """The headers of a frame head the parser checked, split when first needed.

    ``text`` is the head as sent, command line first, each header line
    ``name:value`` with one raw colon and a non-empty name, escapes checked;
    ``escapes`` is how they read (version, lenient), or None when ``text``
    holds no backslash.
    """
    return _Checked(None, text, escapes)


def _split(text: str, escapes: tuple[str, bool] | None) -> tuple[tuple[str, str], ...]:
    """The pairs of a head that :func:`head_headers` keeps as text.

    Two ways with one result, as :func:`_first_values`: compiled, a walk over
    the text (:func:`_pairs_walk`); in pure Python, C's split and partition.
    """
    if escapes is None:
        if _COMPILED:
            return _pairs_walk(text)
        lines = text.split("\n")
        del lines[0]  # the command line
        return tuple([(name, value) for name, _, value in map(str.partition, lines, repeat(":"))])
    version, lenient = escapes
    return tuple(
        [
            (
                unescape(name, version, lenient) if "\\" in name else name,
                unescape(value, version, lenient) if "\\" in value else value,
            )
            for name, value in _pairs_walk(text)
        ]
    )


def _pairs_walk(text: str) -> tuple[tuple[str, str], ...]:
    """Every header line's name and value (split at its first colon), sliced from the text.

    The walk of :func:`_first_values_walk`, keeping every pair: that one keeps
    its own loop, since building the pairs first costs it 30% (0.69 -> 0.90 us
    for a RabbitMQ MESSAGE's six headers, compiled).
    """
    pairs: list[tuple[str, str]] = []
    size = len(text)
    start = text.find("\n") + 1
    while start > 0:  # at the start of a header line
        stop = text.find("\n", start)
        end = size if stop < 0 else stop
        colon = text.find(":", start, end)
        if colon >= 0:
            pairs.append((text[start:colon], text[colon + 1 : end]))
        else:
            pairs.append((text[start:end], ""))
        start = stop + 1
    return tuple(pairs)


def _first_values(text: str) -> dict[str, str]:
    """:meth:`Headers.as_dict` of a head kept as text without escapes (see :func:`_split`).

    Two ways with one result (a property test holds them equal), as in
    :mod:`._shape`: compiled, a walk over the text; in pure Python, C's
    split and dict over all of its lines at once.
    """
    if _COMPILED:
        return _first_values_walk(text)
    return _first_values_at_once(text)


def _first_values_walk(text: str) -> dict[str, str]:
    """:func:`_first_values`, one line at a time, sliced from the text."""
    first: dict[str, str] = {}
    size = len(text)
    start = text.find("\n") + 1
    while start > 0:  # at the start of a header line
        stop = text.find("\n", start)
        end = size if stop < 0 else stop
        colon = text.find(":", start, end)
        name = text[start:colon] if colon >= 0 else text[start:end]
        if name not in first:
            first[name] = text[colon + 1 : end] if colon >= 0 else ""
        start = stop + 1
    return first


def _first_values_at_once(text: str) -> dict[str, str]:
    """:func:`_first_values` in C loops: every header line split at its first colon at once."""
    lines = text.split("\n")
    del lines[0]  # the command line
    try:
        first: dict[str, str] = dict(map(str.split, lines, repeat(":"), repeat(1)))
    except ValueError:  # a line without a colon (never in a checked head)
        return _first_values_walk(text)
    # A shorter dict: a name repeated, whose last value dict() kept.
    return first if len(first) == len(lines) else _first_values_walk(text)


def _not_str(name: object, value: object) -> str:
    """The message for a header that is not a pair of str: it names the header and the
    types, never the value (the value may be a passcode)."""
    shown = repr(name) if isinstance(name, str) else f"a {type(name).__name__} name"
    return f"header names and values must be str, got {shown} with a {type(value).__name__} value"
