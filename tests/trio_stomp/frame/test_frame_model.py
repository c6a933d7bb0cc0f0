"""Frame and Headers: the values the codec hands out and takes in."""

from __future__ import annotations

import pytest

from trio_stomp.frame import HEARTBEAT, Frame, Headers, Heartbeat

PAIRS = [("x", "1"), ("y", "2"), ("x", "3")]


def test_headers_keep_every_pair_in_order_with_repeats() -> None:
    headers = Headers(PAIRS)
    assert headers.items() == tuple(PAIRS)
    assert len(headers) == 3


def test_headers_lookup_sees_the_first_value() -> None:
    headers = Headers(PAIRS)
    assert headers["x"] == "1"
    assert headers.get("x") == "1"
    assert headers.get("x", "d") == "1"
    assert headers.get("z") is None
    assert headers.get("z", "d") == "d"
    assert "x" in headers
    assert "z" not in headers
    with pytest.raises(KeyError):
        headers["z"]


def test_headers_getall_sees_every_value() -> None:
    headers = Headers(PAIRS)
    assert headers.getall("x") == ["1", "3"]
    assert headers.getall("z") == []


def test_headers_keys_are_distinct_names_in_first_order() -> None:
    assert Headers(PAIRS).keys() == ["x", "y"]
    assert list(Headers(PAIRS)) == ["x", "y"]
    # (without a repeat too: the order of first appearance, not its reverse)
    assert Headers([("b", "1"), ("a", "2")]).keys() == ["b", "a"]
    assert list(Headers([("b", "1"), ("a", "2")])) == ["b", "a"]


def test_headers_as_dict_is_a_new_dict_of_first_values_in_order() -> None:
    headers = Headers([("y", "0"), *PAIRS])
    first = headers.as_dict()
    assert list(first.items()) == [("y", "0"), ("x", "1")]
    first["x"] = "changed"
    assert headers.as_dict() == {"y": "0", "x": "1"}
    assert headers["x"] == "1"


def test_headers_equality_compares_pairs_in_order() -> None:
    assert Headers(PAIRS) == Headers(list(PAIRS))
    assert Headers(PAIRS) != Headers(PAIRS[::-1])
    assert Headers({"a": "1"}) == Headers([("a", "1")])
    assert Headers([("a", "1")]) != Headers([("a", "1"), ("a", "1")])
    assert hash(Headers(PAIRS)) == hash(Headers(PAIRS))


def test_headers_from_a_mapping_pairs_or_headers() -> None:
    assert Headers({"a": "1", "b": "2"}).items() == (("a", "1"), ("b", "2"))
    assert Headers(iter([("a", "1")])).items() == (("a", "1"),)
    original = Headers(PAIRS)
    assert Headers(original) == original


def test_headers_must_be_strings() -> None:
    with pytest.raises(TypeError):
        Headers({"a": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Headers([(b"a", "1")])  # type: ignore[list-item]


def test_headers_are_immutable() -> None:
    headers = Headers(PAIRS)
    with pytest.raises(TypeError):
        headers["x"] = "9"  # type: ignore[index]
    with pytest.raises(AttributeError):
        headers.extra = 1  # type: ignore[attr-defined]
    assert headers.items() == tuple(PAIRS)


def test_headers_with_and_without() -> None:
    headers = Headers(PAIRS)
    assert headers.with_({"x": "9"}).items() == (("y", "2"), ("x", "9"))
    assert headers.without("x").items() == (("y", "2"),)
    assert headers.items() == tuple(PAIRS)  # unchanged


def test_frame_from_a_mapping_or_pairs() -> None:
    assert Frame("SEND", {"a": "1"}).headers == Headers([("a", "1")])
    assert Frame("SEND", [("a", "1"), ("a", "2")]).headers.getall("a") == ["1", "2"]
    assert Frame("SEND").headers == Headers()
    assert Frame("SEND").body == b""


def test_frame_command_is_stored_upper_case() -> None:
    assert Frame("send").command == "SEND"


def test_frame_body_is_bytes() -> None:
    assert Frame("SEND", {}, bytearray(b"ab")).body == b"ab"
    assert type(Frame("SEND", {}, memoryview(b"ab")).body) is bytes
    with pytest.raises(TypeError):
        Frame("SEND", {}, "text")  # type: ignore[arg-type]


def test_frames_are_frozen_values() -> None:
    frame = Frame("SEND", {"a": "1"}, b"x")
    assert frame == Frame("SEND", [("a", "1")], b"x")
    assert frame != Frame("SEND", [("a", "1")], b"y")
    assert hash(frame) == hash(Frame("SEND", [("a", "1")], b"x"))
    with pytest.raises(AttributeError):
        frame.body = b"y"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        frame.command = "ACK"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        frame.headers = Headers()  # type: ignore[misc]
    assert frame == Frame("SEND", {"a": "1"}, b"x")


def test_frame_repr_is_short() -> None:
    text = repr(Frame("SEND", {"a": "1"}, b"x" * 1000))
    assert text.startswith("Frame('SEND', [('a', '1')], b'xxx")
    assert len(text) < 120


def test_heartbeats_are_all_equal() -> None:
    assert Heartbeat() == HEARTBEAT
    assert Frame("SEND") != HEARTBEAT


def test_compiled_says_which_parser_runs() -> None:
    import trio_stomp.frame
    import trio_stomp.frame._parser

    compiled = not trio_stomp.frame._parser.__file__.endswith(".py")
    assert trio_stomp.frame.compiled is compiled
