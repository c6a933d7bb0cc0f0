"""The family's own AMQP connection against the parts of AMQP 0-9-1 a broker may use on it.

Against a fake broker over ``trio.testing`` memory streams (it parses what
the client writes itself, publishes included): the heartbeat negotiation,
confirms of publishers sharing a channel, ``Connection.Blocked`` (RabbitMQ's
resource alarms), ``Channel.Flow``, the broker closing the connection under
publishers, methods on the wrong channel; and body frames at ``frame_max``,
with Hypothesis over sizes against the real RabbitMQ.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
import trio.testing
from amqp_servers import HOSTPORT, require_amqp, unique
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp.base import Frame

from bridges import Context, Message
from bridges.endpoints.amqp import AmqpSink, AmqpSinkConfig
from bridges.endpoints.amqp._channel import Channel, Nacked, Publish, ServerClosed
from bridges.endpoints.amqp._client import (
    MAX_ANSWERS,
    Client,
    Settings,
    negotiate_heartbeat,
    open_client,
    wrap_stream,
)
from bridges.endpoints.amqp._frames import (
    PROTOCOL_HEADER,
    ProtocolError,
    content_frames,
    method_frame,
)

HEAD = struct.Struct(">BHI")
PROPERTIES = commands.Basic.Properties(message_id="m")


class Broker:
    """The broker's end: parses every frame the client writes (publishes too)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.frames: list[tuple[int, int, Frame | bytes]] = []
        self.tune_ok: commands.Connection.TuneOk | None = None

    async def frame(self) -> tuple[int, int, Frame | bytes]:
        """The next frame: (type, channel, method or payload)."""
        while True:
            if len(self.buffer) >= 7:
                kind, channel, size = HEAD.unpack_from(self.buffer)
                if len(self.buffer) >= size + 8:
                    payload = bytes(self.buffer[7 : 7 + size])
                    assert self.buffer[7 + size] == 0xCE
                    del self.buffer[: size + 8]
                    if kind == 1:
                        method = commands.INDEX_MAPPING[int.from_bytes(payload[:4], "big")]()
                        method.unmarshal(payload[4:])
                        self.frames.append((kind, channel, method))
                        return kind, channel, method
                    self.frames.append((kind, channel, payload))
                    return kind, channel, payload
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.buffer += data

    async def method(self) -> tuple[int, Frame]:
        while True:
            kind, channel, method = await self.frame()
            if kind == 1:
                assert isinstance(method, Frame)
                return channel, method

    async def send(self, channel: int, method: Frame) -> None:
        await self.stream.send_all(method_frame(channel, method))

    async def handshake(self, heartbeat: int = 0) -> None:
        header = b""
        while len(header) < 8:
            header += await self.stream.receive_some(8 - len(header))
        assert header == PROTOCOL_HEADER
        await self.send(0, commands.Connection.Start(mechanisms="PLAIN", locales="en_US"))
        await self.method()
        await self.send(0, commands.Connection.Tune(10, 4096, heartbeat))
        _, tune_ok = await self.method()
        assert isinstance(tune_ok, commands.Connection.TuneOk)
        self.tune_ok = tune_ok
        await self.method()
        await self.send(0, commands.Connection.OpenOk())

    async def answer(self, reply: Frame) -> int:
        """Answer the next method with ``reply``; returns its channel."""
        channel, _ = await self.method()
        await self.send(channel, reply)
        return channel

    async def serve_until_close(self) -> None:
        try:
            while True:
                channel, method = await self.method()
                if isinstance(method, commands.Connection.Close):
                    await self.send(0, commands.Connection.CloseOk())
                    return
                if isinstance(method, commands.Channel.Close):
                    await self.send(channel, commands.Channel.CloseOk())
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def publishes(self) -> int:
        return sum(isinstance(frame, commands.Basic.Publish) for _, _, frame in self.frames)


@asynccontextmanager
async def connected(
    heartbeat: int = 0, ours: int = 0, *, lockstep: bool = False, within: float = 10
) -> AsyncIterator[tuple[Client, Broker]]:
    make = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
    client_end, broker_end = make()
    broker = Broker(broker_end)
    with trio.fail_after(within):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.handshake, heartbeat)
            async with wrap_stream(client_end, Settings(heartbeat=ours)) as client:
                yield client, broker
                nursery.start_soon(broker.serve_until_close)
            nursery.cancel_scope.cancel()


async def confirming_channel(client: Client, broker: Broker) -> Channel:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.answer, commands.Channel.OpenOk())
        channel = await client.channel()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.answer, commands.Confirm.SelectOk())
        await channel.confirm()
    return channel


