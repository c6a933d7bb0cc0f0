"""The family's own AMQP connection (amqp/_frames.py, _client.py, _channel.py).

Against a fake broker over ``trio.testing`` memory streams: what a hostile
or broken peer can send (bad frames, frames over ``frame_max``, silence
past the heartbeat), and the handshake's login with odd characters; and one
round trip against the real RabbitMQ.
"""

from __future__ import annotations

import ssl
import struct
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing
import trustme
from amqp_servers import HOSTPORT, require_amqp, unique
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands, header

from bridges import Context
from bridges.endpoints.amqp._channel import Publish, ServerClosed
from bridges.endpoints.amqp._client import (
    CLOSE_TIMEOUT,
    MAX_BODY,
    MAX_FRAME,
    Client,
    Settings,
    open_client,
    wrap_stream,
)
from bridges.endpoints.amqp._connection import AmqpConnection, Connector
from bridges.endpoints.amqp._frames import (
    PROTOCOL_HEADER,
    Content,
    FrameReader,
    ProtocolError,
    content_frames,
    method_frame,
)

NO_BEAT = Settings(heartbeat=0)
TUNE = commands.Connection.Tune(channel_max=10, frame_max=4096, heartbeat=0)


class FakeBroker:
    """The broker's end of a memory stream: reads frames, answers the handshake as told."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.reader = FrameReader(1 << 20, 1 << 20)
        self.events: list[tuple[int, object]] = []
        self.header = b""

    async def next(self) -> tuple[int, object]:
        while not self.events:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.events += self.reader.feed(bytes(data))
        return self.events.pop(0)

    async def send(self, channel: int, method: object) -> None:
        await self.stream.send_all(method_frame(channel, method))  # type: ignore[arg-type]

    async def handshake(self, tune: commands.Connection.Tune = TUNE) -> commands.Connection.StartOk:
        while len(self.header) < 8:
            self.header += await self.stream.receive_some(8 - len(self.header))
        assert self.header == PROTOCOL_HEADER
        await self.send(0, commands.Connection.Start(mechanisms="AMQPLAIN PLAIN", locales="en_US"))
        _, start_ok = await self.next()
        assert isinstance(start_ok, commands.Connection.StartOk)
        await self.send(0, tune)
        _, tune_ok = await self.next()
        assert isinstance(tune_ok, commands.Connection.TuneOk)
        _, opening = await self.next()
        assert isinstance(opening, commands.Connection.Open)
        await self.send(0, commands.Connection.OpenOk())
        return start_ok

    async def answer_close(self) -> None:
        """Until the client's ``Connection.Close``, answered with ``CloseOk``."""
        try:
            while not isinstance((await self.next())[1], commands.Connection.Close):
                pass
            await self.send(0, commands.Connection.CloseOk())
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def open_channel(self) -> None:
        number, opening = await self.next()
        assert isinstance(opening, commands.Channel.Open)
        await self.send(number, commands.Channel.OpenOk())


@asynccontextmanager
async def pair(
    config: Settings = NO_BEAT,
) -> AsyncIterator[tuple[Client, FakeBroker]]:
    ours, theirs = trio.testing.memory_stream_pair()
    broker = FakeBroker(theirs)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.handshake)
        async with wrap_stream(ours, config) as client:
            yield client, broker
            nursery.start_soon(broker.answer_close)
        nursery.cancel_scope.cancel()


# -- the frame reader, bytes only ------------------------------------------------------------


def frames_of_a_delivery(body: bytes, frame_max: int = 4096) -> bytes:
    deliver = commands.Basic.Deliver("ctag", 7, False, "ex", "key")
    properties = commands.Basic.Properties(message_id="m1", headers={"k": "v"})
    return method_frame(1, deliver) + b"".join(content_frames(1, properties, body, frame_max))


