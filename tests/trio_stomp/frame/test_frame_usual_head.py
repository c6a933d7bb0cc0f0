"""The parser's usual-head path and the headers it keeps as text.

The usual head (1.1 or 1.2, LF lines, one raw colon per header line) is
found and checked in one step (whole-head passes in pure Python, one walk
over the bytes when compiled) and its headers are split only when something
reads them all; everything else takes the exact path. These check that the
two never disagree, that the two ways of finding the usual head agree, and
that a head kept as text answers every lookup as the split pairs would.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trio_stomp import RemoteProtocolError
from trio_stomp.frame import Frame, FrameParser, Headers
from trio_stomp.frame._head import HeadRules, parse_head, usual_head
from trio_stomp.frame._shape import find_usual_end, usual_head_end, walk_usual_end

#: Pieces of heads, rich in what shapes one (LF, colon) and what takes it off
#: the usual path (CR, NUL, backslashes, bad UTF-8, CONNECTED).
PIECES = [
    b"MESSAGE",
    b"SEND",
    b"message",
    b"CONNECTED",
    b"\n",
    b"\r",
    b"\0",
    b":",
    b"::",
    b"\nk:v",
    b"\nsubscription:1",
    b"\ncontent-length:",
    b"\ncontent-length:12",
    b"\ncontent-length:0003",
    b"\ncontent-length:99999999999999999999",
    b"\\",
    b"\\c",
    b"\\n",
    b"\\r",
    b"\\\\",
    b"\\t",
    b"x" * 20,
    b"\xff",
    b"\xc3\xa9",
]
heads = st.lists(st.one_of(st.sampled_from(PIECES), st.binary(max_size=4)), max_size=24).map(
    b"".join
)
#: Names to look up: present ones come from the head itself; these add the
#: absent and the awkward (a colon, a newline, a backslash, empty).
ODD_NAMES = ["", "k", "x", "content-length", "a:b", "k:v\nk", "k\nsubscription", "\\", "k\\"]


def exact(raw: bytes, version: str, parser: FrameParser) -> tuple[str, Headers, int | None]:
    return parse_head(raw.decode(), len(raw), version, parser)


def usual_path(
    raw: bytes, version: str, rules: HeadRules
) -> tuple[str, Headers, int | None] | None:
    """What the parser's usual path makes of the head ``raw`` followed by its blank line."""
    if usual_head_end(raw + b"\n\n", 0) != len(raw):
        return None
    return usual_head(raw, version, rules)


@settings(max_examples=600, deadline=None)
@given(
    raw=heads,
    version=st.sampled_from(["1.1", "1.2"]),
    lenient=st.booleans(),
    max_header_count=st.integers(1, 8),
    max_header_length=st.integers(1, 80),
)
@example(raw=b"MESSAGE\n:v", version="1.2", lenient=False, max_header_count=8, max_header_length=80)
@example(
    raw=b"MESSAGE\nk\\t:v", version="1.2", lenient=False, max_header_count=8, max_header_length=80
)
@example(
    raw=b"MESSAGE\nk:v\\r", version="1.1", lenient=False, max_header_count=8, max_header_length=80
)
def test_the_usual_path_agrees_with_the_exact_one(
    raw: bytes, version: str, lenient: bool, max_header_count: int, max_header_length: int
) -> None:
    parser = FrameParser(
        version,
        lenient=lenient,
        max_header_count=max_header_count,
        max_header_length=max_header_length,
    )
    try:
        usual = usual_path(raw, version, parser)
    except RemoteProtocolError as exc:
        # A usual head with a bad content-length: the exact path says the same.
        with pytest.raises(RemoteProtocolError, match=re.escape(str(exc))):
            exact(raw, version, parser)
        return
    try:
        expected = exact(raw, version, parser)
    except (RemoteProtocolError, UnicodeDecodeError):
        assert usual is None  # else the exact path judges a bad head
        return
    if usual is None:
        return  # valid, but not the usual shape: the exact path reads it
    command, headers, length = usual
    assert (command, length) == (expected[0], expected[2])
    # Looked up before the pairs exist, then split: both as the exact path's.
    for name in {name for name, _ in expected[1].items()} | set(ODD_NAMES):
        assert headers.get(name) == expected[1].get(name), name
        assert (name in headers) == (name in expected[1]), name
    assert headers.items() == expected[1].items()
    assert headers == expected[1]


