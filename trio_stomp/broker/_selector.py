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

import re
from collections.abc import Callable, Iterable
from typing import Final

import attrs

from ._selector_eval import (
    JMS_HEADERS,
    LIKE_SEARCH_BUDGET,
    LONG_MAX,
    MESSAGE_ID,
    OPERATION_WORK,
    REDELIVERED,
    UNBOUNDED,
    Eval,
    EvalError,
    Found,
    Headers,
    JavaLong,
    OutOfWork,
    Value,
    all_of,
    any_of,
    arithmetic,
    as_boolean,
    between,
    equal,
    header_value,
    is_null,
    java_integer,
    like_matcher,
    negate_value,
    not_,
    ordering,
)


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
        self.like_budget = LIKE_SEARCH_BUDGET

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
        return self.node(lambda h: as_boolean(run(h)), node, boolean=True)

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
        return self.node(any_of(runs) if word == "OR" else all_of(runs), *parts, boolean=True)

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
                    equal(left.run, right.run, token.text == "<>"), left, right, boolean=True
                )
            elif self.take("keyword", "IS"):
                negate = self.take("keyword", "NOT") is not None
                self.expect("keyword", "NULL", "NULL")
                left = self.node(is_null(left.run, negate), left, boolean=True)
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
                    ordering(token.text, left.run, right.run), left, right, boolean=True
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
                run = between(left.run, low.run, high.run, negate)
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
        position = self.token.position
        pattern = self.string("a string pattern")
        escape = None
        if self.take("keyword", "ESCAPE"):
            where = self.token.position
            escape = self.string("a string of one character")
            if len(escape) != 1:
                raise SelectorError("ESCAPE takes exactly one character", where)
        match, cost = like_matcher(pattern, escape)
        self.like_budget -= cost
        if self.like_budget < 0:
            raise SelectorError(
                f"LIKE patterns with more than {LIKE_SEARCH_BUDGET} characters between "
                "'%' and '%' in pieces holding '_'",
                position,
            )
        run = left.run
        # Each piece is a pass over the value; a '_' piece in between, its
        # length times, and each of those steps is a regular expression's.
        weight = pattern.count("%") + 1 + 4 * cost

        def like(h: Headers) -> Value:
            value = run(h)
            if value is None:
                return None
            if not isinstance(value, str):
                return negate
            h.spend(len(value) * weight)
            return match(value) != negate

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
            if not isinstance(value, str):
                return negate
            h.spend(len(value))  # (hashed once)
            return (value in choices) != negate

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
            left = self.node(arithmetic(op, left.run, right.run), left, right)
        return left

    def unary(self) -> _Node:
        # Iterative over a run of prefixes, so "- - - x" does not recurse.
        prefixes: list[_Token] = []
        while (self.token.kind == "op" and self.token.text in ("+", "-")) or (
            self.token.kind == "keyword" and self.token.text == "NOT"
        ):
            prefixes.append(self.token)
            self.at += 1
        token = self.token
        if prefixes and prefixes[-1].text == "-" and token.kind == "dec":
            if int(token.text.rstrip("lL")) == LONG_MAX + 1:  # Long.MIN_VALUE, as in Java
                self.at += 1
                prefixes.pop()
                node = _constant(JavaLong(-LONG_MAX - 1))
            else:
                node = self.primary()
        else:
            node = self.primary()
        for token in reversed(prefixes):
            if token.text == "-":
                node = self.negate(node)
            elif token.text == "NOT":
                node = self.condition(node, token.position)
                node = self.node(not_(node.run), node, boolean=True)
        return node

    def negate(self, node: _Node) -> _Node:
        if (
            node.constant
            and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)
        ):
            # Folded, keeping the type: -2147483648 is a negated long, as in
            # ActiveMQ (so 0 - -2147483648 is 2147483648, not a wrapped int).
            return _constant(negate_value(node.value), node.depth)
        run = node.run
        return self.node(lambda h: negate_value(run(h)), node)

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
            if value > LONG_MAX:
                raise SelectorError(f"{text} does not fit in 64 bits", token.position)
            return _constant(java_integer(value))
        if kind == "keyword" and text in ("TRUE", "FALSE", "NULL"):
            return _constant({"TRUE": True, "FALSE": False, "NULL": None}[text], boolean=True)
        if kind == "id":
            self.names.add(text)
            return _Node(header_value(text), property=True)
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


# -- the public face ------------------------------------------------------------


@attrs.frozen(slots=True, eq=False)
class Selector:
    """A compiled selector.

    Attributes:
      text: what the client sent.
      names: the header names it reads (JMS names mapped to their headers).
      work: what its operations cost each evaluation, in work units (see
        :meth:`measure`).
    """

    text: str
    names: frozenset[str]
    _run: Eval
    work: int = 0

    def matches(
        self, headers: Iterable[tuple[str, str]], *, message_id: str = "", redelivered: bool = False
    ) -> bool:
        """True when the selector is TRUE for a message with ``headers``.

        A header that repeats counts with its first value. NULL, FALSE, or
        an evaluation ActiveMQ fails (arithmetic on a string) do not match.
        Nothing bounds the work here (see :meth:`measure`).
        """
        verdict, _ = self.measure(
            headers, message_id=message_id, redelivered=redelivered, allowance=UNBOUNDED
        )
        return verdict is True

    def measure(
        self,
        headers: Iterable[tuple[str, str]],
        *,
        message_id: str = "",
        redelivered: bool = False,
        allowance: int,
        longest: int = UNBOUNDED,
    ) -> tuple[bool | None, int]:
        """Evaluate within a work budget: :meth:`matches`, and what it cost.

        The work is counted in units of one character: each operation costs
        :data:`~._selector_eval.OPERATION_WORK` (paid up front, for every
        token of the selector), and each string built, compared, converted
        or searched costs its length (a LIKE, its length for each piece of
        the pattern), paid before the work is done.

        Args:
          allowance: the most work units the evaluation may spend.
          longest: the longest string it may build (a concatenation), in
            characters.

        Returns:
          True or False (matches or not), or None when the evaluation ran
          out of ``allowance`` or would have built a string longer than
          ``longest`` (it stopped there); and the work it spent (at most
          ``allowance``).
        """
        if allowance < self.work:
            return None, 0
        names = self.names
        found = Found(allowance - self.work, longest)
        for name, value in headers:
            if name in names and name not in found:
                found[name] = value
        if MESSAGE_ID in names:
            found[MESSAGE_ID] = message_id
        if redelivered:
            found[REDELIVERED] = "true"
        try:
            verdict: bool | None = self._run(found) is True
        except EvalError:
            verdict = False
        except OutOfWork:
            verdict = None
        return verdict, min(allowance, allowance - found.left)


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
    names = frozenset(JMS_HEADERS.get(name, name) for name in parser.names)
    return Selector(text, names, node.run, len(parser.tokens) * OPERATION_WORK)


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
