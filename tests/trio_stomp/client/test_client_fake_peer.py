"""Client behaviour pinned against a scripted peer: handshake, heart-beats, errors."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_stomp
from trio_stomp._connection import WRITE_FAILURE_GRACE
from trio_stomp.frame import CONNECT_RESERVED_HEADERS
from trio_stomp.testing import FakePeer


async def test_handshake_reports_version_server_and_session() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            connect = await peer.accept({"server": "fake/1.0", "session": "s-1"})
            assert connect.headers["accept-version"] == "1.0,1.1,1.2"
            assert connect.headers["host"] == "vh"
            assert connect.headers["login"] == "me"
            assert connect.headers["passcode"] == "secret"
            await peer.drain()

        nursery.start_soon(serve)
        async with trio_stomp.wrap_stream(
            client_end, login="me", passcode="secret", host="vh", heartbeat=(0, 0)
        ) as client:
            assert client.version == "1.2"
            assert client.server == "fake/1.0"
            assert client.session == "s-1"


async def test_connect_headers_follow_the_clients_own() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            connect = await peer.accept()
            assert [name for name, _ in connect.headers.items()] == [
                "accept-version",
                "host",
                "heart-beat",
                "client-id",
                "x-tag",
                "x-tag",
            ]
            assert connect.headers["client-id"] == "billing-1"
            assert connect.headers.getall("x-tag") == ["a", "b"]
            await peer.drain()

        nursery.start_soon(serve)
        pairs = [("client-id", "billing-1"), ("x-tag", "a"), ("x-tag", "b")]
        async with trio_stomp.wrap_stream(client_end, heartbeat=(0, 0), headers=pairs):
            pass


@pytest.mark.parametrize("name", sorted(CONNECT_RESERVED_HEADERS))
async def test_reserved_connect_headers_are_refused_before_connecting(name: str) -> None:
    # Port 1 on loopback: a connection attempt would raise ConnectFailed instead.
    with pytest.raises(
        trio_stomp.LocalProtocolError, match=f"header '{name}' is set by the client"
    ):
        async with trio_stomp.connect("stomp://127.0.0.1:1", headers={name: "x"}):
            pytest.fail("the block must not run")
    client_end, _ = trio.testing.memory_stream_pair()
    with pytest.raises(trio_stomp.LocalProtocolError, match="set by the client"):
        async with trio_stomp.wrap_stream(client_end, headers={name: "x"}):
            pytest.fail("the block must not run")
    with pytest.raises(trio.ClosedResourceError):
        await client_end.send_all(b"x")  # closed, as wrap_stream promises


@pytest.mark.parametrize(
    ("headers", "match"),
    [
        ({"client-id": "a\nb"}, "line break"),
        ({"client-id": "a\rb"}, "line break"),  # no escaping in CONNECT, in any version
        ({"a:b": "v"}, "colon"),
        ({"client-id": "a\0b"}, "NUL"),
        ({"": "v"}, "name may not be empty"),
    ],
)
async def test_connect_headers_connect_cannot_carry_are_refused(
    headers: dict[str, str], match: str
) -> None:
    with pytest.raises(trio_stomp.LocalProtocolError, match=match):
        async with trio_stomp.connect("stomp://127.0.0.1:1", headers=headers):
            pytest.fail("the block must not run")


async def test_connect_header_values_must_be_str() -> None:
    with pytest.raises(TypeError, match="must be str"):
        async with trio_stomp.connect("stomp://127.0.0.1:1", headers={"client-id": 7}):  # type: ignore[arg-type]
            pytest.fail("the block must not run")


async def test_error_in_reply_to_connect_raises_connect_failed() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            await peer.receive()
            await peer.send("ERROR", {"message": "Access refused for user 'x'"})
            await server_end.aclose()

        nursery.start_soon(serve)
        with pytest.raises(trio_stomp.ConnectFailed, match="Access refused"):
            async with trio_stomp.wrap_stream(client_end):
                pytest.fail("the block must not run")


async def test_version_outside_accepted_ones_fails() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end, version="1.1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept)
        with pytest.raises(trio_stomp.ConnectFailed, match=r"chose STOMP 1\.1"):
            async with trio_stomp.wrap_stream(client_end, versions=("1.2",)):
                pytest.fail("the block must not run")


async def test_heartbeats_sent_on_schedule_and_silent_peer_detected(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # We offer to send every 1 s and want one every 1 s; the peer can send every
    # 2 s and wants ours every 0.5 s. So we send every max(1, 0.5) = 1 s and
    # expect something every max(2, 1) = 2 s: silence for 2 x 2 s is death,
    # plus one interval of grace while the peer's first beat is still due.
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    start = trio.current_time()
    lost_at = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept, {"heart-beat": "2000,500"})
        with pytest.raises(trio_stomp.ConnectionLost, match="heart-beats"):  # noqa: PT012  # raised as the block exits
            async with trio_stomp.wrap_stream(client_end, heartbeat=(1000, 1000)) as client:
                assert client.heartbeat == (1.0, 2.0)
                nursery.start_soon(peer.drain)
                try:
                    await trio.sleep(100)
                finally:
                    lost_at = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert lost_at == pytest.approx(6.0)
    assert [round(t - start, 6) for t in peer.heartbeats] == [1.0, 2.0, 3.0, 4.0, 5.0]


async def test_heartbeats_in_a_1_0_connected_are_honoured(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # STOMP 1.0 has no heart-beats, but RabbitMQ and ActiveMQ answer a 1.0
    # CONNECT's heart-beat header, then enforce it: the client follows the answer.
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end, version="1.0")
    start = trio.current_time()
    lost_at = None
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            connect = await peer.accept({"heart-beat": "1000,1000"})
            assert connect.headers["heart-beat"] == "1000,1000"
            await peer.drain()

        nursery.start_soon(serve)
        with pytest.raises(trio_stomp.ConnectionLost, match="heart-beats"):  # noqa: PT012  # raised as the block exits
            async with trio_stomp.wrap_stream(
                client_end, heartbeat=(1000, 1000), versions=("1.0",)
            ) as client:
                assert client.version == "1.0"
                assert client.heartbeat == (1.0, 1.0)
                try:
                    await trio.sleep(100)
                finally:
                    lost_at = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert lost_at == pytest.approx(3.0)  # 2 x 1 s, plus 1 s of grace for the first
    assert [round(t - start, 6) for t in peer.heartbeats][:2] == [1.0, 2.0]


async def test_a_1_0_connected_without_heartbeat_means_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end, version="1.0")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept)
        async with trio_stomp.wrap_stream(
            client_end, heartbeat=(1000, 1000), versions=("1.0",)
        ) as client:
            assert client.heartbeat == (0.0, 0.0)
            nursery.start_soon(peer.drain)
            await trio.sleep(20)  # silence on both sides: still connected
            await client.send("/queue/a", b"still here")
        assert peer.heartbeats == []
        nursery.cancel_scope.cancel()


async def test_silence_after_a_first_beat_is_death_after_tolerance(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    start = trio.current_time()
    lost_at = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept, {"heart-beat": "1000,0"})
        with pytest.raises(trio_stomp.ConnectionLost, match="heart-beats"):  # noqa: PT012  # raised as the block exits
            async with trio_stomp.wrap_stream(client_end, heartbeat=(0, 1000)):
                await trio.sleep(1)
                await server_end.send_all(b"\n")
                try:
                    await trio.sleep(100)
                finally:
                    lost_at = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert lost_at == pytest.approx(1.0 + 2.0)


async def test_peer_heartbeats_keep_the_connection_alive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept, {"heart-beat": "1000,0"})

        async def beat() -> None:
            while True:
                await trio.sleep(1.5)  # within 2 x 1 s
                await server_end.send_all(b"\n")

        async with trio_stomp.wrap_stream(client_end, heartbeat=(0, 1000)) as client:
            assert client.heartbeat == (0.0, 1.0)
            nursery.start_soon(beat)
            nursery.start_soon(peer.drain)
            await trio.sleep(20)
        assert peer.heartbeats == []  # we never offered to send any
        nursery.cancel_scope.cancel()


async def test_error_frame_mid_session_surfaces_at_async_with() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept)
        with pytest.raises(trio_stomp.ServerError, match="boom") as info:  # noqa: PT012  # raised as the block exits
            async with trio_stomp.wrap_stream(client_end, heartbeat=(0, 0)) as client:
                await client.send("/queue/a", b"x")
                frame = await peer.receive()
                assert frame.command == "SEND"
                await peer.send("ERROR", {"message": "boom"}, b"details")
                await trio.sleep_forever()
        assert info.value.frame is not None
        nursery.cancel_scope.cancel()


async def test_error_answering_a_receipt_raises_at_the_await() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept)

        async def refuse() -> None:
            frame = await peer.receive()
            await peer.send(
                "ERROR", {"message": "no such queue", "receipt-id": frame.headers["receipt"]}
            )

        with pytest.raises(trio_stomp.ServerError, match="no such queue"):  # noqa: PT012  # raised as the block exits
            async with trio_stomp.wrap_stream(client_end, heartbeat=(0, 0)) as client:
                nursery.start_soon(refuse)
                await client.send("/queue/a", b"x", receipt=True)
        nursery.cancel_scope.cancel()


async def test_bad_user_input_raises_and_sends_nothing() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept)
        async with trio_stomp.wrap_stream(client_end, heartbeat=(0, 0)) as client:
            with pytest.raises(trio_stomp.LocalProtocolError, match="NUL"):
                await client.send("/queue/a", b"x", headers={"k": "a\0b"})
            with pytest.raises(trio_stomp.LocalProtocolError, match="ack mode"):
                client.subscribe("/queue/a", ack="sometimes")
            with pytest.raises(trio_stomp.LocalProtocolError, match="receipt"):
                await client.send("/queue/a", b"x", headers={"receipt": "mine"})
            with pytest.raises(TypeError):
                await client.send("/queue/a", b"x", headers={"n": 1})  # type: ignore[arg-type]
            await client.send("/queue/a", b"ok")
            frame = await peer.receive()
            assert (frame.command, frame.body) == ("SEND", b"ok")
            nursery.start_soon(peer.drain)
        nursery.cancel_scope.cancel()


async def test_peer_closing_mid_session_raises_connection_lost() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept)
        with pytest.raises(trio_stomp.ConnectionLost, match="closed"):  # noqa: PT012  # raised as the block exits
            async with (
                trio_stomp.wrap_stream(client_end, heartbeat=(0, 0)) as client,
                client.subscribe("/queue/a") as sub,
            ):
                await server_end.aclose()
                async for _ in sub:
                    pytest.fail("no message was sent")


async def test_frames_in_the_same_chunk_as_connected_parse_by_its_version() -> None:
    """A broker that writes CONNECTED and the next frame together: the next
    frame is parsed under the version CONNECTED chose, not the default 1.2
    (which would unescape ``\\c`` in a 1.0 header)."""
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end, version="1.0")
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            await peer.receive()
            await server_end.send_all(b"CONNECTED\nversion:1.0\n\n\0ERROR\nmessage:a\\cb\n\n\0")

        nursery.start_soon(serve)
        with pytest.raises(trio_stomp.ServerError) as info:  # noqa: PT012  # raised as the block exits
            async with trio_stomp.wrap_stream(client_end, heartbeat=(0, 0)) as client:
                assert client.version == "1.0"
                await trio.sleep_forever()
        assert info.value.message == "a\\cb"
        nursery.cancel_scope.cancel()


class _ReadsLagWrites(trio.abc.Stream):
    """The client's end, where data that arrives is handed to the reader only
    once a write has broken: what a busy client sees when the broker sends
    ERROR and closes while our frames are still going out."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.write_broke = trio.Event()
        self.lag = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            await self.inner.send_all(data)
        except trio.BrokenResourceError:
            self.write_broke.set()
            raise

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if self.lag:
            await self.write_broke.wait()
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_error_then_close_is_a_server_error_even_when_a_write_breaks_first() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    stream = _ReadsLagWrites(client_end)
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept)
        with pytest.raises(trio_stomp.ServerError, match="Invalid selector") as info:  # noqa: PT012  # raised as the block exits
            async with trio_stomp.wrap_stream(stream, heartbeat=(0, 0)) as client:
                stream.lag = True
                await peer.send("ERROR", {"message": "Invalid selector"}, b"priority >>> 5")
                await server_end.aclose()
                await client.send("/queue/a", b"x")  # its write breaks before the ERROR is read
                await trio.sleep_forever()
        assert stream.write_broke.is_set()
        assert isinstance(info.value.frame, trio_stomp.Frame)
        assert info.value.frame.body == b"priority >>> 5"


