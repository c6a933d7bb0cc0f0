"""FrameParser: the per-version rules, the framing rules and the limits, one test each."""

from __future__ import annotations

import time

import pytest

from trio_stomp import RemoteProtocolError
from trio_stomp.frame import HEARTBEAT, Event, Frame, FrameParser, Heartbeat

VERSIONS = ("1.0", "1.1", "1.2")


def parse(data: bytes, version: str = "1.2", **options: object) -> list[Event]:
    """Feed ``data`` whole, then end the stream; every event."""
    parser = FrameParser(version, **options)  # type: ignore[arg-type]
    events = parser.feed(data)
    assert parser.feed(b"") == []
    return events


def parse_bytewise(data: bytes, version: str = "1.2", **options: object) -> list[Event]:
    parser = FrameParser(version, **options)  # type: ignore[arg-type]
    events: list[Event] = []
    for i in range(len(data)):
        events += parser.feed(data[i : i + 1])
    assert parser.feed(b"") == []
    return events


def one(data: bytes, version: str = "1.2", **options: object) -> Frame:
    """The single frame ``data`` holds, the same whole and byte by byte."""
    events = parse(data, version, **options)
    assert parse_bytewise(data, version, **options) == events
    (frame,) = events
    assert isinstance(frame, Frame)
    return frame


def fails(data: bytes, match: str, version: str = "1.2", **options: object) -> None:
    """``data`` is rejected, whole and byte by byte."""
    with pytest.raises(RemoteProtocolError, match=match):
        parse(data, version, **options)
    with pytest.raises(RemoteProtocolError, match=match):
        parse_bytewise(data, version, **options)


# -- events and the stream ----------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_eols_between_frames_are_heartbeats(version: str) -> None:
    send = b"SEND\n\n\0"
    events = parse(b"\n" + send + b"\n\r\n\n" + send + b"\r\n", version)
    f = Frame("SEND")
    assert events == [HEARTBEAT, f, HEARTBEAT, HEARTBEAT, HEARTBEAT, f, HEARTBEAT]
    assert all(type(e) is Heartbeat for e in events if not isinstance(e, Frame))


def test_rabbitmq_nul_lf_trailer_gives_heartbeat() -> None:
    # RabbitMQ ends every frame with NUL LF.
    data = b"MESSAGE\ndestination:/q\ncontent-length:2\n\nhi\0\nRECEIPT\nreceipt-id:1\n\n\0\n"
    assert parse(data) == [
        Frame("MESSAGE", {"destination": "/q", "content-length": "2"}, b"hi"),
        HEARTBEAT,
        Frame("RECEIPT", {"receipt-id": "1"}),
        HEARTBEAT,
    ]


def test_feed_returns_every_complete_event_so_far() -> None:
    parser = FrameParser()
    assert parser.feed(b"SEND\n\nab\0\nSE") == [Frame("SEND", (), b"ab"), HEARTBEAT]
    assert parser.in_frame
    assert parser.feed(b"ND\n\n") == []
    assert parser.feed(b"c") == []
    assert parser.feed(b"\0") == [Frame("SEND", (), b"c")]
    assert not parser.in_frame


@pytest.mark.parametrize(
    "data", [b"SEND\n", b"SEND\n\nbody", b"SEND\ncontent-length:9\n\nbody", b"SEND\n\nx\0\r"]
)
def test_end_of_stream_in_a_partial_frame_is_an_error(data: bytes) -> None:
    parser = FrameParser()
    parser.feed(data)
    with pytest.raises(RemoteProtocolError, match="ended in the middle of a frame"):
        parser.feed(b"")


def test_end_of_stream_between_frames_is_clean() -> None:
    parser = FrameParser()
    assert parser.feed(b"SEND\n\n\0\n\r\n") == [Frame("SEND"), HEARTBEAT, HEARTBEAT]
    assert not parser.in_frame
    assert parser.feed(b"") == []


def test_parser_stays_failed_after_an_error() -> None:
    parser = FrameParser()
    with pytest.raises(RemoteProtocolError):
        parser.feed(b"BOGUS\n\n\0")
    with pytest.raises(RemoteProtocolError, match="failed earlier"):
        parser.feed(b"SEND\n\n\0")
    with pytest.raises(RemoteProtocolError, match="failed earlier"):
        parser.feed(b"")


