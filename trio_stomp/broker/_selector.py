"""Message selectors, sans-IO: ActiveMQ's SQL-92 subset over STOMP headers.

A SUBSCRIBE with a ``selector`` header gets only the messages whose headers
make the selector TRUE. :func:`compile_selector` parses the text once (an
untrusted client's input: its length and nesting are bounded, and a bad one
is a :class:`SelectorError` naming the position); :meth:`Selector.matches`
runs it per message without recursion deeper than the nesting it allowed,
and without a regular expression that can backtrack.

The language and its typing follow ActiveMQ 5.17's STOMP transport, checked
against it by tests/trio_stomp/broker/test_selector_activemq.py:

- Grammar (loosest first): ``OR``; ``AND``; ``=``, ``<>``, ``IS [NOT] NULL``;
  ``<``, ``>``, ``<=``, ``>=``, ``[NOT] LIKE p [ESCAPE c]``, ``[NOT] BETWEEN
  x AND y``, ``[NOT] IN ('s', ...)``; ``+``, ``-``; ``*``, ``/``, ``%``; unary
  ``+``, ``-`` and ``NOT``. As in ActiveMQ, ``NOT`` binds tighter than a
  comparison: write ``NOT (a = 'x')``. Keywords are case-insensitive,
  identifiers are not. ``/* ... */`` is a comment.
- Literals: ``'strings'`` (``''`` is a quote), integers (decimal, ``0x`` hex,
  ``0`` octal, optional ``L``: a Java int when it fits, else a long; beyond
  64 bits an error, where ActiveMQ silently never matches), decimals
  (``1.5``, ``.5``, ``1e3``: a double), ``TRUE``, ``FALSE``, ``NULL``.
- Identifiers name headers, whose values are strings. A header compared with
  a number or a boolean is converted to that type first (Java's
  ``Integer/Long/Double/Boolean.valueOf``); one that does not convert makes
  the comparison FALSE. ``+`` with a string on its left concatenates.
- Missing headers are NULL, with JMS's three-valued logic, and ActiveMQ's
  equality: ``x = y`` is TRUE when both are NULL, NULL when only the left
  one is, FALSE when only the right one is.
- The headers ActiveMQ turns into JMS headers are not properties:
  ``type``, ``priority``, ``persistent``, ``expires``, ``timestamp``,
  ``reply-to``, ``correlation-id`` (and what the broker sets). They are read
  as ``JMSType``, ``JMSPriority`` (4 when absent), ``JMSDeliveryMode``
  (``'PERSISTENT'`` when ``persistent:true``), ``JMSExpiration`` (0 when
  absent), ``JMSTimestamp`` (NULL when absent, where ActiveMQ uses its
  clock), ``JMSCorrelationID``, ``JMSMessageID``, ``JMSRedelivered``.
- What ActiveMQ fails to evaluate (arithmetic on a string, a boolean
  compared with a string) makes the selector not match that message.
  ActiveMQ also fails the SEND with an ERROR there; this broker does not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Final

import attrs

__all__ = ["Selector", "SelectorError", "compile_selector", "subscription_selector"]

Value = str | bool | int | float | None
Headers = dict[str, str]
Eval = Callable[[Headers], Value]


class SelectorError(ValueError):
    """A selector that does not parse, or breaks a limit.

    Attributes:
      message: what is wrong.
      position: where, 1-based, in characters of the selector.
    """

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"at position {position}: {message}")
        self.message = message
        self.position = position


class _Long(int):
    """A Java long (a plain int is a Java int)."""

    __slots__ = ()


class _EvalError(Exception):
    """ActiveMQ throws here: the message does not match."""


_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _wrap(value: int, long: bool) -> int:
    if long:
        return _Long((value - _LONG_MIN) % 2**64 + _LONG_MIN)
    return (value - _INT_MIN) % 2**32 + _INT_MIN


def _integer(value: int) -> int:
    """A literal's type: int when it fits 32 bits, else long."""
    return value if _INT_MIN <= value <= _INT_MAX else _Long(value)


# -- tokens ---------------------------------------------------------------------

_KEYWORDS: Final = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "TRUE", "FALSE", "NULL"}
)
_UNSUPPORTED: Final = frozenset({"XPATH", "XQUERY"})
_TOKEN: Final = re.compile(
    r"""
    (?P<space>[ \t\n\r\f]+|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)
    |(?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
    |(?P<hex>0[xX][0-9a-fA-F]+[lL]?)
    |(?P<dec>[1-9][0-9]*[lL]?)
    |(?P<oct>0[0-7]*)
    |(?P<string>'(?:[^']|'')*')
    |(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
    |(?P<op><>|<=|>=|[=<>()+\-*/%,])
    """,
    re.VERBOSE,
)