def one(message_id: str = "m") -> list[Publish]:
    return [Publish("", "q", b"x", commands.Basic.Properties(message_id=message_id))]


# -- heartbeats ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs", "agreed"),
    [(30, 60, 30), (30, 10, 10), (0, 60, 0), (30, 0, 30), (0, 0, 0)],
)
async def test_the_heartbeat_is_the_smaller_offer_and_our_zero_turns_it_off(
    ours: int, theirs: int, agreed: int
) -> None:
    assert negotiate_heartbeat(ours, theirs) == agreed
    async with connected(heartbeat=theirs, ours=ours) as (client, broker):
        assert client.heartbeat == agreed
        assert broker.tune_ok is not None
        assert broker.tune_ok.heartbeat == agreed


def test_frames_of_any_kind_keep_the_connection_alive_not_only_heartbeats() -> None:
    async def run() -> None:
        async with connected(heartbeat=4, ours=4, within=100) as (client, broker):
            channel = await confirming_channel(client, broker)
            for tag in range(1, 11):  # 60 s of acks 6 s apart: never a heartbeat frame
                await trio.sleep(6)
                await broker.send(channel.number, commands.Basic.Ack(tag))
            assert client.error is None
            await trio.sleep(11)  # then silence: two intervals (and a check) pass
            assert isinstance(client.error, ConnectionError)
            assert "sent nothing for 8 s" in str(client.error)

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


# -- publisher confirms -------------------------------------------------------------------------


async def test_publishers_sharing_a_channel_each_get_their_own_confirm() -> None:
    async with connected() as (client, broker):
        channel = await confirming_channel(client, broker)
        outcomes: dict[str, object] = {}

        async def publish(message_id: str) -> None:
            try:
                outcomes[message_id] = await channel.publish(one(message_id))
            except Nacked as exc:
                outcomes[message_id] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(publish, "a")
            nursery.start_soon(publish, "b")
            while broker.publishes() < 2:
                await broker.frame()
            # Tag 1 is the first publish written, tag 2 the second: nack one, ack the other.
            await broker.send(channel.number, commands.Basic.Nack(1))
            await broker.send(channel.number, commands.Basic.Ack(2))
        assert sorted(type(outcome).__name__ for outcome in outcomes.values()) == [
            "Nacked",
            "list",
        ]


async def returned(broker: Broker, channel: int, message_id: str) -> None:
    """A ``Basic.Return`` (NO_ROUTE) of the message ``message_id``."""
    method = commands.Basic.Return(312, "NO_ROUTE", "", "q")
    properties = commands.Basic.Properties(message_id=message_id)
    frames = [method_frame(channel, method), *content_frames(channel, properties, b"x", 4096)]
    await broker.stream.send_all(b"".join(frames))


@pytest.mark.parametrize("multiple", [False, True])
async def test_a_late_return_of_a_timed_out_batch_never_marks_its_retry(multiple: bool) -> None:
    async with connected() as (client, broker):
        channel = await confirming_channel(client, broker)
        with trio.move_on_after(0.1):  # (the batch's timeout: nobody waits for tag 1 now)
            await channel.publish(one("m"))
        async with trio.open_nursery() as nursery:
            outcomes: list[list[str | None]] = []

            async def retry() -> None:
                outcomes.append(await channel.publish(one("m") + one("n")))

            nursery.start_soon(retry)
            while broker.publishes() < 3:
                await broker.frame()
            # Tag 1 (the first try) was unroutable: its return, then its ack, come late.
            await returned(broker, channel.number, "m")
            if multiple:  # (and the same ack settles the retry's first publish too)
                await broker.send(channel.number, commands.Basic.Ack(2, multiple=True))
            else:
                await broker.send(channel.number, commands.Basic.Ack(1))
                await broker.send(channel.number, commands.Basic.Ack(2))
            # The retry's second publish is unroutable: its return comes before its ack.
            await returned(broker, channel.number, "n")
            await broker.send(channel.number, commands.Basic.Ack(3))
        assert outcomes == [[None, "NO_ROUTE"]]


async def test_a_return_belongs_to_the_publish_its_ack_settles_not_an_earlier_one() -> None:
    async with connected() as (client, broker):
        channel = await confirming_channel(client, broker)
        with trio.move_on_after(0.1):
            await channel.publish(one("m"))  # tag 1: routed, its ack still to come
        async with trio.open_nursery() as nursery:
            outcomes: list[list[str | None]] = []

            async def retry() -> None:
                outcomes.append(await channel.publish(one("m")))

            nursery.start_soon(retry)
            while broker.publishes() < 2:
                await broker.frame()
            # Tag 2 (the retry) is unroutable: confirmed at once, tag 1 waits for a disk.
            await returned(broker, channel.number, "m")
            await broker.send(channel.number, commands.Basic.Ack(2))
            await broker.send(channel.number, commands.Basic.Ack(1))
        assert outcomes == [["NO_ROUTE"]]