def test_a_delivery_comes_whole_fed_whole_or_byte_by_byte_or_with_trailing_data() -> None:
    data = frames_of_a_delivery(b"x" * 10000)
    for step in (len(data), 1, 7):
        reader = FrameReader(4096, 1 << 20)
        events = []
        for start in range(0, len(data), step):
            events += reader.feed(data[start : start + step])
        assert len(events) == 1
        channel, content = events[0]
        assert channel == 1
        assert isinstance(content, Content)
        assert content.body == b"x" * 10000
        assert content.properties.message_id == "m1"
    reader = FrameReader(4096, 1 << 20)
    assert len(reader.feed(data + data[:5])) == 1
    assert len(reader.feed(data[5:])) == 1


def test_a_frame_over_frame_max_fails_before_it_is_read() -> None:
    reader = FrameReader(4096, 1 << 20)
    with pytest.raises(ProtocolError, match="over frame_max"):
        reader.feed(struct.pack(">BHI", 3, 1, 4089))  # only the head: no buffering of 4 KB


@given(
    size=st.integers(0, 20000),
    max_body=st.integers(1, 12000),
    step=st.sampled_from([1, 7, 4096, 1 << 20]),
)
@settings(max_examples=60, deadline=None)
def test_a_body_over_max_body_is_dropped_unread_and_the_next_delivery_comes_whole(
    size: int, max_body: int, step: int
) -> None:
    data = frames_of_a_delivery(b"y" * size) + frames_of_a_delivery(b"z" * min(max_body, 5))
    reader = FrameReader(4096, max_body)
    events = []
    for start in range(0, len(data), step):
        events += reader.feed(data[start : start + step])
    assert [channel for channel, _ in events] == [1, 1]
    big, small = (content for _, content in events)
    assert isinstance(big, Content)
    assert isinstance(small, Content)
    assert big.properties.message_id == "m1"
    if size > max_body:
        assert (big.body, big.oversize) == (b"", size)
    else:
        assert (big.body, big.oversize) == (b"y" * size, 0)
    assert (small.body, small.oversize) == (b"z" * min(max_body, 5), 0)