def test_an_error_carries_the_events_completed_before_it() -> None:
    parser = FrameParser()
    with pytest.raises(RemoteProtocolError, match="unknown command") as info:
        parser.feed(b"SEND\na:1\n\n\0\nBOGUS\n\n\0SEND\n\n\0")
    assert info.value.events == (Frame("SEND", {"a": "1"}), HEARTBEAT)
    with pytest.raises(RemoteProtocolError, match="failed earlier") as info:
        parser.feed(b"SEND\n\n\0")
    assert info.value.events == ()


def test_version_is_settable_after_negotiation() -> None:
    parser = FrameParser()
    assert parser.version == "1.2"
    assert parser.feed(b"CONNECTED\nversion:1.0\n\n\0") == [Frame("CONNECTED", {"version": "1.0"})]
    parser.version = "1.0"
    assert parser.version == "1.0"
    # From now on 1.0 rules: no escaping, leading spaces stripped.
    assert parser.feed(b"MESSAGE\na: x\\c\n\n\0") == [Frame("MESSAGE", {"a": "x\\c"})]
    with pytest.raises(ValueError, match="unknown STOMP version"):
        parser.version = "2.0"


CONNECTED_THEN_MESSAGE = b"CONNECTED\nversion:1.0\n\n\0\nMESSAGE\na: x\\c\n\n\0"


@pytest.mark.parametrize("cut", range(1, len(CONNECTED_THEN_MESSAGE) + 1))
def test_pause_after_frame_parses_the_rest_under_the_negotiated_version(cut: int) -> None:
    """CONNECTED and the frames behind it in one chunk (or split anywhere):
    pausing after CONNECTED lets the rest parse by the version it names."""
    parser = FrameParser()
    events = parser.feed(CONNECTED_THEN_MESSAGE[:cut], pause_after_frame=True)
    if not events:
        events = parser.feed(CONNECTED_THEN_MESSAGE[cut:], pause_after_frame=True)
        rest = b""
    else:
        rest = CONNECTED_THEN_MESSAGE[cut:]
    assert events == [Frame("CONNECTED", {"version": "1.0"})]
    fed = len(CONNECTED_THEN_MESSAGE) - len(rest)
    assert parser.in_frame == (fed > 25)  # what came of the MESSAGE is held, unparsed
    parser.version = "1.0"
    events = parser.resume() + (parser.feed(rest) if rest else [])
    assert events == [HEARTBEAT, Frame("MESSAGE", {"a": "x\\c"})]
    assert parser.resume() == []
    assert parser.feed(b"") == []


def test_end_of_stream_parses_held_bytes_first() -> None:
    parser = FrameParser()
    parser.feed(b"SEND\n\n\0SEND\na:1\n\n\0", pause_after_frame=True)
    assert parser.feed(b"") == [Frame("SEND", {"a": "1"})]
    parser = FrameParser()
    parser.feed(b"SEND\n\n\0SEND\n", pause_after_frame=True)
    with pytest.raises(RemoteProtocolError, match="ended in the middle of a frame"):
        parser.feed(b"")


def test_feed_after_end_of_stream_is_a_usage_error() -> None:
    parser = FrameParser()
    assert parser.feed(b"") == []
    with pytest.raises(RuntimeError, match="after the end of the stream"):
        parser.feed(b"SEND\n\n\0")


def test_unknown_version_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown STOMP version"):
        FrameParser("1.3")


@pytest.mark.parametrize("option", ["max_frame_size", "max_header_count", "max_header_length"])
def test_limits_must_be_positive(option: str) -> None:
    with pytest.raises(ValueError, match=option):
        FrameParser(**{option: 0})  # type: ignore[arg-type]


def test_feed_copies_mutable_buffers() -> None:
    # The parser may hold on to part of a chunk until its frame completes; a
    # caller reusing its buffer must not change what was received.
    parser = FrameParser()
    chunk = bytearray(b"SEND\ncontent-length:4\n\nab")
    assert parser.feed(chunk) == []
    chunk[-2:] = b"XY"
    view = memoryview(bytearray(b"cd\0"))
    assert parser.feed(view) == [Frame("SEND", {"content-length": "4"}, b"abcd")]


# -- commands -----------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_commands_are_case_insensitive_on_input(version: str) -> None:
    assert one(b"send\n\n\0", version).command == "SEND"
    assert one(b"Message\n\n\0", version).command == "MESSAGE"