# -- the broker holding publishes back ----------------------------------------------------------


async def test_a_blocked_connection_writes_no_publish_and_a_cancelled_one_costs_nothing() -> None:
    async with connected() as (client, broker):
        channel = await confirming_channel(client, broker)
        await broker.send(0, commands.Connection.Blocked("low on memory"))
        await trio.testing.wait_all_tasks_blocked()
        assert client.blocked == "low on memory"
        with trio.move_on_after(0.5):
            await channel.publish(one())
        assert client.error is None
        assert channel.error is None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.publish, one())
            await trio.testing.wait_all_tasks_blocked()
            await broker.send(0, commands.Connection.Unblocked())
            await broker.method()
            assert broker.publishes() == 1  # (the cancelled one was never written)
            await broker.send(channel.number, commands.Basic.Ack(1))
        assert client.blocked is None


async def test_channel_flow_off_holds_publishes_until_it_is_on_again() -> None:
    async with connected() as (client, broker):
        channel = await confirming_channel(client, broker)
        await broker.send(channel.number, commands.Channel.Flow(active=False))
        _, flow_ok = await broker.method()
        assert isinstance(flow_ok, commands.Channel.FlowOk)
        assert not flow_ok.active
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.publish, one())
            await trio.testing.wait_all_tasks_blocked()
            await broker.send(channel.number, commands.Channel.Flow(active=True))
            await broker.method()  # FlowOk
            _, publish = await broker.method()
            assert isinstance(publish, commands.Basic.Publish)
            assert broker.publishes() == 1
            await broker.send(channel.number, commands.Basic.Ack(1))


async def test_the_broker_closing_mid_publish_fails_every_publisher_with_its_words() -> None:
    async with connected() as (client, broker):
        channels = [await confirming_channel(client, broker) for _ in range(3)]
        errors: list[BaseException] = []

        async def publish(channel: Channel) -> None:
            with pytest.raises(ServerClosed) as caught:
                await channel.publish(one() + one("n"))
            errors.append(caught.value)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for channel in channels:
                    nursery.start_soon(publish, channel)
                while broker.publishes() < 6:
                    await broker.frame()
                await broker.send(
                    0, commands.Connection.Close(320, "CONNECTION_FORCED - bye", 0, 0)
                )
                _, close_ok = await broker.method()
                assert isinstance(close_ok, commands.Connection.CloseOk)
        assert [str(e) for e in errors] == ["CONNECTION_FORCED - bye (AMQP 320)"] * 3


async def test_a_publish_cancelled_part_way_through_its_write_fails_the_connection() -> None:
    async with connected(lockstep=True) as (client, broker):
        channel = await confirming_channel(client, broker)
        big = [Publish("", "q", bytes(1 << 20), PROPERTIES)]
        with trio.move_on_after(1) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(channel.publish, big)
                broker.buffer += await broker.stream.receive_some(1000)  # (then it stalls)
                await trio.sleep_forever()
        assert scope.cancelled_caught
        # Half a frame is on the wire: nothing may follow it on this connection.
        assert isinstance(client.error, ConnectionError)
        with pytest.raises(ConnectionError, match="cancelled part way"):
            await channel.publish(one())
    # (and leaving did not wait for a CloseOk that cannot come)


# -- a broker that reads nothing -------------------------------------------------------------------


async def stuck_publish(client: Client, broker: Broker, nursery: trio.Nursery) -> Channel:
    """A publish whose write the broker stops reading (lockstep: after 1,000 bytes)."""
    channel = await confirming_channel(client, broker)

    async def publish() -> None:
        try:
            outcomes.append(await channel.publish([Publish("", "q", bytes(1 << 20), PROPERTIES)]))
        except ConnectionError as exc:
            outcomes.append(exc)

    outcomes: list[object] = []
    channel.outcomes = outcomes  # type: ignore[attr-defined]
    nursery.start_soon(publish)
    broker.buffer += await broker.stream.receive_some(1000)
    await trio.testing.wait_all_tasks_blocked()
    return channel


