"""How a compiled selector evaluates: ActiveMQ's Java typing, sans-IO.

The parser (:mod:`._selector`) builds a tree of the closures made here; each
takes the message's headers (only those the selector names) and returns a
value: ``None`` (NULL, unknown), ``bool``, ``str``, ``int`` (a Java int),
:class:`JavaLong` or ``float`` (a Java double). Arithmetic wraps as Java's
does, comparisons convert a header to the other side's type as ActiveMQ's
STOMP transport does (``convert_string_expressions``), and what ActiveMQ
fails to evaluate raises :class:`EvalError` (the message does not match).

What an evaluation may spend is bounded (see :class:`Found`): every string
it builds, compares, converts or searches is paid for in characters before
the work is done, and a string longer than the cap is never built. The
parser charges the operations up front (one :data:`OPERATION_WORK` per
token of the selector: no loop runs per message, so a pass does at most
about that many steps).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Final

Value = str | bool | int | float | None

#: What one operation of an evaluation (a node of the tree, about one token
#: of the selector) costs, in the unit of one character of string work: a
#: step of the evaluator (150-300 ns) takes about as long as copying or
#: comparing this many characters (0.1-1 ns each).
OPERATION_WORK: Final = 200
#: What reading one character of a header as a number costs (Java's valueOf:
#: a float of 30,000 digits takes about 3.6 ns a character).
CONVERT_WORK: Final = 4
#: No bound (the evaluations that :meth:`Selector.matches` runs outside a broker).
UNBOUNDED: Final = 2**62


class OutOfWork(Exception):
    """The evaluation spent its work budget, or would build too long a string."""


class Found(dict[str, str]):
    """The headers an evaluation reads (by name), and what it may still spend.

    Attributes:
      left: work units left: characters of strings built, compared,
        converted or searched (operations were paid before the start).
      longest: the longest string the evaluation may build, in characters.
    """

    __slots__ = ("left", "longest")

    def __init__(self, left: int = UNBOUNDED, longest: int = UNBOUNDED) -> None:
        super().__init__()
        self.left = left
        self.longest = longest

    def spend(self, work: int) -> None:
        """Pay ``work`` units before doing the work; OutOfWork when it is not there."""
        left = self.left - work
        self.left = left
        if left < 0:
            raise OutOfWork


Headers = Found
Eval = Callable[[Headers], Value]


class JavaLong(int):
    """A Java long (a plain int is a Java int)."""

    __slots__ = ()


class EvalError(Exception):
    """ActiveMQ throws here: the message does not match."""


_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def _wrap(value: int, long: bool) -> int:
    if long:
        return JavaLong((value - _LONG_MIN) % 2**64 + _LONG_MIN)
    return (value - _INT_MIN) % 2**32 + _INT_MIN


def java_integer(value: int) -> int:
    """A literal's type: int when it fits 32 bits, else long."""
    return value if _INT_MIN <= value <= _INT_MAX else JavaLong(value)


# -- values ---------------------------------------------------------------------

_JAVA_INT: Final = re.compile(r"[+-]?\d+")
_JAVA_DOUBLE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)


def _convert(text: str, like: object) -> Value:
    """``text`` as Java's valueOf of the type of ``like`` reads it; raise ValueError if not."""
    if isinstance(like, bool):
        return text.lower() == "true"
    if isinstance(like, float):
        stripped = text.strip("".join(map(chr, range(33))))
        if not _JAVA_DOUBLE.fullmatch(stripped):
            raise ValueError(text)
        return float(stripped.rstrip("fFdD"))
    if isinstance(like, int):
        if not _JAVA_INT.fullmatch(text):
            raise ValueError(text)
        value = int(text)
        low, high = (_LONG_MIN, LONG_MAX) if isinstance(like, JavaLong) else (_INT_MIN, _INT_MAX)
        if not low <= value <= high:
            raise ValueError(text)
        return value
    raise ValueError(text)