@settings(max_examples=1000, deadline=None)
@given(
    buf=st.lists(st.one_of(st.sampled_from(PIECES), st.binary(max_size=4)), max_size=40).map(
        b"".join
    ),
    pos=st.integers(0, 8),
)
@example(buf=b"MESSAGE" + b"\nk:v" * 256 + b"\n\n", pos=0)
@example(buf=b"MESSAGE" + b"\nk:v" * 257 + b"\n\n", pos=0)
def test_both_ways_to_find_the_usual_head_agree(buf: bytes, pos: int) -> None:
    end = find_usual_end(buf, pos)
    assert walk_usual_end(buf, pos) == end
    if end >= 0:
        assert buf[end : end + 2] == b"\n\n"
        assert buf.find(b"\n\n", pos) == end


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(
            st.text(st.sampled_from("ab:\\\n\r\u00e9"), min_size=1, max_size=4),
            st.text(st.sampled_from("ab:\\\n\r\u00e9"), max_size=4),
        ),
        max_size=5,
    ),
    names=st.lists(st.text(st.sampled_from("ab:\\\n\r\u00e9"), max_size=4), max_size=6),
    version=st.sampled_from(["1.1", "1.2"]),
)
def test_headers_kept_as_text_answer_as_their_pairs(
    pairs: list[tuple[str, str]], names: list[str], version: str
) -> None:
    from trio_stomp.frame import encode

    if version == "1.1":
        # 1.1 cannot escape CR, so encode() refuses it; a peer may still send it
        # raw, and the parser must read it back: put it in the wire by hand.
        marked = [(n.replace("\r", "\x01"), v.replace("\r", "\x01")) for n, v in pairs]
        wire = encode(Frame("MESSAGE", marked), version).replace(b"\x01", b"\r")
    else:
        wire = encode(Frame("MESSAGE", pairs), version)
    frame = parsed(wire, version)
    reference = Headers(pairs)
    for name in [*names, *(name for name, _ in pairs)]:
        assert frame.headers.get(name) == reference.get(name)
        assert (name in frame.headers) == (name in reference)
        if name in reference:
            assert frame.headers[name] == reference[name]
        else:
            with pytest.raises(KeyError):
                frame.headers[name]
    assert frame.headers == reference
    assert len(frame.headers) == len(pairs)
    # Straight from the text (before a split), then from the split pairs.
    first = reference.as_dict()
    assert list(parsed(wire, version).headers.as_dict().items()) == list(first.items())
    assert list(frame.headers.as_dict().items()) == list(first.items())


def parsed(wire: bytes, version: str) -> Frame:
    """The one frame of ``wire``."""
    (frame,) = [e for e in FrameParser(version).feed(wire) if isinstance(e, Frame)]
    return frame


@given(
    lines=st.lists(st.text(st.sampled_from("ab:\n\u00e9"), max_size=4), max_size=6),
)
def test_both_ways_to_take_first_values_and_pairs_agree(lines: list[str]) -> None:
    from trio_stomp.frame._headers import _first_values_at_once, _first_values_walk, _pairs_walk

    text = "\n".join(["MESSAGE", *lines])
    expected: dict[str, str] = {}
    pairs = [(name, value) for name, _, value in (x.partition(":") for x in text.split("\n")[1:])]
    assert list(_pairs_walk(text)) == pairs
    for name, value in pairs:
        expected.setdefault(name, value)
    assert list(_first_values_walk(text).items()) == list(expected.items())
    assert list(_first_values_at_once(text).items()) == list(expected.items())


def test_an_activemq_message_reads_its_escaped_id_without_splitting() -> None:
    wire = (
        b"MESSAGE\ndestination:/queue/a\nmessage-id:ID\\cbox-4055\\c1\\c1\nsubscription:0\n"
        b"ack:ID\\cbox-4055\\c1\ncontent-length:2\n\nhi\0"
    )
    (frame,) = FrameParser("1.2").feed(wire)
    assert isinstance(frame, Frame)
    assert frame.headers["message-id"] == "ID:box-4055:1:1"
    assert frame.headers.get("subscription") == "0"
    assert frame.headers.getall("ack") == ["ID:box-4055:1"]
    assert frame.body == b"hi"


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        (b"MESSAGE\n:v\n\n\0", "malformed header line"),
        (b"MESSAGE\nk\n\n\0", "malformed header line"),
        (b"MESSAGE\nk:v\\t\n\n\0", "undefined escape sequence"),
        (b"MESSAGE\nk:v:w\n\n\0", "raw colon"),
    ],
)
def test_bad_heads_still_fail_with_their_reason(wire: bytes, error: str) -> None:
    with pytest.raises(RemoteProtocolError, match=error):
        FrameParser("1.2").feed(wire)