async def test_a_write_stuck_on_a_broker_that_reads_nothing_never_stops_the_reader() -> None:
    async with connected(lockstep=True) as (client, broker):
        other = await confirming_channel(client, broker)
        async with trio.open_nursery() as nursery:
            stuck = await stuck_publish(client, broker, nursery)
            # The broker reads nothing more, but speaks: every method is read and acted on.
            await broker.send(stuck.number, commands.Channel.Flow(active=False))
            await broker.send(other.number, commands.Channel.Close(404, "NOT_FOUND - gone", 0, 0))
            await broker.send(stuck.number, commands.Channel.Flow(active=True))
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(ServerClosed, match="NOT_FOUND - gone"):
                await other.publish(one())
            assert client.error is None
            # It reads again: the publish, then the answers in the order they were owed.
            answers: list[Frame] = []
            while len(answers) < 3:
                _, method = await broker.method()
                if not isinstance(method, commands.Basic.Publish):
                    answers.append(method)
            assert broker.publishes() == 1
            await broker.send(stuck.number, commands.Basic.Ack(1))
        assert [type(frame).__name__ for frame in answers] == ["FlowOk", "CloseOk", "FlowOk"]
        assert stuck.outcomes == [[None]]  # type: ignore[attr-defined]


async def test_the_brokers_close_under_a_stuck_write_fails_its_publisher_at_once() -> None:
    async with connected(lockstep=True) as (client, broker):
        async with trio.open_nursery() as nursery:
            stuck = await stuck_publish(client, broker, nursery)
            await broker.send(0, commands.Connection.Close(320, "CONNECTION_FORCED - bye", 0, 0))
        assert [str(e) for e in stuck.outcomes] == [  # type: ignore[attr-defined]
            "CONNECTION_FORCED - bye (AMQP 320)"
        ]
        assert isinstance(client.error, ServerClosed)
    # (half a frame is on the wire: no CloseOk follows it, the socket just closes)


def test_a_stuck_write_never_stops_the_heartbeat_from_noticing_a_silent_broker() -> None:
    async def run() -> None:
        async with connected(heartbeat=4, ours=4, lockstep=True, within=100) as (client, broker):
            async with trio.open_nursery() as nursery:
                stuck = await stuck_publish(client, broker, nursery)
                await trio.sleep(9)  # (a heartbeat owed, not written: the broker reads nothing)
            assert isinstance(client.error, ConnectionError)
            assert "sent nothing for 8 s" in str(client.error)
            assert stuck.outcomes == [client.error]  # type: ignore[attr-defined]

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


async def test_a_broker_that_keeps_asking_and_reads_nothing_fails_the_connection() -> None:
    async with connected(lockstep=True) as (client, broker):
        async with trio.open_nursery() as nursery:
            stuck = await stuck_publish(client, broker, nursery)
            flow = method_frame(stuck.number, commands.Channel.Flow(active=True))
            await broker.stream.send_all(flow * (MAX_ANSWERS + 1))
        assert isinstance(client.error, ProtocolError)
        assert "MAX_ANSWERS" in str(client.error)
        assert [type(e) for e in stuck.outcomes] == [ProtocolError]  # type: ignore[attr-defined]


# -- a hostile broker -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "method"),
    [
        (0, commands.Channel.OpenOk()),
        (0, commands.Basic.Ack(1)),
        (1, commands.Connection.Close(200, "x", 0, 0)),
        (1, commands.Connection.Blocked("x")),
        (0, commands.Connection.Start()),
    ],
)
async def test_a_method_on_the_wrong_channel_fails_the_connection(
    channel: int, method: Frame
) -> None:
    async with connected() as (client, broker):
        ours = await confirming_channel(client, broker)
        await broker.send(channel, method)
        await trio.testing.wait_all_tasks_blocked()
        assert isinstance(client.error, ProtocolError)
        with pytest.raises(ProtocolError, match="on channel"):
            await ours.publish(one())


# -- body frames at frame_max ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 4087, 4088, 4089, 3 * 4088, 3 * 4088 + 1])
def test_a_body_is_cut_into_frames_of_frame_max_less_eight(size: int) -> None:
    frames = content_frames(1, PROPERTIES, bytes(size), 4096)
    bodies = frames[1:]
    assert all(len(frame) <= 4096 for frame in frames)
    assert [len(frame) - 8 for frame in bodies] == [4088] * (size // 4088) + (
        [size % 4088] if size % 4088 else []
    )


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(size=st.integers(0, 3 * 4088 + 100))
@example(size=0)
@example(size=4088)
@example(size=4089)
def test_any_body_size_round_trips_through_rabbitmq_at_a_small_frame_max(size: int) -> None:
    require_amqp()
    host, port = HOSTPORT.split(":")
    body = bytes(i % 251 for i in range(size))

    async def run() -> None:
        name = unique()
        settings_ = Settings(heartbeat=0, frame_max=4096)
        with trio.fail_after(20):
            async with open_client(host, int(port), settings_, within=10) as client:
                assert client.frame_max == 4096
                channel = await client.channel()
                await channel.rpc(
                    commands.Queue.Declare(queue=name, exclusive=True), commands.Queue.DeclareOk
                )
                await channel.confirm()
                assert await channel.publish([Publish("", name, body, PROPERTIES)]) == [None]
                reader = await client.channel()
                await reader.qos(1)
                await reader.consume(name, 1)
                delivery = await reader.next_delivery()
                assert delivery.body == body
                await reader.settle([("ack", delivery.delivery_tag, False)])

    trio.run(run)