def test_the_connections_limits_are_rabbitmqs_own_and_named_when_passed() -> None:
    assert (MAX_FRAME, MAX_BODY) == (128 * 1024, 128 * 1024 * 1024)
    assert (Settings().frame_max, Settings().max_body) == (MAX_FRAME, MAX_BODY)
    reader = FrameReader(MAX_FRAME, MAX_BODY)
    deliver = method_frame(1, commands.Basic.Deliver("c", 1, False, "", "q"))
    head = header.ContentHeader(0, MAX_BODY + 1, commands.Basic.Properties()).marshal()
    # (over MAX_BODY: no error, and its body frames will be dropped as they come)
    assert reader.feed(deliver + struct.pack(">BHI", 2, 1, len(head)) + head + b"\xce") == []
    with pytest.raises(ProtocolError, match=rf"over frame_max \({MAX_FRAME}, as agreed"):
        FrameReader(MAX_FRAME, MAX_BODY).feed(struct.pack(">BHI", 3, 1, MAX_FRAME - 7))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (struct.pack(">BHI", 1, 0, 4) + b"\x00\x0a\x00\x0a" + b"\x00", "end with 0xCE"),
        (struct.pack(">BHI", 9, 0, 0) + b"\xce", "unknown type"),
        (struct.pack(">BHI", 1, 0, 4) + b"\x7f\x7f\x00\x01" + b"\xce", "unknown AMQP method"),
        (struct.pack(">BHI", 3, 1, 1) + b"x\xce", "out of place"),
        (struct.pack(">BHI", 8, 2, 0) + b"\xce", "heartbeat frame on channel 2"),
    ],
)
def test_bad_frames_are_protocol_errors(data: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        FrameReader(4096, 1 << 20).feed(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_whatever_bytes_arrive_only_protocol_error_escapes(data: bytes) -> None:
    reader = FrameReader(4096, 1 << 20)
    try:
        reader.feed(data)
        reader.feed(frames_of_a_delivery(b"z"))
    except ProtocolError:
        pass


# -- the connection against a fake broker -------------------------------------------------------


async def test_the_login_carries_odd_characters_and_the_broker_frame_max_wins() -> None:
    password = "pä:ss@w/rd\\%20\u2603 \"'"
    ours, theirs = trio.testing.memory_stream_pair()
    broker = FakeBroker(theirs)
    got: list[commands.Connection.StartOk] = []

    async def serve() -> None:
        got.append(await broker.handshake())
        await broker.answer_close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        async with wrap_stream(
            ours, Settings(user="u s", password=password, heartbeat=0)
        ) as client:
            assert client.frame_max == 4096
        nursery.cancel_scope.cancel()
    assert got[0].mechanism == "PLAIN"
    assert got[0].response == f"\0u s\0{password}"


async def test_a_refused_login_says_the_brokers_words() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    broker = FakeBroker(theirs)

    async def refuse() -> None:
        await broker.stream.receive_some(8)
        await broker.send(0, commands.Connection.Start(mechanisms="PLAIN", locales="en_US"))
        await broker.next()
        await broker.send(
            0, commands.Connection.Close(403, "ACCESS_REFUSED - Login was refused", 0, 0)
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(refuse)
        with pytest.raises(ServerClosed, match=r"ACCESS_REFUSED - Login was refused \(AMQP 403\)"):
            async with wrap_stream(ours, Settings(heartbeat=0)):
                pass  # pragma: no cover - never entered


async def test_an_oversize_frame_from_the_broker_fails_every_waiter_at_its_await() -> None:
    with trio.fail_after(5):
        async with pair() as (client, broker):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker.open_channel)
                channel = await client.channel()
            await broker.stream.send_all(struct.pack(">BHI", 1, 1, 5000))
            with pytest.raises(ProtocolError, match="over frame_max"):
                await channel.qos(10)
            with pytest.raises(ProtocolError):
                await channel.publish([])


def test_a_silent_broker_is_a_heartbeat_timeout() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def run() -> None:
        tune = commands.Connection.Tune(channel_max=10, frame_max=4096, heartbeat=10)
        ours, theirs = trio.testing.memory_stream_pair()
        broker = FakeBroker(theirs)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.handshake, tune)
            async with wrap_stream(ours, Settings(heartbeat=10)) as client:
                nursery.start_soon(broker.open_channel)
                channel = await client.channel()
                beats = 0
                with trio.move_on_after(8):  # we beat while quiet (the broker hears us)
                    while True:
                        await broker.stream.receive_some(100)
                        beats += 1
                assert beats >= 1
                started = trio.current_time()
                with pytest.raises(ConnectionError, match="sent nothing for 20 s"):
                    await channel.qos(1)  # (the broker never answers)
                assert 10 <= trio.current_time() - started <= 25
            nursery.cancel_scope.cancel()

    trio.run(run, clock=clock)


async def test_a_channel_closed_by_the_broker_says_why_and_the_connection_goes_on() -> None:
    with trio.fail_after(5):
        async with pair() as (client, broker):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker.open_channel)
                channel = await client.channel()

            async def close_it() -> None:
                number, _ = await broker.next()
                await broker.send(
                    number, commands.Channel.Close(404, "NOT_FOUND - no queue 'q'", 50, 10)
                )
                _, close_ok = await broker.next()
                assert isinstance(close_ok, commands.Channel.CloseOk)
                await broker.open_channel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(close_it)
                with pytest.raises(ServerClosed, match=r"NOT_FOUND - no queue 'q' \(AMQP 404\)"):
                    await channel.rpc(
                        commands.Queue.Declare(queue="q", passive=True), commands.Queue.DeclareOk
                    )
                await client.channel()


