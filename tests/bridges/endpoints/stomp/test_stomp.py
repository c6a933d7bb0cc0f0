"""The stomp source and sink against the embedded broker, RabbitMQ and ActiveMQ."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import pytest
import trio

import trio_stomp
from bridges import Context, Message, MessageRejected, Route
from bridges.endpoints.stomp import StompSink, StompSinkConfig, StompSource, StompSourceConfig
from bridges.testing import FakeSink, FakeSource, messages, wait_until

from conftest import REAL_BROKERS, Target, require_real_broker

CTX = Context(route="s")


async def drain(url: str, destination: str, expect: int) -> list[trio_stomp.Message]:
    """Receive (and ack) ``expect`` messages, then check nothing else comes."""
    got: list[trio_stomp.Message] = []
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(destination, ack="client-individual") as sub:
            with trio.move_on_after(10 if len(got) < expect else 0.3):
                async for message in sub:
                    await message.ack()
                    got.append(message)
                    if len(got) == expect:
                        break
            with trio.move_on_after(0.3):
                async for message in sub:
                    got.append(message)
    return got


@pytest.mark.parametrize("confirm", ["receipt", "transaction"])
async def test_the_stomp_sink_sends_batches_with_ids_and_headers(
    target: Target, unique: Callable[[str], str], confirm: Literal["receipt", "transaction"]
) -> None:
    destination = unique("queue")
    config = StompSinkConfig(
        url=target.url, destination=destination, confirm=confirm, headers={"via": "bridge"}
    )
    source = FakeSource(messages(25))
    route = Route("s", source, StompSink(config, CTX), batch_count=10, batch_time=0)
    await route.run()
    assert source.acked == [f"m{i}" for i in range(25)]
    got = await drain(target.url, destination, 25)
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(25)]
    assert [m.headers["bridge-id"] for m in got] == [f"m{i}" for i in range(25)]
    assert got[3].headers["n"] == "3"
    assert got[3].headers["via"] == "bridge"


async def test_the_stomp_source_hands_out_messages_and_acks_them_once_written(
    target: Target, unique: Callable[[str], str]
) -> None:
    destination = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        for i in range(15):
            await client.send(destination, f"b{i}", headers={"k": str(i)})
        await client.send(destination, b"tagged", headers={"bridge-id": "stable-7"}, receipt=True)
    source = StompSource(StompSourceConfig(url=target.url, destination=destination), CTX)
    sink = FakeSink()
    route = Route("s", source, sink, batch_time=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route.run)
        await wait_until(lambda: route.stats.written >= 16)
        route.stop()
    written = [m for batch in sink.batches for m in batch]
    assert [m.body for m in written[:15]] == [f"b{i}".encode() for i in range(15)]
    first = written[0]
    assert first.headers["k"] == "0"
    assert first.headers["destination"] == destination
    assert not {"ack", "subscription", "message-id", "content-length"} & set(first.headers)
    assert first.id  # the broker's message-id when no bridge-id came with it
    assert written[15].id == "stable-7"
    assert "bridge-id" not in written[15].headers
    assert await drain(target.url, destination, 0) == []  # everything was acked


async def test_messages_in_flight_at_shutdown_go_back_to_the_broker(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    destination = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        for i in range(5):
            await client.send(destination, f"b{i}", receipt=i == 4)
    source = StompSource(StompSourceConfig(url=embedded.url, destination=destination), CTX)
    sink = FakeSink()
    sink.gate = trio.Event()  # the sink never finishes
    route = Route("s", source, sink, batch_time=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route.run)
        await wait_until(lambda: route.in_flight >= 5)
        route.abort()
    got = await drain(embedded.url, destination, 5)
    assert sorted(m.body for m in got) == [f"b{i}".encode() for i in range(5)]


async def test_the_stomp_sink_rejects_what_it_cannot_send(embedded: Target) -> None:
    sink = StompSink(StompSinkConfig(url=embedded.url), CTX)
    async with sink.open() as writer:
        with pytest.raises(MessageRejected, match="no destination") as info:
            await writer.write([Message(b"x", {}, "1", "/queue/ok"), Message(b"y", {}, "2")])
        assert info.value.indices == (1,)
        with pytest.raises(MessageRejected, match="NUL"):
            await writer.write([Message(b"x", {"bad": "a\0b"}, "3", "/queue/ok")])


def test_stomp_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="destination: missing"):
        StompSource(StompSourceConfig(), CTX)
    with pytest.raises(ValueError, match=r"url: unsupported URL scheme 'http'"):
        StompSink(StompSinkConfig(url="http://x"), CTX)
    with pytest.raises(ValueError, match=r"headers\.receipt: this header cannot be set here"):
        StompSink(StompSinkConfig(headers={"receipt": "x"}), CTX)
    sink = StompSink(StompSinkConfig(url="stomp://u:secret@127.0.0.1:1", destination="/q/a"), CTX)
    assert "secret" not in sink.describe()


@pytest.mark.parametrize("name", ["accept-version", "host", "login", "passcode", "heart-beat"])
def test_reserved_connect_headers_are_refused(name: str) -> None:
    match = rf"connect_headers\.{name}: set from the endpoint's own settings"
    with pytest.raises(ValueError, match=match):
        StompSource(StompSourceConfig(destination="/q/a", connect_headers={name: "x"}), CTX)
    with pytest.raises(ValueError, match=match):
        StompSink(StompSinkConfig(connect_headers={name: "x"}), CTX)


def test_connect_headers_connect_cannot_carry_are_refused() -> None:
    with pytest.raises(ValueError, match="connect_headers: header 'client-id' has a line break"):
        StompSink(StompSinkConfig(connect_headers={"client-id": "a\nb"}), CTX)


@pytest.mark.parametrize("broker", ["embedded", "activemq"])
async def test_a_durable_stomp_source_gets_what_came_while_it_was_down(
    broker: str, embedded: Target, unique: Callable[[str], str]
) -> None:
    """ActiveMQ (and the embedded broker, which names durable subscriptions the
    same way): ``connect_headers`` gives the connection its ``client-id``, and
    ``subscribe_headers`` names the durable subscription."""
    if broker == "activemq":
        require_real_broker("activemq")
        url = REAL_BROKERS["activemq"]
    else:
        url = embedded.url
    topic = unique("topic")
    name = topic.rsplit("/", 1)[1]
    config = StompSourceConfig(
        url=url,
        destination=topic,
        connect_headers={"client-id": f"{name}-client"},
        subscribe_headers={"activemq.subscriptionName": name},
    )

    def bodies(sink: FakeSink) -> list[bytes]:
        return [m.body for batch in sink.batches for m in batch]

    async with trio_stomp.connect(url) as producer:
        # Run the route until it gets a message: then its subscription exists.
        sink = FakeSink()
        route = Route("s", StompSource(config, CTX), sink, batch_time=0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(route.run)
            while not bodies(sink):
                await producer.send(topic, b"ping", receipt=True)
                await trio.sleep(0.05)
            route.stop()
        await producer.send(topic, b"while down", headers={"persistent": "true"}, receipt=True)
        sink = FakeSink()
        route = Route("s", StompSource(config, CTX), sink, batch_time=0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(route.run)
            await wait_until(lambda: b"while down" in bodies(sink))
            route.stop()
    async with trio_stomp.connect(url, headers=config.connect_headers) as client:
        # Remove the subscription: UNSUBSCRIBE naming it, from its client-id.
        pairs = [("id", "remove"), ("activemq.subscriptionName", name)]
        await client._core.send_frame("UNSUBSCRIBE", pairs, receipt=True)


async def test_stomp_endpoint_fails_over_to_the_next_url(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    """A list of URLs is a failover list: the dead first broker is skipped."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    dead = f"stomp://127.0.0.1:{listener.socket.getsockname()[1]}"
    await listener.aclose()
    dest = unique("queue")
    sink = StompSink(StompSinkConfig(url=(dead, embedded.url), destination=dest), CTX)
    async with sink.open() as writer:
        await writer.write([Message(b"via failover", {}, "id-1")])
    async with trio_stomp.connect(embedded.url) as client, client.subscribe(dest) as sub:
        assert (await anext(aiter(sub))).body == b"via failover"


