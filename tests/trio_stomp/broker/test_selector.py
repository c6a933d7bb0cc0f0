"""The selector language, sans-IO: parsing, ActiveMQ's typing, errors and bounds.

Every expected answer in ``ACTIVEMQ_TABLE`` is what ActiveMQ 5.17's STOMP
transport delivered for the same selector and headers (recorded by hand with
the same 16 messages; test_selector_activemq.py checks such cases live).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_stomp.broker._selector import SelectorError, compile_selector, subscription_selector

VALUES = [
    "5", "abc", None, "5.0", "true", "false", " 5", "+5",
    "1e1", "5d", "0x10", "16", "8", "b", "NaN", "-5",
]  # fmt: skip
ALL = list(range(len(VALUES)))


def selected(selector: str) -> list[int]:
    compiled = compile_selector(selector)
    return [
        index
        for index, value in enumerate(VALUES)
        if compiled.matches([] if value is None else [("a", value)])
    ]


ACTIVEMQ_TABLE = {
    # strings against numbers: the header is read as the number's type (Java valueOf)
    "a = 5": [0, 7],
    "a = 5.0": [0, 3, 6, 7, 9],
    "a > 3": [0, 7, 11, 12],
    "a > 3.0": [0, 3, 6, 7, 8, 9, 11, 12, 14],
    "a > .5": [0, 3, 6, 7, 8, 9, 11, 12, 14],
    "a = 0x10": [11],
    "a = 010": [12],
    "a = 5L": [0, 7],
    "a = -5": [15],
    "a = - 5": [15],
    "a = TRUE": [4],
    "a = FALSE": [0, 1, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    "a = '5'": [0],
    "a BETWEEN 1 AND 9": [0, 7, 12],
    "NOT (a BETWEEN 1 AND 9)": [1, 3, 4, 5, 6, 8, 9, 10, 11, 13, 14, 15],
    "a NOT BETWEEN 1 AND 9": [11, 15],
    "a > 1 AND a < 9": [0, 7, 12],
    "a = 2147483648 - 2147483643": [0, 7],
    # strings
    "a IN ('5','abc')": [0, 1],
    "a NOT IN ('5', 'abc')": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    "NOT (a IN ('5'))": [1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    "a LIKE '5%'": [0, 3, 9],
    "a NOT LIKE '5%'": [1, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15],
    "a LIKE 'a_c'": [1],
    "a LIKE '5_'": [9],
    "a LIKE '%'": [0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    "a LIKE '5\\%' ESCAPE '\\'": [],
    "0 NOT LIKE '%'": ALL,
    "0 LIKE '%'": [],
    "a + 'x' = '5x'": [0],
    "a + a = '55'": [0],
    "a < b": [],
    # NULL: three-valued logic, and ActiveMQ's equality
    "a IS NULL": [2],
    "a is null": [2],
    "A IS NULL": ALL,
    "a = b": [2],
    "b = c": ALL,
    "a <> b": [0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    "NOT (b <> c)": ALL,
    "NOT (a = 'x')": [0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    "NOT ('x' = a)": ALL,
    "'x' = a": [],
    "NOT (a <> 'x')": [],
    "NOT (b = 'x' AND FALSE)": ALL,
    "NOT (b = 'x' OR FALSE)": [],
    "NOT NULL": [],
    "NULL": [],
    "TRUE": ALL,
    "FALSE": [],
    # NOT binds tighter than a comparison, as in ActiveMQ's grammar
    "NOT a IS NULL": [2],
    "a": [],
    # arithmetic: Java int, long and double
    "5 / 2 = 2.5": ALL,
    "5 / 2 = 2": [],
    "5 % 2 = 1": ALL,
    "-5 % 3 = -2": ALL,
    "5 % 2.5 = 0": ALL,
    "-5.5 % 2 = -1.5": ALL,
    "5 % 0 IS NULL": [],
    "5 / 0 = 1": [],
    "2147483647 + 1 = -2147483648": ALL,
    "2147483647 + 1 = 2147483648": [],
    "0 < 0 - -2147483648": ALL,
    "-2147483648 - 1 = -2147483649": ALL,
    "-9223372036854775808 = -9223372036854775807 - 1": ALL,
    "-9223372036854775808 - 1 = 9223372036854775807": ALL,
    "a = 9223372036854775807 + 1": [],
    "0.0 = -0.0": [],
    "-a = -5": [],
    "1 = TRUE": [],
    "1 = 1 = TRUE": ALL,
    "(a = '5') = TRUE": [0],
    "'x' + 1.5 = 'x1.5'": ALL,
    "'x' + 1e20 = 'x1.0E20'": ALL,
    "'x' + 0.0001 = 'x1.0E-4'": ALL,
    "'x' + (5 % 2) = 'x1.0'": ALL,
    "'x' + (1 = 1) = 'xtrue'": ALL,
    # "--" is two minus signs, not a comment
    "a = '5' -- comment": [2],
    "a = /* c */ '5'": [0],
    # ActiveMQ fails the SEND with an ERROR for these (ClassCastException,
    # arithmetic on a string); here they just do not match
    "NOT a = '5'": [],
    "TRUE = a": [],
    "1 + a = 6": [],
    "a * 1 = 5": [],
    "a / 0 = 1": [],
}


@pytest.mark.parametrize(("selector", "expected"), list(ACTIVEMQ_TABLE.items()))
def test_selects_what_activemq_selects(selector: str, expected: list[int]) -> None:
    assert selected(selector) == expected


REFUSED = {
    # selector: (position, words in the message)
    "": (1, "empty"),
    "   ": (1, "empty"),
    "\"a\" = '5'": (1, "unexpected"),
    "a < 'b'": (3, "ordered"),
    "a > TRUE": (3, "ordered"),
    "a BETWEEN 'a' AND 'c'": (3, "ordered"),
    "a BETWEEN NULL AND 9": (3, "ordered"),
    "a LIKE 'x' ESCAPE 'ab'": (19, "exactly one character"),
    "a IN (5)": (7, "expected a string"),
    "a IN ('5', NULL)": (12, "expected a string"),
    "a LIKE NULL": (8, "expected a string pattern"),
    "a = NULL": (3, "NULL cannot be compared"),
    "NULL = a": (6, "NULL cannot be compared"),
    "TRUE = 1": (6, "boolean compared"),
    "a = 1 AND 1": (11, "not a condition"),
    "1": (1, "not a condition"),
    "'x'": (1, "not a condition"),
    "a XOR b": (3, "expected an operator or the end"),
    "a = 'x' AND": (12, "expected a value"),
    "a = 'x": (5, "unterminated string"),
    "a = 9223372036854775808": (5, "64 bits"),
    "XPATH '//x'": (1, "not supported"),
    "a = 'x' AND (b = 'y'": (21, "expected ')'"),
    "a # 1": (3, "unexpected '#'"),
    "5 IN ('5')": (3, "IN needs a header name"),
    "a + 'x' NOT IN ('5x')": (9, "IN needs a header name"),
}


@pytest.mark.parametrize(("selector", "where"), list(REFUSED.items()))
def test_a_bad_selector_names_the_position(selector: str, where: tuple[int, str]) -> None:
    position, words = where
    with pytest.raises(SelectorError) as raised:
        compile_selector(selector)
    assert raised.value.position == position, raised.value
    assert words in raised.value.message
    assert str(raised.value).startswith(f"at position {position}: ")


def test_the_session_error_shows_the_position_under_the_selector() -> None:
    with pytest.raises(ValueError, match="invalid selector") as raised:
        subscription_selector("a = 'x' AND", max_length=100, max_depth=10)
    message, detail = raised.value.args
    assert message == (
        "invalid selector: at position 12: expected a value, a header name or '(', found the end"
    )
    assert detail.splitlines()[:2] == ["a = 'x' AND", " " * 11 + "^"]
    assert subscription_selector(None, max_length=100, max_depth=10) is None


def test_jms_header_names_read_the_stomp_headers_activemq_maps() -> None:
    headers = [
        ("type", "t"), ("priority", "7"), ("correlation-id", "c"), ("persistent", "true"),
        ("expires", "0"), ("timestamp", "5"), ("x_y", "1"), ("$d", "2"), ("ack", "x"),
    ]  # fmt: skip
    matching = [
        "JMSType = 't'", "JMSPriority = 7", "JMSCorrelationID = 'c'",
        "JMSDeliveryMode = 'PERSISTENT'", "JMSExpiration = 0", "JMSTimestamp = 5",
        "JMSRedelivered = FALSE", "x_y = '1'", "$d = '2'", "ack = 'x'",
        "type IS NULL", "priority IS NULL", "persistent IS NULL", "timestamp IS NULL",
        "JMSMessageID = 'm-1'",
    ]  # fmt: skip
    for selector in matching:
        assert compile_selector(selector).matches(headers, message_id="m-1"), selector
    assert compile_selector("JMSPriority = 4").matches([])
    assert compile_selector("JMSDeliveryMode = 'NON_PERSISTENT'").matches([])
    assert compile_selector("JMSRedelivered").matches([], redelivered=True)


def test_a_repeated_header_counts_with_its_first_value() -> None:
    assert compile_selector("a = '1'").matches([("a", "1"), ("a", "2")])
    assert not compile_selector("a = '2'").matches([("a", "1"), ("a", "2")])


def test_long_and_or_chains_do_not_nest() -> None:
    chain = " OR ".join(f"a = '{n}'" for n in range(500))
    assert compile_selector(chain, max_length=10**5, max_depth=5).matches([("a", "499")])


def test_length_and_depth_are_bounded_without_recursion_errors() -> None:
    with pytest.raises(SelectorError, match="longer than 10 characters"):
        compile_selector("a = 'xxxxxxx'", max_length=10)
    deep = "(" * 5_000 + "a = 1" + ")" * 5_000  # far past the recursion limit
    with pytest.raises(SelectorError, match="parentheses nested deeper than 40") as raised:
        compile_selector(deep, max_length=10**6)
    assert raised.value.position == 41
    compile_selector("(" * 40 + "a = 1" + ")" * 40)
    negations = "NOT " * 5_000 + "a"
    with pytest.raises(SelectorError, match="nested deeper than 40"):
        compile_selector(negations, max_length=10**6)
    sums = "a = " + " + ".join(["1"] * 100)
    with pytest.raises(SelectorError, match="nested deeper than 40"):
        compile_selector(sums)


def test_like_cannot_backtrack_catastrophically() -> None:
    # As a backtracking regex (%->.*), this pattern against this value takes
    # exponential time; here each piece is found once, left to right.
    pattern = "%a" * 30 + "%b"
    selector = compile_selector(f"a LIKE '{pattern}'")
    value = "a" * 65_000  # about the longest header line (Limits.max_header_length)
    started = time.perf_counter()
    assert not selector.matches([("a", value)])
    assert selector.matches([("a", value + "b")])
    long_piece = compile_selector("a LIKE '%" + "a" * 4000 + "b%'")
    assert not long_piece.matches([("a", value)])
    anchored = compile_selector("a LIKE '" + "_a" * 2000 + "b%'")
    assert not anchored.matches([("a", value)])
    assert time.perf_counter() - started < 0.5


def test_like_pieces_with_underscores_between_percents_are_budgeted() -> None:
    """Such a piece costs up to its length times the value's: at most 64 characters
    of them per selector, so the worst message costs milliseconds, not seconds."""
    worst = compile_selector("a LIKE '%" + "_a" * 31 + "b%'")  # 63 characters
    started = time.perf_counter()
    assert not worst.matches([("a", "a" * 65_000)])
    assert time.perf_counter() - started < 0.25
    with pytest.raises(SelectorError, match="more than 64 characters") as raised:
        compile_selector("a LIKE '%" + "_" * 65 + "%'")
    assert raised.value.position == 8
    with pytest.raises(SelectorError, match="more than 64 characters") as raised:
        compile_selector("a LIKE '%" + "_" * 40 + "%' OR b LIKE '%x_y" + "z" * 30 + "%'")
    assert raised.value.position == 63
    compile_selector("a LIKE '" + "_" * 1000 + "%" + "x" * 1000 + "%'")  # anchored, or no '_'


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("a%", "abc", True), ("%c", "abc", True), ("%b%", "abc", True), ("a%c", "ac", True),
        ("a%c", "abcbc", True), ("a%b%c", "acb", False), ("_", "", False), ("_", "\n", True),
        ("%%", "", True), ("", "", True), ("", "x", False), ("a_c", "a\nc", True),
        ("ab%ba", "aba", False), ("%.*%", "x.*y", True), ("[a]", "[a]", True),
    ],
)  # fmt: skip
def test_like(pattern: str, value: str, expected: bool) -> None:
    assert compile_selector(f"a LIKE '{pattern}'").matches([("a", value)]) is expected


def test_like_escape() -> None:
    selector = compile_selector("a LIKE '100!%' ESCAPE '!'")
    assert selector.matches([("a", "100%")])
    assert not selector.matches([("a", "1000")])
    assert compile_selector("a LIKE 'x!_y' ESCAPE '!'").matches([("a", "x_y")])
    assert not compile_selector("a LIKE 'x!_y' ESCAPE '!'").matches([("a", "xzy")])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_parses_or_is_a_selector_error(text: str) -> None:
    """Whatever a client sends as a selector: a Selector or a SelectorError, and
    evaluation never raises."""
    position = None
    selector = None
    try:
        selector = compile_selector(text)
    except SelectorError as exc:
        position = exc.position
    if selector is not None:
        selector.matches([("a", "1"), ("b", "x")])
    else:
        assert position is not None
        assert 1 <= position <= len(text) + 1


TOKENS = st.sampled_from(
    ["a", "b", "=", "<>", "<", ">=", "+", "-", "*", "/", "%", "(", ")", "NOT", "AND", "OR",
     "IS", "NULL", "LIKE", "'x%'", "ESCAPE", "'!'", "IN", "BETWEEN", "1", "2.5", "TRUE", ",",
     "'5'", "0x1F"]
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(TOKENS, max_size=14), st.sampled_from(["1", "x", "5.5", "true", ""]))
def test_token_soup_parses_or_is_a_selector_error(tokens: list[str], value: str) -> None:
    try:
        selector = compile_selector(" ".join(tokens))
    except SelectorError:
        return
    selector.matches([("a", value)])
