"""encode(): exact bytes, content-length, per-version escaping, and what it refuses."""

from __future__ import annotations

import pytest

from trio_stomp import LocalProtocolError, ProtocolError, RemoteProtocolError, StompError
from trio_stomp.frame import Frame, FrameParser, encode

VERSIONS = ("1.0", "1.1", "1.2")
BODYLESS = (
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "BEGIN",
    "COMMIT",
    "ABORT",
    "ACK",
    "NACK",
    "DISCONNECT",
    "CONNECT",
    "STOMP",
    "CONNECTED",
    "RECEIPT",
)


def refuses(frame: Frame, match: str, version: str = "1.2", **options: bool) -> None:
    with pytest.raises(LocalProtocolError, match=match):
        encode(frame, version, **options)


def test_error_family() -> None:
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert not issubclass(LocalProtocolError, RemoteProtocolError)
    assert issubclass(ProtocolError, StompError)


@pytest.mark.parametrize("version", VERSIONS)
def test_encode_exact_bytes(version: str) -> None:
    frame = Frame("SEND", [("destination", "/queue/a"), ("x", "1")], b"hi")
    assert encode(frame, version) == b"SEND\ndestination:/queue/a\nx:1\ncontent-length:2\n\nhi\0"
    assert encode(Frame("DISCONNECT"), version) == b"DISCONNECT\n\n\0"


def test_encode_writes_the_command_upper_case() -> None:
    assert encode(Frame("send")).startswith(b"SEND\n")


@pytest.mark.parametrize("version", VERSIONS)
def test_content_length_on_every_frame_with_a_body(version: str) -> None:
    for command in ("SEND", "MESSAGE", "ERROR"):
        wire = encode(Frame(command, {}, b"a\0b"), version)
        assert wire == command.encode() + b"\ncontent-length:3\n\na\0b\0"


def test_no_content_length_without_a_body() -> None:
    assert b"content-length" not in encode(Frame("SEND", {"destination": "/q"}))


def test_content_length_false_leaves_it_off_text_bodies() -> None:
    wire = encode(Frame("SEND", {"destination": "/q"}, b"text"), content_length=False)
    assert wire == b"SEND\ndestination:/q\n\ntext\0"
    assert FrameParser().feed(wire) == [Frame("SEND", {"destination": "/q"}, b"text")]


def test_content_length_false_with_nul_in_the_body_is_refused() -> None:
    refuses(Frame("SEND", {}, b"a\0b"), "needs a content-length", content_length=False)


def test_correct_content_length_is_kept_not_repeated() -> None:
    frame = Frame("SEND", [("content-length", "2"), ("x", "y")], b"ab")
    assert encode(frame) == b"SEND\ncontent-length:2\nx:y\n\nab\0"
    assert encode(frame, content_length=False) == encode(frame)


def test_content_length_disagreeing_with_the_body_is_refused() -> None:
    refuses(Frame("SEND", {"content-length": "3"}, b"ab"), "disagrees")
    refuses(Frame("SEND", {"content-length": "1"}), "disagrees")


def test_1_0_content_length_name_is_case_insensitive() -> None:
    frame = Frame("SEND", {"Content-Length": "2"}, b"ab")
    assert encode(frame, "1.0") == b"SEND\nContent-Length:2\n\nab\0"
    refuses(Frame("SEND", {"CONTENT-LENGTH": "9"}, b"ab"), "disagrees", "1.0")


@pytest.mark.parametrize("command", BODYLESS)
def test_body_on_a_frame_that_may_not_have_one_is_refused(command: str) -> None:
    refuses(Frame(command, {}, b"x"), "may not have a body")


def test_unknown_command_is_refused() -> None:
    refuses(Frame("PUBLISH"), "unknown command")


def test_unknown_version_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown STOMP version"):
        encode(Frame("SEND"), "1.3")


@pytest.mark.parametrize("command", ["SEND", "CONNECT"])
@pytest.mark.parametrize("version", VERSIONS)
def test_nul_in_a_header_is_refused_in_every_version(command: str, version: str) -> None:
    refuses(Frame(command, {"k": "a\0b"}), "NUL", version)
    refuses(Frame(command, {"k\0": "v"}), "NUL", version)