async def test_the_stomp_source_acks_a_run_of_envelopes_in_one_write(
    embedded: Target, unique: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        for i in range(40):
            await client.send(destination, f"b{i}", receipt=i == 39)
    acked: list[int] = []
    batch_ack = trio_stomp.MessageBatch.ack

    async def counting(batch: trio_stomp.MessageBatch, *, receipt: bool = False) -> None:
        acked.append(len(batch))
        await batch_ack(batch, receipt=receipt)

    monkeypatch.setattr(trio_stomp.MessageBatch, "ack", counting)
    source = StompSource(StompSourceConfig(url=embedded.url, destination=destination), CTX)
    sink = FakeSink()
    route = Route("s", source, sink, batch_count=40, batch_time=0.5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route.run)
        await wait_until(lambda: route.stats.written >= 40)
        route.stop()
    assert sum(acked) == 40
    assert len(acked) < 40  # runs, not one ACK write per message
    assert await drain(embedded.url, destination, 0) == []


async def test_the_senders_receipt_header_is_not_handed_on(
    target: Target, unique: Callable[[str], str]
) -> None:
    """RabbitMQ passes a SEND's ``receipt`` header on in the MESSAGE; it names the
    sender's frame, not the message, so an archive or a resend must not carry it."""
    destination = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        await client.send(destination, b"hi", headers={"order": "7"}, receipt=True)
    source = StompSource(StompSourceConfig(url=target.url, destination=destination), CTX)
    with trio.fail_after(10):
        async with source.open() as receiver:
            envelope = await receiver.receive()
            await envelope.ack()
    assert envelope.message.headers["order"] == "7"
    assert "receipt" not in envelope.message.headers


async def test_each_connection_s_first_send_asks_for_a_receipt_then_each_batch_s_last(
    target: Target, unique: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # RabbitMQ turns a connection's publisher confirms on at its first SEND with a
    # receipt: a SEND before it would be in no confirm (delivery-guarantees.md).
    asked: list[tuple[bytes, bool]] = []
    send = trio_stomp.Client.send

    async def recording(self: trio_stomp.Client, *args: object, **kwargs: object) -> None:
        asked.append((bytes(args[1]), bool(kwargs.get("receipt"))))  # type: ignore[call-overload]
        await send(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(trio_stomp.Client, "send", recording)
    destination = unique("queue")
    config = StompSinkConfig(url=target.url, destination=destination)
    route = Route("s", FakeSource(messages(12)), StompSink(config, CTX), batch_count=5)
    await route.run()
    receipted = [body for body, receipt in asked if receipt]
    assert receipted[0] == b"m0"  # the connection's first SEND
    assert receipted[-1] == b"m11"  # the last batch's last SEND
    assert len(receipted) < 12  # (not every SEND: one a connection, then one a batch)
    assert len(await drain(target.url, destination, 12)) == 12