async def test_deliveries_beyond_the_prefetch_fail_the_connection_not_stall_the_reader() -> None:
    with trio.fail_after(5):
        async with pair() as (client, broker):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker.open_channel)
                channel = await client.channel()

            async def consume_ok() -> None:
                number, _ = await broker.next()
                await broker.send(number, commands.Basic.ConsumeOk("ctag"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume_ok)
                await channel.consume("q", 2)
            await broker.stream.send_all(frames_of_a_delivery(b"m") * 3)
            await trio.testing.wait_all_tasks_blocked()
            assert (await channel.next_delivery()).body == b"m"
            assert (await channel.next_delivery()).body == b"m"
            with pytest.raises(ProtocolError, match="prefetch of 2"):
                await channel.next_delivery()


# -- against RabbitMQ ----------------------------------------------------------------------


async def test_a_round_trip_on_rabbitmq_with_a_message_over_frame_max() -> None:
    require_amqp()
    host, port = HOSTPORT.split(":")
    name = unique()
    body = bytes(range(256)) * 2000  # 512 KB: many body frames each way
    async with open_client(host, int(port), Settings(heartbeat=5), within=10) as client:
        channel = await client.channel()
        await channel.rpc(
            commands.Queue.Declare(queue=name, auto_delete=True), commands.Queue.DeclareOk
        )
        await channel.confirm()
        properties = commands.Basic.Properties(message_id="big", headers={"x": "1"})
        assert await channel.publish([Publish("", name, body, properties)]) == [None]
        reader = await client.channel()
        await reader.qos(1)
        await reader.consume(name, 1)
        delivery = await reader.next_delivery()
        assert delivery.body == body
        assert delivery.properties.headers == {"x": "1"}
        await reader.settle([("ack", delivery.delivery_tag, False)])


def test_the_family_runs_without_asyncio_libraries() -> None:
    code = (
        "import sys; import bridges.endpoints.amqp; "
        "print(sorted(m for m in ('trio_asyncio', 'aio_pika', 'aiormq') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


async def test_amqps_connects_with_tls_trusting_the_urls_cafile(tmp_path: Path) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    cafile = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    served: list[str] = []

    async def serve(stream: trio.SSLStream[trio.SocketStream]) -> None:
        broker = FakeBroker(stream)
        start_ok = await broker.handshake()
        served.append(start_ok.response or "")
        await broker.open_channel()
        await broker.answer_close()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_ssl_over_tcp, serve, 0, server_context, host="127.0.0.1")
            )
            port = listeners[0].transport_listener.socket.getsockname()[1]
            url = f"amqps://bridge:pw@localhost:{port}/%2f?cafile={cafile}&heartbeat=0"
            connector = Connector(AmqpConnection(url=url), Context())
            async with connector.connect(confirms=False) as channel:
                assert channel.number == 1
            nursery.cancel_scope.cancel()
    assert served == ["\0bridge\0pw"]


def test_leaving_waits_for_close_ok_at_most_close_timeout_even_when_cancelled() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def run() -> None:
        ours, theirs = trio.testing.memory_stream_pair()
        broker = FakeBroker(theirs)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.handshake)
            with trio.CancelScope() as scope:
                async with wrap_stream(ours, NO_BEAT):
                    started = trio.current_time()
                    scope.cancel()  # (the close still goes out; the broker never answers it)
                    await trio.sleep_forever()
            assert trio.current_time() - started == pytest.approx(CLOSE_TIMEOUT)
            _, closing = await broker.next()
            assert isinstance(closing, commands.Connection.Close)
            nursery.cancel_scope.cancel()

    trio.run(run, clock=clock)


def test_a_consumer_that_does_not_read_never_stalls_the_reader() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def run() -> None:
        tune = commands.Connection.Tune(channel_max=10, frame_max=4096, heartbeat=10)
        ours, theirs = trio.testing.memory_stream_pair()
        broker = FakeBroker(theirs)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.handshake, tune)
            async with wrap_stream(ours, Settings(heartbeat=10)) as client:
                nursery.start_soon(broker.open_channel)
                channel = await client.channel()

                async def consume_ok() -> None:
                    number, _ = await broker.next()
                    await broker.send(number, commands.Basic.ConsumeOk("ctag"))

                nursery.start_soon(consume_ok)
                await channel.consume("q", 3)
                await broker.stream.send_all(frames_of_a_delivery(b"m") * 3)  # a full buffer
                for _ in range(30):  # 150 s: the broker beats, we beat; nobody reads deliveries
                    await broker.stream.send_all(struct.pack(">BHI", 8, 0, 0) + b"\xce")
                    await trio.sleep(5)
                    broker.events.clear()
                    while True:
                        with trio.move_on_after(0.01):
                            await broker.stream.receive_some(65536)
                            continue
                        break
                assert client.error is None
                assert (await channel.next_delivery()).body == b"m"
                nursery.start_soon(broker.answer_close)
            nursery.cancel_scope.cancel()

    trio.run(run, clock=clock)