@pytest.mark.parametrize("command", ["SEND", "CONNECT"])
@pytest.mark.parametrize("version", VERSIONS)
def test_empty_header_name_is_refused(command: str, version: str) -> None:
    refuses(Frame(command, [("a", "1"), ("", "v")]), "name may not be empty", version)
    refuses(Frame(command, {"": "v"}), "name may not be empty", version)


def test_1_1_escapes_newline_colon_backslash() -> None:
    frame = Frame("SEND", {"a:b": "1\n2\\3"})
    assert encode(frame, "1.1") == b"SEND\na\\cb:1\\n2\\\\3\n\n\0"


@pytest.mark.parametrize(
    "pairs",
    [
        [("x", "a\rb")],
        [("x", "trailing\r")],  # a peer would take it for a CR LF line end
        [("destination", "/q"), ("x\r", "v")],
        [("x", "a\r\nb")],  # the careful path (a newline) refuses it too
    ],
)
def test_1_1_refuses_a_carriage_return_it_cannot_escape(pairs: list[tuple[str, str]]) -> None:
    refuses(Frame("SEND", pairs), "carriage return, which STOMP 1.1 cannot carry", "1.1")


def test_1_2_escapes_cr_too() -> None:
    frame = Frame("SEND", {"a:b": "1\n2\\3\r"})
    assert encode(frame, "1.2") == b"SEND\na\\cb:1\\n2\\\\3\\r\n\n\0"


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_rare_characters_in_headers_take_the_careful_path(version: str) -> None:
    # The fast path joins headers with NUL and newline; headers holding
    # newlines or control characters must come out the same.
    frame = Frame("SEND", [("a\nb", "\x01\n"), ("c", "\x01")])
    wire = encode(frame, version)
    assert wire == b"SEND\na\\nb:\x01\\n\nc:\x01\n\n\0"
    assert FrameParser(version).feed(wire) == [frame]


@pytest.mark.parametrize("command", ["CONNECT", "STOMP", "CONNECTED"])
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_connect_and_connected_headers_are_never_escaped(command: str, version: str) -> None:
    frame = Frame(command, {"login": "dom\\user", "passcode": "a:b"})
    assert encode(frame, version) == command.encode() + b"\nlogin:dom\\user\npasscode:a:b\n\n\0"
    refuses(Frame(command, {"passcode": "a\nb"}), "line break", version)
    refuses(Frame(command, {"passcode": "a\rb"}), "line break", version)
    refuses(Frame(command, {"pass:code": "x"}), "colon", version)


def test_1_0_has_no_escaping() -> None:
    frame = Frame("SEND", {"path": "C:\\new"})
    assert encode(frame, "1.0") == b"SEND\npath:C:\\new\n\n\0"


@pytest.mark.parametrize("text", ["a\nb", "a\rb", "\n"])
def test_1_0_line_break_in_a_header_is_refused(text: str) -> None:
    refuses(Frame("SEND", {"k": text}), "line break", "1.0")
    refuses(Frame("SEND", {text: "v"}), "line break", "1.0")


def test_1_0_colon_in_a_header_name_is_refused() -> None:
    refuses(Frame("SEND", {"a:b": "v"}), "colon", "1.0")


@pytest.mark.parametrize("value", [" v", "v ", " "])
def test_1_0_value_padding_is_refused(value: str) -> None:
    # The 1.0 parser would strip it: what cannot come back must not go out.
    refuses(Frame("SEND", {"k": value}), "spaces", "1.0")


def test_lone_surrogate_is_refused() -> None:
    refuses(Frame("SEND", {"k": "\ud800"}), "UTF-8")


def test_refused_frame_does_not_break_later_encodes() -> None:
    refuses(Frame("SEND", {"k": "\0"}), "NUL")
    assert encode(Frame("SEND", {"k": "v"})) == b"SEND\nk:v\n\n\0"