@attrs.frozen(slots=True)
class _Token:
    kind: str  # float, hex, dec, oct, string, id, keyword, op, end
    text: str
    position: int  # 1-based


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    at, end = 0, len(text)
    while at < end:
        found = _TOKEN.match(text, at)
        if found is None:
            what = "an unterminated string" if text[at] == "'" else repr(text[at])
            raise SelectorError(f"unexpected {what}", at + 1)
        kind = found.lastgroup or ""
        word = found.group()
        if kind == "id" and word.upper() in _KEYWORDS:
            kind, word = "keyword", word.upper()
        elif kind == "id" and word.upper() in _UNSUPPORTED:
            raise SelectorError(f"{word.upper()} (a body query) is not supported", at + 1)
        if kind != "space":
            tokens.append(_Token(kind, word, at + 1))
        at = found.end()
    tokens.append(_Token("end", "", end + 1))
    return tokens


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
        low, high = (_LONG_MIN, _LONG_MAX) if isinstance(like, _Long) else (_INT_MIN, _INT_MAX)
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


def _compare(left: Value, right: Value) -> int | None:
    """ActiveMQ's comparison of two non-NULL values: <0, 0, >0; None: FALSE."""
    if type(left) is not type(right):
        try:
            if isinstance(left, str):
                left = _convert(left, right)
            elif isinstance(right, str):
                right = _convert(right, left)
        except ValueError:
            return None
    if isinstance(left, bool) or isinstance(right, bool):
        if not (isinstance(left, bool) and isinstance(right, bool)):
            return None
        return int(left) - int(right)
    if isinstance(left, str) and isinstance(right, str):
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


def _boolean(value: Value) -> bool | None:
    """A value where a condition is expected: a header (a string) is FALSE."""
    return value if value is None or isinstance(value, bool) else False


def _arith(op: str, left: Value, right: Value) -> Value:
    if op == "+" and isinstance(left, str):
        return left + _java_str(right)
    if (
        isinstance(left, bool)
        or isinstance(right, bool)
        or not isinstance(left, int | float)
        or not isinstance(right, int | float)
    ):
        raise _EvalError(op)
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
    long = isinstance(left, _Long) or isinstance(right, _Long)
    raw = left + right if op == "+" else left - right if op == "-" else left * right
    return _wrap(raw, long)


# -- the parser -----------------------------------------------------------------

_EQUALITY: Final = frozenset({"=", "<>"})
_ORDERING: Final = frozenset({"<", ">", "<=", ">="})


@attrs.frozen(slots=True)
class _Node:
    """A compiled expression: its evaluator, and what the checks need to know."""

    run: Eval
    boolean: bool = False  # ActiveMQ's BooleanExpression
    constant: bool = False
    value: Value = None  # the constant's value
    depth: int = 1
    property: bool = False  # a header (ActiveMQ's PropertyExpression)