async def test_a_queue_deleted_under_its_consumer_ends_the_consumer_with_the_brokers_word() -> None:
    require_amqp()
    host, port = HOSTPORT.split(":")
    name = unique()
    with trio.fail_after(20):
        async with open_client(host, int(port), Settings(heartbeat=0), within=10) as client:
            admin = await client.channel()
            await admin.rpc(commands.Queue.Declare(queue=name), commands.Queue.DeclareOk)
            await admin.confirm()
            assert await admin.publish([Publish("", name, b"1", PROPERTIES)]) == [None]
            reader = await client.channel()
            await reader.qos(5)
            tag = await reader.consume(name, 5)
            first = await reader.next_delivery()
            await admin.rpc(commands.Queue.Delete(queue=name), commands.Queue.DeleteOk)
            with pytest.raises(ConnectionError, match=f"cancelled the consumer '{tag}'"):
                await reader.next_delivery()
            with pytest.raises(ConnectionError):
                await reader.settle([("ack", first.delivery_tag, False)])
            # (the connection and the other channel go on)
            assert client.error is None
            await admin.rpc(
                commands.Queue.Declare(queue=name, auto_delete=True), commands.Queue.DeclareOk
            )


async def test_a_sink_write_held_by_a_resource_alarm_times_out_saying_so() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def serve(stream: trio.SocketStream) -> None:
        broker = Broker(stream)
        await broker.handshake()
        await broker.answer(commands.Channel.OpenOk())
        await broker.answer(commands.Confirm.SelectOk())
        await broker.send(0, commands.Connection.Blocked("low on memory"))
        await broker.serve_until_close()

    config = AmqpSinkConfig(
        url=f"amqp://guest:guest@127.0.0.1:{port}/%2f", heartbeat=0, confirm_timeout=0.5
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(trio.serve_listeners, serve, listeners))
            async with AmqpSink(config, Context(route="r")).open() as writer:
                await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(TimeoutError, match="blocked publishing: low on memory"):
                    await writer.write([Message(b"1", {}, "a")])
            nursery.cancel_scope.cancel()


HEADER_NAMES = st.sampled_from(["a", "x-trace", "content-type", "amqp-app-id", "k" * 200])
HEADER_VALUES = st.text(max_size=300) | st.text(alphabet="é", max_size=150)


@settings(max_examples=100, deadline=None)
@given(
    headers=st.dictionaries(HEADER_NAMES | st.text(min_size=1, max_size=30), HEADER_VALUES),
    # (at most 255 bytes, the property's limit: a longer id is refused by its own rule)
    message_id=st.text(max_size=255).filter(lambda text: len(text.encode()) <= 255),
    frame_max=st.sampled_from([4096, 4200, 8192]),
)
def test_properties_the_sink_accepts_fit_one_frame_and_small_ones_fit_the_smallest(
    headers: dict[str, str], message_id: str, frame_max: int
) -> None:
    sink = AmqpSink(AmqpSinkConfig(routing_key="q"), Context(route="r"))
    message = Message(b"body", headers, message_id)
    try:
        publish = sink.prepare(message, frame_max)
    except ValueError:
        size = sum(len(k.encode()) + len(v.encode()) for k, v in headers.items())
        assert size + len(message_id.encode()) > 1000  # (only big ones are refused)
        return
    head = content_frames(1, publish.properties, publish.body, frame_max)[0]
    assert len(head) <= frame_max


def test_an_id_over_255_bytes_in_fewer_characters_is_refused_by_name() -> None:
    sink = AmqpSink(AmqpSinkConfig(routing_key="q"), Context(route="r"))
    with pytest.raises(ValueError, match=r"message-id .* is longer than 255 bytes"):
        sink.prepare(Message(b"body", {}, "é" * 200))  # (200 characters, 400 bytes)
