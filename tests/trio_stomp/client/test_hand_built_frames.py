"""The client builds its hottest frames by hand (SEND without headers, 1.2 ACK/NACK):
those bytes must be exactly what the encoder gives for the same frame."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_stomp._core import ack_frame_bytes, ack_frames_bytes, plain_send_bytes, send_prefix
from trio_stomp.frame import Frame, FrameParser, LocalProtocolError, encode

# Header text with everything that needs escaping, and some that does not.
TEXT = st.text(alphabet=st.sampled_from(["a", "/", ":", "\\", "\n", "\r", "é", "0", " "]))


@given(
    destination=TEXT,
    body=st.binary(min_size=1, max_size=64),
    version=st.sampled_from(["1.1", "1.2"]),
)
def test_hand_built_send_equals_the_encoder(destination: str, body: bytes, version: str) -> None:
    if version == "1.1" and "\r" in destination:
        # 1.1 has no escape for CR: the hot path refuses it, as the encoder does.
        with pytest.raises(LocalProtocolError, match="carriage return"):
            send_prefix(destination, version)
        return
    data = plain_send_bytes(send_prefix(destination, version), body)
    assert data == encode(Frame("SEND", [("destination", destination)], body), version)
    [parsed] = FrameParser(version).feed(data)
    assert isinstance(parsed, Frame)
    assert (parsed.command, parsed.headers.get("destination"), parsed.body) == (
        "SEND",
        destination,
        body,
    )


@given(
    destination=st.text(alphabet=st.sampled_from(["a", "/", "é", "0"])),
    body=st.binary(min_size=1, max_size=64),
)
def test_hand_built_send_equals_the_encoder_in_1_0(destination: str, body: bytes) -> None:
    # 1.0 has no escaping: only header text without ":" or line breaks can be sent.
    # (The hot path serves non-empty bodies only: an empty one takes the general path.)
    data = plain_send_bytes(send_prefix(destination, "1.0"), body)
    assert data == encode(Frame("SEND", [("destination", destination)], body), "1.0")


@given(command=st.sampled_from(["ACK", "NACK"]), ack_id=TEXT)
def test_hand_built_ack_equals_the_encoder(command: str, ack_id: str) -> None:
    data = ack_frame_bytes(command, ack_id)
    assert data == encode(Frame(command, [("id", ack_id)]), "1.2")
    assert FrameParser("1.2").feed(data) == [Frame(command, [("id", ack_id)])]


@given(
    command=st.sampled_from(["ACK", "NACK"]),
    ack_ids=st.lists(st.text(alphabet=st.sampled_from(["a", ":", "\\", "\n", "\r", "é", "\0"]))),
)
def test_acks_built_at_once_equal_one_by_one(command: str, ack_ids: list[str]) -> None:
    assert ack_frames_bytes(command, ack_ids) == b"".join(
        ack_frame_bytes(command, ack_id) for ack_id in ack_ids
    )
