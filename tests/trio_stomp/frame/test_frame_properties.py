"""Properties of the codec, checked with hypothesis.

- decode(encode(frame)) == frame, per version, for every frame the version
  can represent; and LocalProtocolError for what it cannot.
- Whatever bytes arrive, in whatever chunks, only RemoteProtocolError escapes
  ``feed``, and the parser never holds more than its limits allow.
- Feeding in any chunking gives the same events as feeding whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_stomp import LocalProtocolError, RemoteProtocolError
from trio_stomp.frame import HEARTBEAT, Event, Frame, FrameParser, encode
from trio_stomp.frame._frame import BODY_COMMANDS, COMMANDS, UNESCAPED_COMMANDS

VERSIONS = ("1.0", "1.1", "1.2")
SORTED_COMMANDS = sorted(COMMANDS)
#: Characters that stress the codec, drawn often; any other character may come too.
SPECIAL = ":\n\r\\\x01 \u00e9\u20ac\U0001f600"


def header_text(forbid: str, min_size: int) -> st.SearchStrategy[str]:
    """Header text without NUL nor ``forbid``, rich in SPECIAL characters."""
    chars = st.one_of(
        st.sampled_from([c for c in SPECIAL if c not in forbid]),
        st.characters(exclude_categories=["Cs"], exclude_characters="\0" + forbid),
    )
    return st.text(chars, min_size=min_size, max_size=8)


#: Binary bodies, often holding (or starting with) the bytes that frame STOMP.
bodies = st.lists(
    st.one_of(st.binary(max_size=8), st.sampled_from([b"\n", b"\r\n", b"\0", b"\n\n", b"\r"])),
    max_size=5,
).map(b"".join)


def escaped(version: str, command: str) -> bool:
    return version != "1.0" and command not in UNESCAPED_COMMANDS


@st.composite
def frames(draw: st.DrawFn, version: str, command: str | None = None) -> Frame:
    """A frame that ``version`` can represent, content-length aside."""
    if command is None:
        command = draw(st.sampled_from(SORTED_COMMANDS))
    if escaped(version, command):
        # Escaping covers everything but NUL (and in 1.1 CR, which it cannot escape).
        cr = "\r" if version == "1.1" else ""
        names, values = header_text(cr, 1), header_text(cr, 0)
    else:
        # No escaping (1.0, CONNECT, STOMP, CONNECTED): no line breaks, no
        # colon in a name, and 1.0 strips the padding of a value.
        names, values = header_text(":\n\r", 1), header_text("\n\r", 0)
        if version == "1.0":
            values = values.map(lambda value: value.strip(" "))
    # A few fixed names, so that some frames repeat a header.
    names = st.one_of(names, st.sampled_from(["destination", "x"]))
    names = names.filter(lambda name: name.lower() != "content-length")
    pairs = draw(st.lists(st.tuples(names, values), max_size=6))
    body = draw(bodies) if command in BODY_COMMANDS else b""
    return Frame(command, pairs, body)


def with_content_length(frame: Frame) -> Frame:
    """The frame as encode() sends it: a body gets its content-length."""
    if not frame.body:
        return frame
    return Frame(
        frame.command,
        [*frame.headers.items(), ("content-length", str(len(frame.body)))],
        frame.body,
    )


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), lenient=st.booleans())
def test_decode_encode_round_trip(version: str, data: st.DataObject, lenient: bool) -> None:
    frame = data.draw(frames(version))
    wire = encode(frame, version)
    assert FrameParser(version, lenient=lenient).feed(wire) == [with_content_length(frame)]


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_text_body_round_trips_without_content_length(version: str, data: st.DataObject) -> None:
    frame = data.draw(frames(version, command="SEND"))
    frame = Frame(frame.command, frame.headers, frame.body.replace(b"\0", b""))
    assert FrameParser(version).feed(encode(frame, version, content_length=False)) == [frame]


#: Headers that some version cannot carry, by defect.
_BAD_HEADERS: dict[str, st.SearchStrategy[tuple[str, str]]] = {
    "nul": st.sampled_from([("n\0", "v"), ("n", "\0"), ("n", "a\0b")]),
    "empty name": st.just(("", "v")),
    "line break": st.sampled_from([("n\n", "v"), ("n", "\r"), ("n", "a\nb"), ("\r", "v")]),
    "colon in name": st.just(("a:b", "v")),
    "cr in 1.1": st.sampled_from([("n", "a\rb"), ("n", "v\r"), ("n\r", "v")]),
    "padding": st.sampled_from([("n", " v"), ("n", "v "), ("n", " ")]),
}


@st.composite
def unrepresentable(draw: st.DrawFn, version: str) -> tuple[Frame, bool]:
    """A frame ``version`` cannot carry (and the content_length flag to use)."""
    frame = draw(frames(version))
    pairs = list(frame.headers.items())
    body, command, flag = frame.body, frame.command, True
    defects = ["nul", "empty name", "body", "content-length"]
    if not escaped(version, command):
        defects += ["line break", "colon in name"]
    if version == "1.0":
        defects.append("padding")
    if version == "1.1":
        defects.append("cr in 1.1")
    if command in BODY_COMMANDS:
        defects.append("bare nul body")
    defect = draw(st.sampled_from(defects))
    at = draw(st.integers(0, len(pairs)))
    name, value = draw(_BAD_HEADERS[defect]) if defect in _BAD_HEADERS else ("n", "v")
    if defect == "body":
        command = draw(st.sampled_from(sorted(COMMANDS - BODY_COMMANDS)))
        body = draw(st.binary(min_size=1, max_size=8))
    elif defect == "content-length":
        name, value = "content-length", str(len(body) + draw(st.integers(1, 5)))
    elif defect == "bare nul body":
        body, flag = body + b"\0", False
    pairs.insert(at, (name, value))
    if defect in ("body", "bare nul body"):
        del pairs[at]
    return Frame(command, pairs, body), flag


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_unrepresentable_frame_raises_local_protocol_error(
    version: str, data: st.DataObject
) -> None:
    frame, flag = data.draw(unrepresentable(version))
    with pytest.raises(LocalProtocolError):
        encode(frame, version, content_length=flag)


# -- any bytes, any chunks ----------------------------------------------------

#: Pieces of STOMP, so that random streams get deep into the parser.
TOKENS = [
    b"SEND\n\n",
    b"MESSAGE\ncontent-length:",
    b"SEND\n",
    b"MESSAGE\n",
    b"CONNECT\n",
    b"send\n",
    b"ERROR",
    b"SUBSCRIBE\n",
    b"\n",
    b"\r\n",
    b"\r",
    b"\n\n",
    b"\0",
    b":",
    b"k:v\n",
    b"\\",
    b"\\c",
    b"\\n",
    b"\\r",
    b"\\t",
    b"content-length:",
    b"Content-Length:",
    b"3",
    b"0",
    b"99999999999999999999",
    b" ",
    b"x" * 20,
    b"\xff",
    b"\xc3\xa9",
    b"\xed\xa0\x80",
]
streams = st.lists(st.one_of(st.sampled_from(TOKENS), st.binary(max_size=6)), max_size=60).map(
    b"".join
)
chunk_sizes = st.lists(st.integers(1, 12), min_size=1, max_size=20)
limits = st.fixed_dictionaries(
    {
        "version": st.sampled_from(VERSIONS),
        "lenient": st.booleans(),
        "max_frame_size": st.integers(1, 400),
        "max_header_count": st.integers(1, 4),
        "max_header_length": st.integers(1, 30),
    }
)


def chunked(data: bytes, sizes: Sequence[int]) -> list[bytes]:
    """``data`` cut into pieces of the given sizes, cycled."""
    pieces, pos, i = [], 0, 0
    while pos < len(data):
        pieces.append(data[pos : pos + sizes[i % len(sizes)]])
        pos += sizes[i % len(sizes)]
        i += 1
    return pieces


def check_buffers(parser: FrameParser) -> None:
    """The parser holds no more than its limits allow, for no longer than needed.

    Whatever it keeps of an incomplete frame must still be able to become a
    frame within the limits: a limit certain to be broken has already failed.
    """
    # The start of a body: never more than max_frame_size leaves for it.
    held = sum(len(part) for part in parser._parts)
    assert held == parser._have
    assert held <= parser._budget <= parser.max_frame_size
    # A partial head: its complete command line names a command, no header
    # line (complete or not) is too long, there are not too many of them.
    head = bytes(parser._buf)
    assert not (held and head)
    assert len(head) <= parser.max_frame_size
    if not head or head == b"\r":
        return
    command, *lines = head.split(b"\n")
    crlf = parser.version != "1.1"
    if lines:
        name = command.rstrip(b" \r" if parser.version == "1.0" else b"\r" if crlf else b"")
        assert name.decode().upper() in COMMANDS
    else:
        assert len(command) <= 33
    assert len(lines) - 1 <= parser.max_header_count
    for line in lines:
        assert len(line) - (crlf and line.endswith(b"\r")) <= parser.max_header_length


def run(parser: FrameParser, pieces: Sequence[bytes]) -> tuple[list[Event], bool]:
    """Feed every piece then the end of the stream: events, and whether it failed."""
    events: list[Event] = []
    try:
        for piece in pieces:
            if piece:  # feed(b"") ends the stream
                events += parser.feed(piece)
            check_buffers(parser)
        events += parser.feed(b"")
    except RemoteProtocolError:
        return events, True
    return events, False


@settings(max_examples=400, deadline=None)
@given(data=streams, sizes=chunk_sizes, options=limits)
def test_any_bytes_in_any_chunks_raise_only_remote_protocol_error(
    data: bytes, sizes: list[int], options: dict[str, object]
) -> None:
    # run() lets RemoteProtocolError alone through; anything else fails here.
    run(FrameParser(**options), chunked(data, sizes))  # type: ignore[arg-type]


@settings(max_examples=250, deadline=None)
@given(data=streams, sizes=chunk_sizes, options=limits)
def test_any_chunking_of_any_bytes_agrees_with_whole(
    data: bytes, sizes: list[int], options: dict[str, object]
) -> None:
    whole, whole_failed = run(FrameParser(**options), [data])  # type: ignore[arg-type]
    pieces, pieces_failed = run(FrameParser(**options), chunked(data, sizes))  # type: ignore[arg-type]
    assert whole_failed == pieces_failed
    if not whole_failed:
        assert pieces == whole


@st.composite
def valid_streams(draw: st.DrawFn, version: str) -> tuple[bytes, list[Event]]:
    """Encoded frames with EOLs around them, and the events they are."""
    wire: list[bytes] = []
    events: list[Event] = []
    for _ in range(draw(st.integers(0, 5))):
        for eol in draw(st.lists(st.sampled_from([b"\n", b"\r\n"]), max_size=2)):
            wire.append(eol)
            events.append(HEARTBEAT)
        frame = draw(frames(version))
        encoded = encode(frame, version)
        if version != "1.1" and draw(st.booleans()):
            # 1.0 and 1.2 also end lines with CR LF.
            head, _, body = encoded.partition(b"\n\n")
            encoded = head.replace(b"\n", b"\r\n") + b"\r\n\r\n" + body
        wire.append(encoded)
        events.append(with_content_length(frame))
    return b"".join(wire), events


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=80, deadline=None)
@given(data=st.data(), sizes=chunk_sizes)
def test_any_chunking_of_valid_frames_gives_the_same_events(
    version: str, data: st.DataObject, sizes: list[int]
) -> None:
    wire, expected = data.draw(valid_streams(version))
    assert run(FrameParser(version), [wire]) == (expected, False)
    assert run(FrameParser(version), chunked(wire, sizes)) == (expected, False)
    assert run(FrameParser(version), chunked(wire, [1])) == (expected, False)