def test_only_ascii_letters_fold_in_commands() -> None:
    # str.upper() turns the long s into S: "\u017fend" must not read as SEND.
    fails("\u017fend\n\n\0".encode(), "unknown command")


def test_unknown_command_is_an_error() -> None:
    fails(b"PUBLISH\n\n\0", "unknown command")


def test_unknown_command_fails_as_soon_as_its_line_ends() -> None:
    parser = FrameParser()
    with pytest.raises(RemoteProtocolError, match="unknown command"):
        parser.feed(b"PUBLISH\ndestination:/q")


def test_overlong_command_line_fails_before_its_eol() -> None:
    parser = FrameParser()
    parser.feed(b"S" * 32)
    with pytest.raises(RemoteProtocolError, match="unknown command"):
        parser.feed(b"S")


# -- headers ------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_repeated_headers_are_kept_and_the_first_wins(version: str) -> None:
    frame = one(b"MESSAGE\nfoo:World\nbar:1\nfoo:Hello\n\n\0", version)
    assert frame.headers["foo"] == "World"
    assert frame.headers.get("foo") == "World"
    assert frame.headers.getall("foo") == ["World", "Hello"]
    assert list(frame.headers.items()) == [("foo", "World"), ("bar", "1"), ("foo", "Hello")]


@pytest.mark.parametrize("version", VERSIONS)
def test_header_text_is_utf8(version: str) -> None:
    frame = one(
        "MESSAGE\ndestination:/queue/caf\u00e9\n\u30ad\u30fc:\U0001f600\n\n\0".encode(), version
    )
    assert frame.headers["destination"] == "/queue/caf\u00e9"
    assert frame.headers["\u30ad\u30fc"] == "\U0001f600"


@pytest.mark.parametrize(
    "data",
    [
        b"MESSAGE\na:\xff\n\n\0",
        b"MESSAGE\n\xc3:b\n\n\0",
        b"SEN\xc4\n\n\0",
        b"SEND\na:\xed\xa0\x80\n\n\0",
    ],
)
@pytest.mark.parametrize("version", VERSIONS)
def test_invalid_utf8_in_the_head_is_an_error(data: bytes, version: str) -> None:
    fails(data, "UTF-8|unknown command", version)


@pytest.mark.parametrize("version", VERSIONS)
def test_header_line_without_colon_is_an_error(version: str) -> None:
    fails(b"SEND\ndestination\n\n\0", "malformed header line", version)


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_header_name_is_an_error(version: str) -> None:
    fails(b"SEND\n:value\n\n\0", "malformed header line", version)


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_header_value_is_allowed(version: str) -> None:
    assert one(b"SEND\nempty:\n\n\0", version).headers["empty"] == ""


@pytest.mark.parametrize("version", VERSIONS)
def test_nul_inside_a_head_is_an_error(version: str) -> None:
    fails(b"SEND\na:b\0c\n\n\0", "NUL byte inside a frame head", version)
    fails(b"SEND\0\n\n\0", "NUL byte inside a frame head", version)


@pytest.mark.parametrize(
    "data",
    [
        b"SEND\r\ndestination:/q\r\n\r\nbody\0",  # no LF LF: the NUL seemed inside the head
        b"SEND\r\ncontent-length:4\r\n\r\nb\n\nd\0",  # LF LF in the body: a command SEND\r
        b"SEND\ndestination:/q\r\n\r\n\0",  # a header line "\r"
        b"CONNECT\r\naccept-version:1.1\r\n\r\n\0",
    ],
)
def test_crlf_line_ends_under_1_1_are_named_as_such(data: bytes) -> None:
    fails(data, "^a line ends with CR LF, which only STOMP 1.2 allows", "1.1")
    assert parse(data, "1.2")  # as 1.2 allows


def test_a_cr_ending_a_1_1_header_value_is_still_its_own() -> None:
    assert one(b"SEND\ndestination:/q\r\n\n\0", "1.1").headers["destination"] == "/q\r"


@pytest.mark.parametrize("version", VERSIONS)
def test_head_ended_by_nul_without_blank_line_has_no_body(version: str) -> None:
    # As the 1.1 and 1.2 specs print DISCONNECT and RECEIPT.
    assert one(b"DISCONNECT\nreceipt:77\n\0", version) == Frame("DISCONNECT", {"receipt": "77"})
    assert one(b"DISCONNECT\n\0", version) == Frame("DISCONNECT")
    assert one(b"SEND\ncontent-length:0\n\0", version).body == b""
    fails(b"SEND\ncontent-length:1\n\0x\0", "content-length ended by NUL", version)


