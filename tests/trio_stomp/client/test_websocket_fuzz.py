"""The WebSocket receive path under hostile bytes: whatever the peer sends after the
upgrade, reading gives bytes, the end of the stream, or ``trio.BrokenResourceError``;
nothing else escapes, and nothing hangs."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("wsproto")

from trio_stomp._websocket import WebSocketStream, accept_websocket, connect_websocket

# Valid frame starts (text, binary, ping, close) so that shrinking explores frames,
# not only junk that fails at the first byte.
HEADS = st.sampled_from([b"\x81", b"\x82", b"\x89", b"\x88", b"\x01", b"\x80", b"\x0a"])
CHUNKS = st.lists(
    st.one_of(
        st.binary(max_size=64), st.builds(lambda h, rest: h + rest, HEADS, st.binary(max_size=40))
    ),
    max_size=8,
)


async def _read_everything(chunks: list[bytes]) -> bytes:
    """What the client reads after the upgrade when the server's transport sends
    ``chunks`` and closes."""
    client_side, server_side = trio.testing.memory_stream_pair()
    done: dict[str, WebSocketStream] = {}

    async def client() -> None:
        done["client"] = await connect_websocket(
            client_side, host="test", port=80, resource="/ws", close_timeout=0.1
        )

    async def server() -> None:
        done["server"] = await accept_websocket(server_side, close_timeout=0.1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client)
        nursery.start_soon(server)
    stream = done["client"]
    # The peer's raw transport: bytes straight onto the wire, no WebSocket framing.
    for chunk in chunks:
        await server_side.send_all(chunk)
    await server_side.send_stream.aclose()
    received = bytearray()
    try:
        while data := await stream.receive_some(1000):
            received += data
    except trio.BrokenResourceError:
        pass  # the one error a hostile peer may cause
    finally:
        await trio.aclose_forcefully(stream)
    return bytes(received)


async def test_the_harness_reads_a_valid_message() -> None:
    # A binary message "abc" (server frames are unmasked), cut in two chunks.
    assert await _read_everything([b"\x82\x03a", b"bc"]) == b"abc"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(chunks=[b"\x88\x02\x03\xe8"])  # a Close 1000 from the server, unmasked: valid
@example(chunks=[b"\x81\x7f" + b"\xff" * 8])  # a 2**64 - 1 byte length
@example(chunks=[b"\x89\x7e\x00\x80"])  # a ping longer than 125 bytes
@given(chunks=CHUNKS)
def test_only_broken_resource_error_escapes_the_receive_path(chunks: list[bytes]) -> None:
    async def run() -> None:
        with trio.fail_after(5):
            await _read_everything(chunks)

    trio.run(run)
