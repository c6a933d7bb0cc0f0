"""The WebSocket FrameSplitter (sans-IO): one message per frame and per heart-beat,
every byte once, in order, however the input is cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_stomp.frame import Frame, FrameSplitter, encode

FRAMES = [
    encode(Frame("CONNECT", [("accept-version", "1.2"), ("host", "/")])),
    b"\n",
    encode(Frame("SEND", [("destination", "/q")], b"with\0NUL\0inside")),
    b"SEND\ndestination:/q\n\nno content-length\0",
    b"\r\n",
    b"SEND\r\ndestination:/q\r\ncontent-length:3\r\n\r\n\0\0\0\0",
    b"SEND\ncontent-length:2\ncontent-length:9\n\nab\0",  # the first one counts
    b"SEND\ncontent-length:x\n\nfalls back to NUL\0",
    b"\n",
    b"\n",
]


def _messages(chunks: list[bytes]) -> tuple[list[bytes], bytes]:
    """Feed ``chunks`` to a splitter; return the finished messages and the open one."""
    splitter = FrameSplitter()
    messages: list[bytes] = []
    current = b""
    for chunk in chunks:
        for piece, last in splitter.split(chunk):
            current += piece
            if last:
                messages.append(current)
                current = b""
    return messages, current


def test_splitter_one_message_per_frame_and_per_heartbeat() -> None:
    assert _messages([b"".join(FRAMES)]) == (FRAMES, b"")
    assert _messages(FRAMES) == (FRAMES, b"")


def test_splitter_byte_at_a_time() -> None:
    data = b"".join(FRAMES)
    assert _messages([data[i : i + 1] for i in range(len(data))]) == (FRAMES, b"")


@pytest.mark.parametrize("cut", range(1, 60))
def test_splitter_cut_anywhere(cut: int) -> None:
    data = b"".join(FRAMES)
    assert _messages([data[:cut], data[cut:]]) == (FRAMES, b"")


def test_splitter_leaves_an_incomplete_frame_open() -> None:
    assert _messages([b"SEND\ncontent-length:5\n\nab"]) == ([], b"SEND\ncontent-length:5\n\nab")
    assert _messages([b"SEND\ndestin"]) == ([], b"SEND\ndestin")
    assert _messages([b"\r"]) == ([], b"\r")


def test_splitter_empty_input() -> None:
    assert FrameSplitter().split(b"") == []


@given(st.lists(st.binary(max_size=64), max_size=20))
def test_splitter_passes_every_byte_once_in_order(chunks: list[bytes]) -> None:
    splitter = FrameSplitter()
    out = b"".join(piece for chunk in chunks for piece, _ in splitter.split(chunk))
    assert out == b"".join(chunks)