# -- STOMP 1.0 ----------------------------------------------------------------


def test_1_0_strips_leading_spaces() -> None:
    frame = one(b"SEND\ndestination:   /queue/a\nempty:  \n\n\0", "1.0")
    assert frame.headers["destination"] == "/queue/a"
    assert frame.headers["empty"] == ""


def test_1_0_strips_trailing_spaces_and_cr_from_every_line() -> None:
    frame = one(b"SEND \r\ndestination:/queue/a  \r\n  \r\nbody\0", "1.0")
    assert frame == Frame("SEND", {"destination": "/queue/a"}, b"body")


def test_1_0_has_no_escaping() -> None:
    frame = one(b"SEND\npath:C:\\new\\c\\t\n\n\0", "1.0")
    assert frame.headers["path"] == "C:\\new\\c\\t"


def test_1_0_content_length_is_optional() -> None:
    assert one(b"SEND\n\nhello\0", "1.0").body == b"hello"
    assert one(b"SEND\ncontent-length: 5\n\nhe\0lo\0", "1.0").body == b"he\0lo"


def test_1_0_content_length_name_is_case_insensitive() -> None:
    # 1.0 header names are case-insensitive; framing must honour that.
    frame = one(b"SEND\nContent-Length:3\n\na\0b\0", "1.0")
    assert frame.body == b"a\0b"
    assert frame.headers["Content-Length"] == "3"


def test_1_0_keeps_header_names_as_sent() -> None:
    assert one(b"SEND\nDestination:/q\n\n\0", "1.0").headers.get("destination") is None


# -- STOMP 1.1 ----------------------------------------------------------------


def test_1_1_unescapes_newline_colon_backslash() -> None:
    frame = one(b"SEND\na\\cb\\nc\\\\:x\\c\\n\\\\y\n\n\0", "1.1")
    assert list(frame.headers.items()) == [("a:b\nc\\", "x:\n\\y")]


def test_1_1_never_trims_values() -> None:
    assert one(b"SEND\nk:  v  \n\n\0", "1.1").headers["k"] == "  v  "


def test_1_1_allows_raw_colons_in_values() -> None:
    # The 1.1 grammar: header-value = *<any OCTET except NL>.
    assert one(b"SEND\nurl:http://x:80/\n\n\0", "1.1").headers["url"] == "http://x:80/"


def test_1_1_cr_is_header_content_not_a_line_ending() -> None:
    # 1.1 lines end in LF only; its encoder leaves CR unescaped.
    frame = one(b"SEND\nk:v\r\nr\rn:\r\n\n\0", "1.1")
    assert list(frame.headers.items()) == [("k", "v\r"), ("r\rn", "\r")]


def test_1_1_cr_escape_is_undefined() -> None:
    fails(b"SEND\nk:\\r\n\n\0", "undefined escape", "1.1")
    assert one(b"SEND\nk:\\r\n\n\0", "1.1", lenient=True).headers["k"] == "\\r"


def test_1_1_undefined_escape_is_fatal() -> None:
    fails(b"SEND\nk:\\t\n\n\0", "undefined escape", "1.1")


# -- STOMP 1.2 ----------------------------------------------------------------


def test_1_2_also_unescapes_cr() -> None:
    frame = one(b"SEND\nk\\r:a\\rb\\n\\c\\\\\n\n\0")
    assert list(frame.headers.items()) == [("k\r", "a\rb\n:\\")]


def test_1_2_accepts_crlf_line_endings() -> None:
    frame = one(b"SEND\r\ndestination:/q\r\nk:v\r\n\r\nbody\0")
    assert frame == Frame("SEND", [("destination", "/q"), ("k", "v")], b"body")


def test_1_2_crlf_blank_line_then_body_starting_with_lf() -> None:
    # The blank line is the CR LF one, not the LF LF that the body's first
    # byte makes with it.
    frame = one(b"SEND\r\nk:v\r\n\r\n\nbody\0")
    assert frame == Frame("SEND", {"k": "v"}, b"\nbody")