async def test_a_write_that_breaks_alone_is_connection_lost_after_a_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The peer stopped reading but says nothing: the reader cannot explain the
    broken write, so after a short wait the write's own failure is the error."""
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept)
        with pytest.raises(trio_stomp.ConnectionLost, match="writing to the broker failed"):  # noqa: PT012  # raised as the block exits
            async with trio_stomp.wrap_stream(client_end, heartbeat=(0, 0)) as client:
                await server_end.receive_stream.aclose()
                start = trio.current_time()
                await client.send("/queue/a", b"x")
                try:
                    await trio.sleep_forever()
                finally:
                    waited = trio.current_time() - start
        assert waited == pytest.approx(WRITE_FAILURE_GRACE)
        nursery.cancel_scope.cancel()


async def test_acks_name_the_message_without_an_ack_header_and_send_nothing() -> None:
    """1.2 acks a MESSAGE by its ``ack`` header: one without it cannot be acked, one by
    one or in a batch, and a batch with such a message sends none of its ACKs."""
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.accept)
        async with (
            trio_stomp.wrap_stream(client_end, heartbeat=(0, 0)) as client,
            client.subscribe("/queue/a", ack="client-individual") as sub,
        ):
            subscribe = await peer.receive()
            sub_id = subscribe.headers["id"]
            for n, ack in ((1, "a:1"), (2, None), (3, "a\\3")):
                headers = {"subscription": sub_id, "destination": "/queue/a", "message-id": f"m{n}"}
                if ack is not None:
                    headers["ack"] = ack
                await peer.send("MESSAGE", headers, b"%d" % n)
            with trio.fail_after(5):
                batch = await sub.batches().__anext__()
                while len(batch) < 3:  # (the three may come in more than one read)
                    more = await sub.batches().__anext__()
                    batch = trio_stomp.MessageBatch.of([*batch, *more])
            with pytest.raises(trio_stomp.LocalProtocolError, match=r"m2.*no 'ack' header"):
                await batch[1].ack()
            with pytest.raises(trio_stomp.LocalProtocolError, match=r"m2.*no 'ack' header"):
                await batch.ack()
            # Nothing went out for the refused ones: the first ACK the peer sees is m3's.
            await trio_stomp.MessageBatch.of([batch[2]]).ack()
            await batch[0].ack()
            acks = [await peer.receive(), await peer.receive()]
            assert [(f.command, f.headers.get("id")) for f in acks] == [
                ("ACK", "a\\3"),
                ("ACK", "a:1"),
            ]
            nursery.start_soon(peer.drain)
        nursery.cancel_scope.cancel()