class _Parser:
    def __init__(self, text: str, max_depth: int) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.max_depth = max_depth
        self.names: set[str] = set()
        self.nesting = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.at]

    def take(self, kind: str, text: str | None = None) -> _Token | None:
        token = self.tokens[self.at]
        if token.kind == kind and (text is None or token.text == text):
            self.at += 1
            return token
        return None

    def expect(self, kind: str, text: str, what: str) -> _Token:
        token = self.take(kind, text)
        if token is None:
            raise self.unexpected(what)
        return token

    def unexpected(self, what: str) -> SelectorError:
        token = self.token
        found = "the end" if token.kind == "end" else repr(token.text)
        return SelectorError(f"expected {what}, found {found}", token.position)

    def node(self, run: Eval, *parts: _Node, boolean: bool = False) -> _Node:
        depth = 1 + max((part.depth for part in parts), default=0)
        if depth > self.max_depth:
            raise SelectorError(f"nested deeper than {self.max_depth}", self.token.position)
        return _Node(run, boolean=boolean, depth=depth)

    def condition(self, node: _Node, position: int) -> _Node:
        """ActiveMQ's asBooleanExpression: a header is read as a boolean (FALSE)."""
        if node.boolean:
            return node
        if not node.property:
            raise SelectorError("this expression is not a condition", position)
        run = node.run
        return self.node(lambda h: _boolean(run(h)), node, boolean=True)

    # or / and: n-ary, so long chains do not nest
    def parse(self) -> _Node:
        position = self.token.position
        node = self.condition(self.or_(), position)
        if self.token.kind != "end":
            raise self.unexpected("an operator or the end")
        return node

    def or_(self) -> _Node:
        return self.logic("OR", self.and_)

    def and_(self) -> _Node:
        return self.logic("AND", self.equality)

    def logic(self, word: str, operand: Callable[[], _Node]) -> _Node:
        position = self.token.position
        first = operand()
        if not (self.token.kind == "keyword" and self.token.text == word):
            return first
        parts = [self.condition(first, position)]
        while self.take("keyword", word):
            position = self.token.position
            parts.append(self.condition(operand(), position))
        runs = tuple(part.run for part in parts)
        return self.node(_any(runs) if word == "OR" else _all(runs), *parts, boolean=True)

    def equality(self) -> _Node:
        left = self.comparison()
        while True:
            token = self.token
            if token.kind == "op" and token.text in _EQUALITY:
                self.at += 1
                right = self.comparison()
                _check_equal(left, token.position)
                _check_equal(right, token.position)
                if left.constant and right.constant and left.boolean and not right.boolean:
                    raise SelectorError("a boolean compared with a non-boolean", token.position)
                left = self.node(
                    _equal(left.run, right.run, token.text == "<>"), left, right, boolean=True
                )
            elif self.take("keyword", "IS"):
                negate = self.take("keyword", "NOT") is not None
                self.expect("keyword", "NULL", "NULL")
                left = self.node(_is_null(left.run, negate), left, boolean=True)
            else:
                return left

    def comparison(self) -> _Node:
        left = self.additive()
        while True:
            token = self.token
            if token.kind == "op" and token.text in _ORDERING:
                self.at += 1
                right = self.additive()
                _check_ordered(left, token.position)
                _check_ordered(right, token.position)
                left = self.node(
                    _ordering(token.text, left.run, right.run), left, right, boolean=True
                )
                continue
            negate = token.kind == "keyword" and token.text == "NOT"
            if negate:
                self.at += 1
            if self.take("keyword", "LIKE"):
                left = self.like(left, negate)
            elif self.take("keyword", "BETWEEN"):
                low = self.additive()
                self.expect("keyword", "AND", "AND")
                high = self.additive()
                for part in (left, low, high):
                    _check_ordered(part, token.position)
                run = _between(left.run, low.run, high.run, negate)
                left = self.node(run, left, low, high, boolean=True)
            elif self.take("keyword", "IN"):
                if not left.property:
                    raise SelectorError("IN needs a header name on its left", token.position)
                left = self.in_(left, negate)
            elif negate:
                raise self.unexpected("LIKE, BETWEEN or IN after NOT")
            else:
                return left

    def like(self, left: _Node, negate: bool) -> _Node:
        pattern = self.string("a string pattern")
        escape = None
        if self.take("keyword", "ESCAPE"):
            position = self.token.position
            escape = self.string("a string of one character")
            if len(escape) != 1:
                raise SelectorError("ESCAPE takes exactly one character", position)
        match = _like_matcher(pattern, escape)
        run = left.run

        def like(h: Headers) -> Value:
            value = run(h)
            if value is None:
                return None
            return (isinstance(value, str) and match(value)) != negate

        return self.node(like, left, boolean=True)

    def in_(self, left: _Node, negate: bool) -> _Node:
        self.expect("op", "(", "'(' after IN")
        items = {self.string("a string")}
        while self.take("op", ","):
            items.add(self.string("a string"))
        self.expect("op", ")", "',' or ')'")
        choices = frozenset(items)
        run = left.run

        def in_(h: Headers) -> Value:
            value = run(h)
            if value is None:
                return None
            return (isinstance(value, str) and value in choices) != negate

        return self.node(in_, left, boolean=True)

    def string(self, what: str) -> str:
        token = self.take("string")
        if token is None:
            raise self.unexpected(what)
        return token.text[1:-1].replace("''", "'")

    def additive(self) -> _Node:
        return self.arithmetic(("+", "-"), self.multiplicative)

    def multiplicative(self) -> _Node:
        return self.arithmetic(("*", "/", "%"), self.unary)

    def arithmetic(self, ops: tuple[str, ...], operand: Callable[[], _Node]) -> _Node:
        left = operand()
        while self.token.kind == "op" and self.token.text in ops:
            op = self.tokens[self.at].text
            self.at += 1
            right = operand()
            left = self.node(_arithmetic(op, left.run, right.run), left, right)
        return left

    def unary(self) -> _Node:
        # Iterative over a run of prefixes, so "- - - x" does not recurse.
        prefixes: list[_Token] = []
        while (self.token.kind == "op" and self.token.text in ("+", "-")) or (
            self.token.kind == "keyword" and self.token.text == "NOT"
        ):
            prefixes.append(self.token)
            self.at += 1
        node = self.primary()
        for token in reversed(prefixes):
            if token.text == "-":
                node = self.negate(node)
            elif token.text == "NOT":
                node = self.condition(node, token.position)
                node = self.node(_not(node.run), node, boolean=True)
        return node

    def negate(self, node: _Node) -> _Node:
        if (
            node.constant
            and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)
        ):
            value = node.value
            negated = -value if isinstance(value, float) else _integer(-value)
            return _constant(negated, node.depth)
        run = node.run
        return self.node(lambda h: _negate(run(h)), node)

    def primary(self) -> _Node:
        token = self.token
        self.at += 1
        kind, text = token.kind, token.text
        if kind == "op" and text == "(":
            # Each level of parentheses costs about 12 frames of this parser.
            self.nesting += 1
            if self.nesting > self.max_depth:
                raise SelectorError(
                    f"parentheses nested deeper than {self.max_depth}", token.position
                )
            node = self.or_()
            self.nesting -= 1
            self.expect("op", ")", "')'")
            return node
        if kind == "string":
            return _constant(text[1:-1].replace("''", "'"))
        if kind == "float":
            return _constant(float(text))
        if kind in ("dec", "hex", "oct"):
            digits = text.rstrip("lL")
            base = 16 if kind == "hex" else 8 if kind == "oct" and len(digits) > 1 else 10
            value = int(digits[2:] if kind == "hex" else digits, base)
            if value > _LONG_MAX:
                raise SelectorError(f"{text} does not fit in 64 bits", token.position)
            return _constant(_integer(value))
        if kind == "keyword" and text in ("TRUE", "FALSE", "NULL"):
            return _constant({"TRUE": True, "FALSE": False, "NULL": None}[text], boolean=True)
        if kind == "id":
            self.names.add(text)
            return _Node(_property(text), property=True)
        self.at -= 1
        raise self.unexpected("a value, a header name or '('")