def test_1_2_mixed_lf_and_crlf_lines() -> None:
    frame = one(b"SEND\nk:v\r\nj:w\n\r\n\0")
    assert list(frame.headers.items()) == [("k", "v"), ("j", "w")]


def test_1_2_raw_cr_inside_a_line_is_an_error() -> None:
    fails(b"SEND\nk:a\rb\n\n\0", "raw carriage return")


@pytest.mark.parametrize("line", [b"k:\\t", b"k:ab\\", b"k\\x:v", b"k:\\\\\\", b"k:\\C", b"k:\\\r"])
def test_1_2_undefined_escape_is_fatal(line: bytes) -> None:
    fails(b"SEND\n" + line + b"\n\n\0", "undefined escape|raw carriage return")


def test_1_2_lenient_accepts_undefined_escapes_literally() -> None:
    frame = one(b"SEND\nk:C\\temp\\\\x\\cy\\\n\n\0", lenient=True)
    assert frame.headers["k"] == "C\\temp\\x:y\\"


def test_1_2_raw_colon_in_a_value_is_fatal() -> None:
    fails(b"SEND\nurl:http://x/\n\n\0", "raw colon")
    # Even when another line's missing colon makes the count come out even.
    fails(b"SEND\na:b:c\nd\n\n\0", "raw colon|malformed header line")


def test_1_2_lenient_accepts_raw_colons_in_values() -> None:
    assert one(b"SEND\nurl:http://x/\n\n\0", lenient=True).headers["url"] == "http://x/"


@pytest.mark.parametrize("command", [b"CONNECT", b"STOMP", b"CONNECTED"])
@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_connect_and_connected_headers_are_never_escaped(command: bytes, version: str) -> None:
    frame = one(command + b"\nlogin:dom\\user\npasscode:a:b\\c\n\n\0", version)
    assert frame.headers["login"] == "dom\\user"
    assert frame.headers["passcode"] == "a:b\\c"


def test_escaped_backslashes_pair_from_the_left() -> None:
    frame = one(b"SEND\na:\\\\c\nb:\\\\\\c\nc:\\\\\\\\\n\n\0")
    assert list(frame.headers.items()) == [("a", "\\c"), ("b", "\\:"), ("c", "\\\\")]


# -- bodies and content-length ------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_content_length_body_may_contain_nul(version: str) -> None:
    frame = one(b"SEND\ncontent-length:5\n\n\0a\0b\0\0", version)
    assert frame.body == b"\0a\0b\0"


@pytest.mark.parametrize("version", VERSIONS)
def test_without_content_length_the_first_nul_ends_the_body(version: str) -> None:
    events = parse(b"SEND\n\nab\0SEND\n\ncd\0", version)
    assert events == [Frame("SEND", (), b"ab"), Frame("SEND", (), b"cd")]


@pytest.mark.parametrize("version", VERSIONS)
def test_content_length_bytes_must_be_followed_by_nul(version: str) -> None:
    fails(b"SEND\ncontent-length:2\n\nabc\0", "not followed by NUL", version)


@pytest.mark.parametrize("value", [b"-1", b"+3", b"3a", b"", b" 3", b"0x3", "\u0663".encode()])
def test_content_length_must_be_a_decimal_number(value: bytes) -> None:
    fails(b"SEND\ncontent-length:" + value + b"\n\nabc\0", "not a number")


def test_content_length_with_thousands_of_digits_is_a_limit_error() -> None:
    # int() refuses strings this long; that must not escape as ValueError.
    fails(b"SEND\ncontent-length:" + b"9" * 5000 + b"\n\n\0", "exceeds max_frame_size")
    frame = one(b"SEND\ncontent-length:" + b"0" * 5000 + b"3\n\nabc\0")
    assert frame.body == b"abc"


@pytest.mark.parametrize("version", VERSIONS)
def test_repeated_content_length_first_wins(version: str) -> None:
    frame = one(b"SEND\ncontent-length:2\ncontent-length:5\n\na\0\0", version)
    assert frame.body == b"a\0"


@pytest.mark.parametrize("command", [b"SUBSCRIBE", b"CONNECT", b"RECEIPT", b"ACK", b"DISCONNECT"])
def test_body_on_a_frame_that_may_not_have_one_is_an_error(command: bytes) -> None:
    fails(command + b"\n\nbody\0", "may not have a body")
    fails(command + b"\ncontent-length:4\n\nbody\0", "may not have a body")
    assert one(command + b"\ncontent-length:0\n\n\0").body == b""


