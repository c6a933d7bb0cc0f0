"""The client builds its hottest frames by hand (SEND, 1.2 ACK/NACK): those bytes must
be exactly what the encoder gives for the same frame, and what the hand cannot build
the encoder's path gets (and refuses with the encoder's errors)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import trio_stomp
from trio_stomp.frame import Frame, FrameParser, LocalProtocolError, encode
from trio_stomp.frame._handmade import (
    ack_frame_bytes,
    ack_frames_bytes,
    plain_send_bytes,
    send_bytes,
    send_head,
    send_lines,
)
from trio_stomp.testing import FakePeer

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
            send_head(destination, version)
        return
    data = plain_send_bytes(send_head(destination, version), body)
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
    data = plain_send_bytes(send_head(destination, "1.0"), body)
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


NAMES = st.text(alphabet=st.sampled_from(["a", "-", ":", "\\", "\n", "\r", "é", "\0"]), max_size=4)
HEADERS = st.dictionaries(
    NAMES | st.sampled_from(["destination", "content-length"]), TEXT, min_size=1
)


@given(
    headers=HEADERS,
    body=st.binary(min_size=1, max_size=16),
    version=st.sampled_from(["1.1", "1.2"]),
)
def test_hand_built_send_with_headers_equals_the_encoder_or_declines(
    headers: dict[str, str], body: bytes, version: str
) -> None:
    lines = send_lines(headers)
    if lines is None:
        # Declined: something needs escaping, checking or refusing.
        joined = "".join(headers) + "".join(headers.values())
        assert (
            any(c in joined for c in ":\\\n\r\0")
            or "" in headers
            or {"destination", "content-length"} & headers.keys()
        )
        return
    data = send_bytes(send_head("/queue/a", version), lines, body)
    pairs = [("destination", "/queue/a"), *headers.items()]
    assert data == encode(Frame("SEND", pairs, body), version)


def test_send_lines_declines_what_is_not_text() -> None:
    assert send_lines({"n": 1}) is None  # type: ignore[dict-item]
    assert send_bytes(b"SEND\n", "x:\udc80\n", b"b") is None  # a lone surrogate


async def sent_by_client(headers: object, body: bytes | str, version: str = "1.2") -> Frame:
    """What the client writes for ``send("/queue/a", body, headers=headers)``."""
    client_end, peer_end = trio.testing.memory_stream_pair()
    peer = FakePeer(peer_end, version)
    sent: list[Frame] = []

    async def broker() -> None:
        await peer.accept()
        frame = await peer.receive()
        if frame.command == "SEND":
            sent.append(frame)
        else:
            peer.pending.insert(0, frame)  # the DISCONNECT: drain answers it
        await peer.drain()

    refused: list[Exception] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker)
            async with trio_stomp.wrap_stream(client_end, heartbeat=(0, 0)) as client:
                try:
                    await client.send("/queue/a", body, headers=headers)  # type: ignore[arg-type]
                except (LocalProtocolError, TypeError) as exc:
                    refused.append(exc)
    if refused:
        assert not sent, "a refused send reached the broker"
        raise refused[0]
    return sent[0]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize(
    "headers",
    [
        {"seq": "1"},
        {"seq": "1", "x-b": "two words"},
        {"needs": "esc:aped"},
        [("seq", "1"), ("seq", "2")],
        {"seq": " padded "},
    ],
)
async def test_send_with_headers_reaches_the_broker_whole(
    headers: dict[str, str] | list[tuple[str, str]], version: str
) -> None:
    if version == "1.0" and headers == {"needs": "esc:aped"}:
        return  # 1.0 cannot escape; its refusal is the encoder's, tested there
    if version == "1.0" and headers == {"seq": " padded "}:
        with pytest.raises(LocalProtocolError, match="spaces"):
            await sent_by_client(headers, b"body", version)
        return
    frame = await sent_by_client(headers, b"body", version)
    pairs = list(headers.items()) if isinstance(headers, dict) else headers
    assert list(frame.headers.items()) == [
        ("destination", "/queue/a"),
        *pairs,
        ("content-length", "4"),
    ]
    assert frame.body == b"body"


async def test_a_text_send_with_headers_is_labelled() -> None:
    frame = await sent_by_client({"seq": "7"}, "héllo")
    assert list(frame.headers.items()) == [
        ("destination", "/queue/a"),
        ("content-type", "text/plain;charset=utf-8"),
        ("seq", "7"),
        ("content-length", "6"),
    ]


@pytest.mark.parametrize(
    ("headers", "error", "match"),
    [
        ({"content-length": "3"}, LocalProtocolError, "set by the client"),
        ({"destination": "/queue/b"}, LocalProtocolError, "set by the client"),
        ({"k": "a\0b"}, LocalProtocolError, "NUL"),
        ({"n": 1}, TypeError, "must be str"),
    ],
)
async def test_a_send_with_bad_headers_is_refused_and_sends_nothing(
    headers: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        await sent_by_client(headers, b"body")


@pytest.mark.parametrize(
    ("version", "receipt", "command", "expected"),
    [
        ("1.2", False, "ACK", [("id", "a:1")]),
        ("1.2", False, "NACK", [("id", "a:1")]),
        ("1.2", True, "ACK", [("id", "a:1"), ("receipt", "r-2")]),
        ("1.1", False, "ACK", [("message-id", "m1"), ("subscription", "1")]),
    ],
)
async def test_each_ack_carries_what_its_version_and_receipt_need(
    version: str, receipt: bool, command: str, expected: list[tuple[str, str]]
) -> None:
    """The hand-built ACK serves 1.2 without receipt only; the others are the encoder's."""
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end, version)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer.accept)
            async with (
                trio_stomp.wrap_stream(client_end, heartbeat=(0, 0)) as client,
                client.subscribe("/queue/a", ack="client-individual") as sub,
            ):
                subscribe = await peer.receive()
                headers = {
                    "subscription": subscribe.headers["id"],
                    "destination": "/queue/a",
                    "message-id": "m1",
                    "ack": "a:1",
                }
                await peer.send("MESSAGE", headers, b"x")
                message = await sub.__anext__()
                answer = trio.Event()

                async def acknowledge() -> None:
                    await message.acknowledge(command, receipt=receipt)  # type: ignore[arg-type]
                    answer.set()

                nursery.start_soon(acknowledge)
                ack = await peer.receive()
                assert (ack.command, list(ack.headers.items())) == (command, expected)
                if receipt:
                    assert not answer.is_set()  # it waits for its RECEIPT
                    await peer.send("RECEIPT", {"receipt-id": ack.headers["receipt"]})
                await answer.wait()
                nursery.start_soon(peer.drain)