def _constant(value: Value, depth: int = 1, *, boolean: bool = False) -> _Node:
    return _Node(lambda h: value, boolean=boolean, constant=True, value=value, depth=depth)


def _check_equal(node: _Node, position: int) -> None:
    if node.constant and node.value is None:
        raise SelectorError("NULL cannot be compared (use IS NULL)", position)


def _check_ordered(node: _Node, position: int) -> None:
    if node.boolean or (node.constant and not isinstance(node.value, int | float)):
        raise SelectorError("only numbers and headers can be ordered", position)


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
        try:
            return _convert(text, _Long(0) if long else 0)
        except ValueError:
            raise _EvalError(name) from None

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
    "JMSExpiration": _header_int("expires", _Long(0), long=True),
    "JMSTimestamp": _header_int("timestamp", None, long=True),
}


def _property(name: str) -> Eval:
    special = _JMS.get(name)
    if special is not None:
        return special
    if name in _HIDDEN:
        return lambda h: None
    return lambda h: h.get(name)


def _is_null(run: Eval, negate: bool) -> Eval:
    if negate:
        return lambda h: run(h) is not None
    return lambda h: run(h) is None


def _not(run: Eval) -> Eval:
    def not_(h: Headers) -> Value:
        value = run(h)
        return None if value is None else not value

    return not_


def _negate(value: Value) -> Value:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float):
        return -value
    return _wrap(-value, isinstance(value, _Long))


def _any(runs: tuple[Eval, ...]) -> Eval:
    def run(h: Headers) -> Value:
        unknown = False
        for part in runs:
            value = part(h)
            if value is True:
                return True
            unknown = unknown or value is None
        return None if unknown else False

    return run


def _all(runs: tuple[Eval, ...]) -> Eval:
    def run(h: Headers) -> Value:
        unknown = False
        for part in runs:
            value = part(h)
            if value is False:
                return False
            unknown = unknown or value is None
        return None if unknown else True

    return run


def _equal(left: Eval, right: Eval, negate: bool) -> Eval:
    def run(h: Headers) -> Value:
        a, b = left(h), right(h)
        if a is None or b is None:
            if a is None and b is not None:
                return None
            result = a is None  # both NULL: TRUE; only the right one: FALSE
        elif type(a) is type(b) and a == b and not (isinstance(a, float) and a == 0):
            result = True
        elif isinstance(a, bool) and isinstance(b, str):
            raise _EvalError("=")  # ActiveMQ: ClassCastException
        else:
            result = _compare(a, b) == 0
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


