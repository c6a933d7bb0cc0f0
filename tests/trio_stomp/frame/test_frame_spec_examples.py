"""Every example frame of the seed specs parses to exactly the frame it shows.

Each is fed whole, one byte at a time, and followed by trailing data (EOLs
and another frame), under each version whose rules it follows.
"""

from __future__ import annotations

import pytest
from frame_fixtures import (
    CONNECT_1_1_PADDED_BLANK_LINE,
    EXAMPLES,
    NOT_FRAMES,
    PARTIAL,
    Example,
)

from trio_stomp import RemoteProtocolError
from trio_stomp.frame import HEARTBEAT, Event, Frame, FrameParser, encode

CASES = [
    pytest.param(example, version, id=f"{example}-{version}")
    for example in EXAMPLES
    for version in example.versions
]
ALL_VERSIONS = ("1.0", "1.1", "1.2")


def feed_bytewise(parser: FrameParser, data: bytes) -> list[Event]:
    events: list[Event] = []
    for i in range(len(data)):
        events += parser.feed(data[i : i + 1])
    return events


def test_every_spec_is_represented() -> None:
    sources = {example.source.split(" ")[0] for example in EXAMPLES}
    assert sources == {
        "stomp-1.0-protocol.txt",
        "stomp-fuse-activemq-1.0.txt",
        "stomp-1.1-draft.md",
        "stomp-1.2-zh.txt",
        "stomp-1.2-ko.txt",
    }
    assert len(EXAMPLES) == 69


@pytest.mark.parametrize(("example", "version"), CASES)
def test_spec_example_whole(example: Example, version: str) -> None:
    parser = FrameParser(version)
    assert parser.feed(example.wire) == list(example.frames)
    assert not parser.in_frame
    assert parser.feed(b"") == []


@pytest.mark.parametrize(("example", "version"), CASES)
def test_spec_example_byte_by_byte(example: Example, version: str) -> None:
    parser = FrameParser(version)
    assert feed_bytewise(parser, example.wire) == list(example.frames)
    assert parser.feed(b"") == []


@pytest.mark.parametrize(("example", "version"), CASES)
def test_spec_example_with_trailing_data(example: Example, version: str) -> None:
    after = Frame("RECEIPT", {"receipt-id": "after"})
    trailer = b"\n\r\n" + encode(after, version) + b"\n"
    expected = [*example.frames, HEARTBEAT, HEARTBEAT, after, HEARTBEAT]
    assert FrameParser(version).feed(example.wire + trailer) == expected
    # The example twice in a row, and split at every point of the pair.
    double = example.wire + example.wire
    for cut in range(1, len(double) + 1):  # feed(b"") first would end the stream
        parser = FrameParser(version)
        events = parser.feed(double[:cut]) + parser.feed(double[cut:])
        assert events == [*example.frames, *example.frames]


@pytest.mark.parametrize(("example", "version"), CASES)
def test_spec_example_round_trips_through_the_encoder(example: Example, version: str) -> None:
    for frame in example.frames:
        (back,) = FrameParser(version).feed(encode(frame, version))
        assert isinstance(back, Frame)
        assert back.command == frame.command
        assert back.body == frame.body
        extra = [("content-length", str(len(frame.body)))] if frame.body else []
        if "content-length" in frame.headers:
            extra = []
        assert list(back.headers.items()) == [*frame.headers.items(), *extra]


def test_1_1_repeated_header_first_value_wins() -> None:
    (example,) = [e for e in EXAMPLES if "Repeated Header Entries" in e.source]
    (frame,) = FrameParser("1.1").feed(example.wire)
    assert isinstance(frame, Frame)
    assert frame.headers["foo"] == "World"
    assert frame.headers.getall("foo") == ["World", "Hello"]


def test_1_1_connect_padded_blank_line_is_blank_only_in_1_0() -> None:
    # The draft's CONNECT byte for byte: 1.0 strips trailing spaces from every
    # line, so its line of spaces is the blank line; 1.1 and 1.2 never trim,
    # and a line of spaces is not a header.
    expected = Frame("CONNECT", [("accept-version", "1.1"), ("host", "stomp.github.org")])
    assert FrameParser("1.0").feed(CONNECT_1_1_PADDED_BLANK_LINE) == [expected]
    assert feed_bytewise(FrameParser("1.0"), CONNECT_1_1_PADDED_BLANK_LINE) == [expected]
    for version in ("1.1", "1.2"):
        with pytest.raises(RemoteProtocolError, match="malformed header line"):
            FrameParser(version).feed(CONNECT_1_1_PADDED_BLANK_LINE)


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize(("source", "wire", "error"), NOT_FRAMES, ids=[s for s, _, _ in NOT_FRAMES])
def test_spec_schematic_is_not_a_frame(source: str, wire: bytes, error: str, version: str) -> None:
    with pytest.raises(RemoteProtocolError, match=error):
        FrameParser(version).feed(wire)
    # Byte by byte, the error comes as soon as it is certain.
    with pytest.raises(RemoteProtocolError, match=error):
        feed_bytewise(FrameParser(version), wire)


@pytest.mark.parametrize(("source", "wire"), PARTIAL, ids=[s for s, _ in PARTIAL])
def test_spec_example_without_nul_is_a_partial_frame(source: str, wire: bytes) -> None:
    parser = FrameParser("1.2")
    assert parser.feed(wire) == []
    assert parser.in_frame
    with pytest.raises(RemoteProtocolError, match="ended in the middle of a frame"):
        parser.feed(b"")
