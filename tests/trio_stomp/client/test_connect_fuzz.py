"""connect() against a hostile server: whatever bytes come back, only the StompError
family escapes (never an OverflowError, ValueError or a group), and nothing hangs."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import trio_stomp

# A CONNECTED head with each header fuzzed, so shrinking explores near-valid replies.
HEARTBEATS = st.one_of(
    st.from_regex(r"\A[0-9]{1,400},[0-9]{1,400}\Z"),
    st.text(alphabet="0123456789,- x\t", max_size=30),
)
REPLIES = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda version, beat, tail: (
            f"CONNECTED\nversion:{version}\nheart-beat:{beat}\n\n".encode() + b"\0" + tail
        ),
        st.sampled_from(["1.0", "1.1", "1.2", "9.9", ""]),
        HEARTBEATS,
        st.binary(max_size=60),
    ),
)


async def _connect_to(reply: bytes) -> None:
    client_side, server_side = trio.testing.memory_stream_pair()

    async def server() -> None:
        await server_side.receive_some()  # the CONNECT
        await server_side.send_all(reply)
        await server_side.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(server)
        try:
            async with trio_stomp.wrap_stream(client_side, connect_timeout=2) as client:
                await client.send("/queue/x", b"after connecting", receipt=True)
        except trio_stomp.StompError:
            pass  # the only kind of error a peer may cause


async def test_a_heart_beat_of_400_digits_is_a_protocol_error() -> None:
    reply = b"CONNECTED\nversion:1.2\nheart-beat:" + b"9" * 400 + b",0\n\n\0"
    client_side, server_side = trio.testing.memory_stream_pair()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def server() -> None:
                await server_side.receive_some()
                await server_side.send_all(reply)

            nursery.start_soon(server)
            with pytest.raises(trio_stomp.StompError, match="heart-beat"):
                async with trio_stomp.wrap_stream(client_side):
                    raise AssertionError("connected with a 400-digit heart-beat")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(reply=b"CONNECTED\nversion:1.2\nheart-beat:" + b"9" * 400 + b",1\n\n\0")
@example(reply=b"CONNECTED\nversion:1.2\nheart-beat:-1,-1\n\n\0")
@example(reply=b"CONNECTED\nversion:1.2\ncontent-length:99999999999999999999\n\n\0")
@example(reply=b"ERROR\nmessage:no\n\n\0")
@given(reply=REPLIES)
def test_whatever_a_server_sends_connect_raises_only_stomp_errors(reply: bytes) -> None:
    async def run() -> None:
        with trio.fail_after(5):
            await _connect_to(reply)

    trio.run(run)
