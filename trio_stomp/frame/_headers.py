"""An immutable, ordered multi-map of STOMP headers."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar, Union, overload

_T = TypeVar("_T")

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

    __slots__ = ("_first", "_pairs")

    _pairs: tuple[tuple[str, str], ...]
    _first: dict[str, str] | None

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

    def _lookup(self) -> dict[str, str]:
        first = self._first
        if first is None:
            # dict() keeps the last value of a repeated key, so feed it reversed.
            first = self._first = dict(reversed(self._pairs))
        return first

    def __getitem__(self, name: str) -> str:
        return self._lookup()[name]

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: _T) -> str | _T: ...
    def get(self, name: str, default: object = None) -> object:
        """The first value of ``name``, or ``default`` when it is absent."""
        return self._lookup().get(name, default)

    def getall(self, name: str) -> list[str]:
        """Every value of ``name``, in order (empty when absent)."""
        return [value for key, value in self._pairs if key == name]

    def items(self) -> tuple[tuple[str, str], ...]:
        """Every ``(name, value)`` pair in order, repeats included."""
        return self._pairs

    def keys(self) -> list[str]:
        """The distinct header names, in order of first appearance."""
        return list(self._lookup())

    def __contains__(self, name: object) -> bool:
        return name in self._lookup()

    def __iter__(self) -> Iterator[str]:
        return iter(self._lookup())

    def __len__(self) -> int:
        """The number of pairs, repeats included."""
        return len(self._pairs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self._pairs == other._pairs
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._pairs)

    def __repr__(self) -> str:
        return f"Headers({list(self._pairs)!r})"

    def with_(self, headers: HeadersLike) -> Headers:
        """A copy where each name in ``headers`` is replaced (or appended)."""
        extra = Headers(headers)
        replaced = {name for name, _ in extra._pairs}
        kept = tuple(pair for pair in self._pairs if pair[0] not in replaced)
        return trusted_headers(kept + extra._pairs)

    def without(self, *names: str) -> Headers:
        """A copy with every pair of the given names removed."""
        return trusted_headers(tuple(p for p in self._pairs if p[0] not in names))


# Slot setters: setting through them skips attribute lookup on the instance.
_new = object.__new__
_set_pairs = Headers.__dict__["_pairs"].__set__
_set_first = Headers.__dict__["_first"].__set__


def trusted_headers(pairs: tuple[tuple[str, str], ...]) -> Headers:
    """Headers from pairs of ``str`` already checked: the parser's hot path."""
    headers: Headers = _new(Headers)
    _set_pairs(headers, pairs)
    _set_first(headers, None)
    return headers


def _not_str(name: object, value: object) -> str:
    """The message for a header that is not a pair of str: it names the header and the
    types, never the value (the value may be a passcode)."""
    shown = repr(name) if isinstance(name, str) else f"a {type(name).__name__} name"
    return f"header names and values must be str, got {shown} with a {type(value).__name__} value"