def _ordering(op: str, left: Eval, right: Eval) -> Eval:
    test = _ORDER_TESTS[op]

    def run(h: Headers) -> Value:
        a = left(h)
        if a is None:
            return None
        b = right(h)
        if b is None:
            return None
        if isinstance(a, bool) and isinstance(b, str):
            raise _EvalError(op)  # ActiveMQ: ClassCastException
        found = _compare(a, b)
        return False if found is None else test(found)

    return run


def _between(value: Eval, low: Eval, high: Eval, negate: bool) -> Eval:
    # ActiveMQ: x >= low AND x <= high; NOT BETWEEN: x < low OR x > high.
    if negate:
        return _any((_ordering("<", value, low), _ordering(">", value, high)))
    return _all((_ordering(">=", value, low), _ordering("<=", value, high)))


def _arithmetic(op: str, left: Eval, right: Eval) -> Eval:
    def run(h: Headers) -> Value:
        a = left(h)
        if a is None:
            return None
        b = right(h)
        if b is None:
            return None
        return _arith(op, a, b)

    return run


def _like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """LIKE without backtracking: literal runs found left to right.

    ``%`` splits the pattern into segments; the first is anchored at the
    start, the last at the end, and each one in between is taken at its
    leftmost match (which is always safe). A segment with ``_`` becomes a
    regular expression of literals and ``.`` only: no repetition, so its
    search costs at most its length times the value's.
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
        return lambda value: only.fullmatch(value) is not None
    first, middle, last = compiled[0], compiled[1:-1], compiled[-1]
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

    return match


# -- the public face ------------------------------------------------------------


@attrs.frozen(slots=True, eq=False)
class Selector:
    """A compiled selector.

    Attributes:
      text: what the client sent.
      names: the header names it reads (JMS names mapped to their headers).
    """

    text: str
    names: frozenset[str]
    _run: Eval

    def matches(
        self, headers: Iterable[tuple[str, str]], *, message_id: str = "", redelivered: bool = False
    ) -> bool:
        """True when the selector is TRUE for a message with ``headers``.

        A header that repeats counts with its first value. NULL, FALSE, or
        an evaluation ActiveMQ fails (arithmetic on a string) do not match.
        """
        names = self.names
        found: Headers = {}
        for name, value in headers:
            if name in names and name not in found:
                found[name] = value
        if MESSAGE_ID in names:
            found[MESSAGE_ID] = message_id
        if redelivered:
            found[REDELIVERED] = "true"
        try:
            return self._run(found) is True
        except _EvalError:
            return False


_NAMES_OF_JMS: Final = {
    "JMSType": "type",
    "JMSCorrelationID": "correlation-id",
    "JMSMessageID": MESSAGE_ID,
    "JMSRedelivered": REDELIVERED,
    "JMSDeliveryMode": "persistent",
    "JMSPriority": "priority",
    "JMSExpiration": "expires",
    "JMSTimestamp": "timestamp",
}


def compile_selector(text: str, *, max_length: int = 4096, max_depth: int = 40) -> Selector:
    """Parse a selector; see the module's docstring for the language.

    Args:
      text: the SUBSCRIBE's ``selector`` header.
      max_length: the longest selector accepted, in characters.
      max_depth: the deepest nesting of its expression tree, and of its
        parentheses: bounds the stack that parsing and evaluation use
        (``AND`` and ``OR`` chains do not nest).

    Raises:
      SelectorError: it is empty, too long, too deep, or does not parse;
        the message names the position.
    """
    if len(text) > max_length:
        raise SelectorError(f"longer than {max_length} characters", max_length + 1)
    if not text.strip():
        raise SelectorError("the selector is empty", 1)
    parser = _Parser(text, max_depth)
    node = parser.parse()
    names = frozenset(_NAMES_OF_JMS.get(name, name) for name in parser.names)
    return Selector(text, names, node.run)


def subscription_selector(text: str | None, *, max_length: int, max_depth: int) -> Selector | None:
    """The selector of a SUBSCRIBE's ``selector`` header (None when it has none).

    Raises:
      ValueError: ``(message, detail)`` for the session's ERROR frame: the
        message names the position, the detail shows it under the selector.
    """
    if text is None:
        return None
    try:
        return compile_selector(text, max_length=max_length, max_depth=max_depth)
    except SelectorError as exc:
        shown = text if len(text) <= 200 else text[:200] + "..."
        caret = " " * (exc.position - 1) + "^" if exc.position <= 200 else ""
        raise ValueError(f"invalid selector: {exc}", f"{shown}\n{caret}\n{exc}") from None