def test_bodyless_frame_with_body_fails_before_its_nul() -> None:
    parser = FrameParser()
    with pytest.raises(RemoteProtocolError, match="may not have a body"):
        parser.feed(b"SUBSCRIBE\nid:0\n\nx")


# -- limits -------------------------------------------------------------------


def test_too_large_content_length_fails_before_the_body_arrives() -> None:
    parser = FrameParser(max_frame_size=100)
    with pytest.raises(RemoteProtocolError, match="exceeds max_frame_size"):
        parser.feed(b"SEND\ncontent-length:90\n\n")


def test_frame_of_exactly_max_frame_size_is_accepted() -> None:
    head = b"SEND\ncontent-length:10\n\n"
    size = len(head) + 10
    assert one(head + b"x" * 10 + b"\0", max_frame_size=size).body == b"x" * 10
    fails(head + b"x" * 10 + b"\0", "exceeds max_frame_size", max_frame_size=size - 1)


def test_body_without_content_length_fails_once_over_the_limit() -> None:
    parser = FrameParser(max_frame_size=20)
    parser.feed(b"SEND\n\n" + b"x" * 14)
    with pytest.raises(RemoteProtocolError, match="exceeds max_frame_size"):
        parser.feed(b"x")


def test_head_over_max_frame_size_fails_while_incomplete() -> None:
    parser = FrameParser(max_frame_size=30, max_header_length=1000)
    parser.feed(b"SEND\n" + b"k" * 25)
    with pytest.raises(RemoteProtocolError, match="larger than max_frame_size"):
        parser.feed(b"k")


def test_header_line_over_max_header_length_fails_while_still_incomplete() -> None:
    parser = FrameParser(max_header_length=10)
    parser.feed(b"SEND\nk:" + b"v" * 8)
    with pytest.raises(RemoteProtocolError, match="max_header_length=10"):
        parser.feed(b"v")


def test_long_header_line_fails_before_the_head_ends() -> None:
    parser = FrameParser(max_header_length=10)
    with pytest.raises(RemoteProtocolError, match="max_header_length=10"):
        parser.feed(b"SEND\nk:" + b"v" * 20 + b"\nj:1\n")


@pytest.mark.parametrize("version", VERSIONS)
def test_header_line_of_exactly_max_header_length_is_accepted(version: str) -> None:
    line = b"k:" + b"v" * 8
    crlf = b"\r\n" if version != "1.1" else b"\n"
    assert one(b"SEND\n" + line + crlf + b"\n\0", version, max_header_length=10)
    fails(b"SEND\n" + line + b"v\n\n\0", "max_header_length", version, max_header_length=10)


def test_max_header_length_counts_utf8_bytes() -> None:
    line = "k:" + "\u00e9" * 4  # 10 bytes, 6 characters
    assert one(f"SEND\n{line}\n\n\0".encode(), max_header_length=10)
    fails(f"SEND\n{line}x\n\n\0".encode(), "max_header_length", max_header_length=10)


def test_too_many_headers_fail_while_incomplete() -> None:
    parser = FrameParser(max_header_count=3)
    parser.feed(b"SEND\na:1\nb:2\nc:3\n")
    with pytest.raises(RemoteProtocolError, match="max_header_count=3"):
        parser.feed(b"d:4\n")


def test_header_count_at_the_limit_is_accepted() -> None:
    data = b"SEND\na:1\nb:2\nc:3\n\n\0"
    assert len(one(data, max_header_count=3).headers) == 3
    fails(data, "max_header_count=2", max_header_count=2)


def test_trickled_head_costs_linear_time() -> None:
    # A partial head is walked once, not re-scanned on every feed: feeding a
    # head one byte at a time must scale like its length, not its square.
    def trickle(size: int) -> float:
        data = b"SEND\n" + b"".join(b"h%d:%s\n" % (i, b"v" * 90) for i in range(size // 96))
        parser = FrameParser(max_header_count=10**6)
        start = time.perf_counter()
        for i in range(len(data)):
            parser.feed(data[i : i + 1])
        return time.perf_counter() - start

    small = min(trickle(16_000) for _ in range(3))
    large = min(trickle(64_000) for _ in range(3))
    assert large < 8 * small  # linear: ~4x; quadratic: ~16x