def _java_str(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double(value)
    return str(value)


def _java_double(value: float) -> str:
    """Java's Double.toString (shortest digits; JDK 17 sometimes prints more)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # (never scientific in this range)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    mantissa = f"{text[0]}.{text[1:] or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{len(text) - 1 + exponent}"


def _order_key(value: float) -> tuple[int, float, float]:
    """Java's Double.compare: NaN above everything, -0.0 below 0.0."""
    if math.isnan(value):
        return (1, 0.0, 0.0)
    return (0, value, math.copysign(1.0, value))


def _compare(left: Value, right: Value, h: Headers) -> int | None:
    """ActiveMQ's comparison of two non-NULL values: <0, 0, >0; None: FALSE."""
    if type(left) is not type(right):
        try:
            if isinstance(left, str):
                h.spend(len(left) * CONVERT_WORK)
                left = _convert(left, right)
            elif isinstance(right, str):
                h.spend(len(right) * CONVERT_WORK)
                right = _convert(right, left)
        except ValueError:
            return None
    if isinstance(left, bool) or isinstance(right, bool):
        if not (isinstance(left, bool) and isinstance(right, bool)):
            return None
        return int(left) - int(right)
    if isinstance(left, str) and isinstance(right, str):
        h.spend(len(left) + len(right))
        a, b = left.encode("utf-16-be"), right.encode("utf-16-be")  # Java's char order
        return -1 if a < b else 1 if a > b else 0
    if isinstance(left, float) or isinstance(right, float):
        if not isinstance(left, int | float) or not isinstance(right, int | float):
            return None
        x, y = _order_key(float(left)), _order_key(float(right))
        return -1 if x < y else 1 if x > y else 0
    if isinstance(left, int) and isinstance(right, int):
        return -1 if left < right else 1 if left > right else 0
    return None


def as_boolean(value: Value) -> bool | None:
    """A value where a condition is expected: a header (a string) is FALSE."""
    return value if value is None or isinstance(value, bool) else False


def _arith(op: str, left: Value, right: Value, h: Headers) -> Value:
    if op == "+" and isinstance(left, str):
        text = _java_str(right)
        size = len(left) + len(text)
        if size > h.longest:
            raise OutOfWork
        h.spend(size)
        return left + text
    if (
        isinstance(left, bool)
        or isinstance(right, bool)
        or not isinstance(left, int | float)
        or not isinstance(right, int | float)
    ):
        raise EvalError(op)
    if op in "/%" or isinstance(left, float) or isinstance(right, float):
        a, b = float(left), float(right)
        if op == "/":
            if b == 0:
                return (
                    math.nan
                    if a == 0 or math.isnan(a)
                    else math.copysign(math.inf, a) * (math.copysign(1.0, b))
                )
            return a / b
        if op == "%":
            return math.nan if b == 0 or math.isinf(a) else math.fmod(a, b)
        return a + b if op == "+" else a - b if op == "-" else a * b
    long = isinstance(left, JavaLong) or isinstance(right, JavaLong)
    raw = left + right if op == "+" else left - right if op == "-" else left * right
    return _wrap(raw, long)


# -- evaluators -----------------------------------------------------------------

#: Headers ActiveMQ's STOMP transport turns into JMS headers: not properties.
_HIDDEN: Final = frozenset(
    {
        "type",
        "priority",
        "persistent",
        "expires",
        "timestamp",
        "subscription",
        "redelivered",
        "destination",
        "message-id",
        "receipt",
        "transaction",
        "content-length",
    }
)
#: Set by the session: a message's own id and its redelivered flag.
MESSAGE_ID: Final = "\0message-id"
REDELIVERED: Final = "\0redelivered"


def _header_int(name: str, default: int | None, long: bool) -> Eval:
    def run(h: Headers) -> Value:
        text = h.get(name)
        if text is None:
            return default
        h.spend(len(text) * CONVERT_WORK)
        try:
            return _convert(text, JavaLong(0) if long else 0)
        except ValueError:
            raise EvalError(name) from None

    return run


_JMS: Final[dict[str, Eval]] = {
    "JMSType": lambda h: h.get("type"),
    "JMSCorrelationID": lambda h: h.get("correlation-id"),
    "JMSMessageID": lambda h: h.get(MESSAGE_ID),
    "JMSRedelivered": lambda h: h.get(REDELIVERED) == "true",
    "JMSDeliveryMode": lambda h: (
        "PERSISTENT" if h.get("persistent") == "true" else "NON_PERSISTENT"
    ),
    "JMSPriority": _header_int("priority", 4, long=False),
    "JMSExpiration": _header_int("expires", JavaLong(0), long=True),
    "JMSTimestamp": _header_int("timestamp", None, long=True),
}


def header_value(name: str) -> Eval:
    special = _JMS.get(name)
    if special is not None:
        return special
    if name in _HIDDEN:
        return lambda h: None
    return lambda h: h.get(name)


def is_null(run: Eval, negate: bool) -> Eval:
    if negate:
        return lambda h: run(h) is not None
    return lambda h: run(h) is None


def not_(run: Eval) -> Eval:
    def not_(h: Headers) -> Value:
        value = run(h)
        return None if value is None else not value

    return not_


def negate_value(value: Value) -> Value:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float):
        return -value
    return _wrap(-value, isinstance(value, JavaLong))


def any_of(runs: tuple[Eval, ...]) -> Eval:
    def run(h: Headers) -> Value:
        unknown = False
        for part in runs:
            value = part(h)
            if value is True:
                return True
            unknown = unknown or value is None
        return None if unknown else False

    return run


def all_of(runs: tuple[Eval, ...]) -> Eval:
    def run(h: Headers) -> Value:
        unknown = False
        for part in runs:
            value = part(h)
            if value is False:
                return False
            unknown = unknown or value is None
        return None if unknown else True

    return run


def equal(left: Eval, right: Eval, negate: bool) -> Eval:
    def run(h: Headers) -> Value:
        a, b = left(h), right(h)
        if a is None or b is None:
            if a is None and b is not None:
                return None
            result = a is None  # both NULL: TRUE; only the right one: FALSE
        elif isinstance(a, str) and isinstance(b, str):
            h.spend(min(len(a), len(b)))
            result = a == b
        elif type(a) is type(b) and a == b and not (isinstance(a, float) and a == 0):
            result = True
        elif isinstance(a, bool) and isinstance(b, str):
            raise EvalError("=")  # ActiveMQ: ClassCastException
        else:
            result = _compare(a, b, h) == 0
        if negate:
            return not result
        return result

    return run


_ORDER_TESTS: Final[dict[str, Callable[[int], bool]]] = {
    "<": lambda c: c < 0,
    ">": lambda c: c > 0,
    "<=": lambda c: c <= 0,
    ">=": lambda c: c >= 0,
}


def ordering(op: str, left: Eval, right: Eval) -> Eval:
    test = _ORDER_TESTS[op]

    def run(h: Headers) -> Value:
        a = left(h)
        if a is None:
            return None
        b = right(h)
        if b is None:
            return None
        if isinstance(a, bool) and isinstance(b, str):
            raise EvalError(op)  # ActiveMQ: ClassCastException
        found = _compare(a, b, h)
        return False if found is None else test(found)

    return run


def between(value: Eval, low: Eval, high: Eval, negate: bool) -> Eval:
    # ActiveMQ: x >= low AND x <= high; NOT BETWEEN: x < low OR x > high.
    if negate:
        return any_of((ordering("<", value, low), ordering(">", value, high)))
    return all_of((ordering(">=", value, low), ordering("<=", value, high)))


def arithmetic(op: str, left: Eval, right: Eval) -> Eval:
    def run(h: Headers) -> Value:
        a = left(h)
        if a is None:
            return None
        b = right(h)
        if b is None:
            return None
        return _arith(op, a, b, h)

    return run


#: The most characters of ``%...%`` pieces holding ``_`` that one selector's
#: LIKE patterns may have: each costs up to its length times the value's.
LIKE_SEARCH_BUDGET: Final = 64


def like_matcher(pattern: str, escape: str | None) -> tuple[Callable[[str], bool], int]:
    """LIKE without backtracking: pieces found left to right.

    ``%`` splits the pattern into pieces; the first is anchored at the
    start, the last at the end, and each one in between is taken at its
    leftmost match (which is always safe). Each piece is a regular
    expression of literals and ``.`` only (``_``): no repetition, nothing to
    backtrack into. Anchored pieces, and in-between pieces without ``_``
    (found like a substring, in linear time), cost at most the value's
    length; an in-between piece with ``_`` can cost its length times the
    value's.

    Returns:
      The matcher, and the summed length of in-between pieces with ``_``
      (checked against :data:`LIKE_SEARCH_BUDGET`).
    """
    segments: list[list[str | None]] = [[]]  # None stands for "_"
    chars = iter(pattern)
    for char in chars:
        if escape is not None and char == escape:
            segments[-1].append(next(chars, escape))
        elif char == "%":
            segments.append([])
        elif char == "_":
            segments[-1].append(None)
        else:
            segments[-1].append(char)
    compiled = [
        re.compile("".join("." if c is None else re.escape(c) for c in seg), re.DOTALL)
        for seg in segments
    ]
    if len(compiled) == 1:
        only = compiled[0]
        return (lambda value: only.fullmatch(value) is not None), 0
    first, middle, last = compiled[0], compiled[1:-1], compiled[-1]
    cost = sum(len(seg) for seg in segments[1:-1] if None in seg)
    last_size = len(segments[-1])

    def match(value: str) -> bool:
        head = first.match(value)
        if head is None:
            return False
        at = head.end()
        stop = len(value) - last_size
        for segment in middle:
            found = segment.search(value, at, max(stop, at))
            if found is None:
                return False
            at = found.end()
        return stop >= at and last.fullmatch(value, stop) is not None

    return match, cost


#: The JMS names a selector may use, and the STOMP header each one reads.
JMS_HEADERS: Final = {
    "JMSType": "type",
    "JMSCorrelationID": "correlation-id",
    "JMSMessageID": MESSAGE_ID,
    "JMSRedelivered": REDELIVERED,
    "JMSDeliveryMode": "persistent",
    "JMSPriority": "priority",
    "JMSExpiration": "expires",
    "JMSTimestamp": "timestamp",
}
