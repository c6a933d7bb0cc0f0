"""The mqtt source and sink against a real Mosquitto: sessions, manual acks, bad input, restarts."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Literal

import paho.mqtt.client as paho
import pytest
import trio
from family_kit import check_says
from hypothesis import given, settings
from hypothesis import strategies as st
from mqtt_servers import (
    HOSTPORT,
    PASSWORD,
    PRIVATE_MAX_PACKET,
    USER,
    private_mosquitto,
    require_mqtt,
)

from bridges import Context, Envelope, InvalidSetting, Message, MessageRejected, Route
from bridges._cli import main as cli_main
from bridges.endpoints.mqtt import (
    MqttError,
    MqttSink,
    MqttSinkConfig,
    MqttSource,
    MqttSourceConfig,
)
from bridges.endpoints.mqtt._connection import check_string, check_topic
from bridges.endpoints.mqtt.source import _MqttReceiver
from bridges.testing import FakeSink, FakeSource, messages, wait_until

CTX = Context(route="m", in_flight=100)


def topic() -> str:
    return f"allowed/trio-stomp-test/{uuid.uuid4().hex[:10]}"


def source_config(url: str, filters: list[str], **settings: object) -> MqttSourceConfig:
    client_id = f"test-{uuid.uuid4().hex[:10]}"
    base: dict[str, object] = {"username": USER, "password": PASSWORD, "client_id": client_id}
    return MqttSourceConfig(url=url, topics=filters, **{**base, **settings})  # type: ignore[arg-type]


def sink_config(url: str, to: str, **settings: object) -> MqttSinkConfig:
    base: dict[str, object] = {"username": USER, "password": PASSWORD}
    return MqttSinkConfig(url=url, topic=to, **{**base, **settings})  # type: ignore[arg-type]


async def take(receiver: object, count: int) -> list[Envelope]:
    receive = receiver.receive  # type: ignore[attr-defined]
    return [await receive() for _ in range(count)]


@pytest.mark.parametrize("protocol", [4, 5])
async def test_a_batch_goes_through_binary_safe_with_headers_on_mqtt5(
    protocol: Literal[4, 5],
) -> None:
    url = require_mqtt()
    base = topic()
    source = MqttSource(
        source_config(url, [base + "/#"], protocol=protocol, id_from_payload=True), CTX
    )
    sink = MqttSink(sink_config(url, base + "/{header:site|none}", protocol=protocol), CTX)
    batch = [
        Message(b"\x00\xff\r\n\x00", {"site": "paris", "note": "caf\u00e9"}, "id-0"),
        Message(b"", {"content-type": "text/plain"}, "id-1"),
        Message(b"x" * 100_000, {"site": "oslo"}, "id-2"),
    ]
    async with source.open() as receiver, sink.open() as writer:
        await writer.write(batch)
        got = await take(receiver, 3)
    by_topic = {e.message.headers["mqtt-topic"]: e.message for e in got}
    assert set(by_topic) == {f"{base}/paris", f"{base}/none", f"{base}/oslo"}
    first = by_topic[f"{base}/paris"]
    assert first.body == b"\x00\xff\r\n\x00"
    assert by_topic[f"{base}/none"].body == b""
    assert by_topic[f"{base}/oslo"].body == b"x" * 100_000
    assert first.headers["mqtt-qos"] == "1"
    assert first.headers["mqtt-retain"] == "false"
    if protocol == 5:
        assert first.id == "id-0"
        assert first.headers["note"] == "caf\u00e9"
        assert by_topic[f"{base}/none"].headers["content-type"] == "text/plain"
    else:  # 3.1.1 carries no headers: the id is derived from topic and payload
        assert first.id.startswith("m/mqtt-")  # ROUTE/mqtt-DIGEST
        assert first.id != by_topic[f"{base}/oslo"].id
        assert "note" not in first.headers


@pytest.mark.parametrize("protocol", [4, 5])
async def test_unacked_messages_come_back_when_the_session_resumes(
    protocol: Literal[4, 5],
) -> None:
    url = require_mqtt()
    base = topic()
    config = source_config(url, [base], protocol=protocol, id_from_payload=True)
    source = MqttSource(config, CTX)
    sink = MqttSink(sink_config(url, base, protocol=protocol), CTX)
    async with source.open():
        pass  # the session (and its subscription) now exists on the broker
    async with sink.open() as writer:
        await writer.write(messages(6))  # published while the source is away
    async with source.open() as receiver:
        got = await take(receiver, 6)
        assert [e.message.body for e in got] == [f"m{i}".encode() for i in range(6)]
        for envelope in got[:4]:
            await envelope.ack()
        await got[4].nack(None)
        first_ids = [e.message.id for e in got]
        await trio.sleep(0.2)  # the PUBACKs reach the broker
    async with source.open() as receiver:
        again = await take(receiver, 2)
        assert [e.message.body for e in again] == [b"m4", b"m5"]
        assert [e.message.id for e in again] == first_ids[4:]  # a stable id
        assert all(first_ids)
        for envelope in again:
            await envelope.ack()
        with trio.move_on_after(0.5):
            extra = await receiver.receive()
            pytest.fail(f"an acked message came again: {extra}")


async def test_a_nack_with_an_error_reconnects_so_the_broker_sends_it_again() -> None:
    url = require_mqtt()
    base = topic()
    source = MqttSource(source_config(url, [base]), CTX)
    sink = MqttSink(sink_config(url, base), CTX)
    async with source.open() as receiver:
        async with sink.open() as writer:
            await writer.write(messages(1))
        envelope = await receiver.receive()
        await envelope.nack(RuntimeError("the sink failed"))
        with pytest.raises(MqttError, match="nacked; reconnecting"):
            await receiver.receive()
    async with source.open() as receiver:
        again = await receiver.receive()
        assert again.message.id == "m0"
        await again.ack()


def test_bad_settings_are_refused_when_the_config_is_built() -> None:
    with pytest.raises(InvalidSetting, match="topics"):
        MqttSource(MqttSourceConfig(topics=[]), CTX)
    with pytest.raises(InvalidSetting, match="'#' must be a whole last level"):
        MqttSource(MqttSourceConfig(topics=["a/#/b"]), CTX)
    with pytest.raises(InvalidSetting, match="2 is not at least once"):
        MqttSource(MqttSourceConfig(topics=["a"], qos=2), CTX)
    with pytest.raises(InvalidSetting, match="wildcard"):
        MqttSink(MqttSinkConfig(topic="a/+/b"), CTX)
    with pytest.raises(InvalidSetting, match="url"):
        MqttSink(MqttSinkConfig(topic="a", url="http://127.0.0.1"), CTX)


def test_qos_0_warns_that_it_is_at_most_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "qos0.toml"
    config.write_text(
        "[routes.r]\n"
        'source = { type = "mqtt", topics = ["a/#"], qos = 0 }\n'
        'sink = { type = "mqtt", topic = "b", qos = 0 }\n'
    )
    assert cli_main(["check", str(config)]) == 0
    err = capsys.readouterr().err
    assert "r: warning: mqtt source with qos = 0 is AT MOST ONCE" in err
    assert "r: warning: mqtt sink with qos = 0 is AT MOST ONCE" in err
    config.write_text(config.read_text().replace("qos = 0", "qos = 1"))
    assert cli_main(["check", str(config)]) == 0
    assert "warning" not in capsys.readouterr().err
    config.write_text(config.read_text().replace("qos = 1 }", "qos = 1, session_expiry = 0 }", 1))
    assert cli_main(["check", str(config)]) == 0
    assert "r: warning: mqtt source without a persistent session" in capsys.readouterr().err


async def test_topics_the_sink_cannot_publish_and_oversized_bodies_are_rejected() -> None:
    url = require_mqtt()
    base = topic()
    sink = MqttSink(sink_config(url, base + "/{header:to|x}", max_bytes=1000), CTX)
    batch = [
        Message(b"ok", {}, "a"),
        Message(b"wild", {"to": "+"}, "b"),
        Message(b"nul", {"to": "a\0b"}, "c"),
        Message(b"z" * 1001, {}, "d"),
    ]
    async with sink.open() as writer:
        with pytest.raises(MessageRejected) as rejected:
            await writer.write(batch)
    assert rejected.value.indices == (1, 2, 3)
    assert "wildcard" in rejected.value.reason


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"mqtt://{USER}:not-the-password@{HOSTPORT}", "refused the connection"),
        ("mqtt://no-such-host.invalid:1883", "cannot resolve 'no-such-host.invalid'"),
        ("mqtt://127.0.0.1:1", "cannot connect"),
    ],
)
async def test_connection_errors_are_one_line_naming_the_broker_not_the_password(
    url: str, expected: str
) -> None:
    require_mqtt()
    sink = MqttSink(MqttSinkConfig(url=url, topic="t", connect_timeout=3), CTX)
    with pytest.raises(MqttError) as caught:
        async with sink.open():
            pass
    text = str(caught.value)
    assert expected in text
    assert "\n" not in text
    assert "not-the-password" not in text


@pytest.mark.deadline(40)
async def test_refusals_by_the_broker(tmp_path: Path) -> None:
    async with private_mosquitto(tmp_path) as broker:
        # (Mosquitto 2.0 grants a SUBSCRIBE its ACL file denies, and filters at
        # delivery instead, so a refused SUBACK cannot be shown with it.)
        sink = MqttSink(sink_config(broker.url, "{header:to}"), CTX)
        source = MqttSource(source_config(broker.url, ["allowed/#"]), CTX)
        async with source.open() as receiver:
            async with sink.open() as writer:
                # Bigger than the broker's Maximum Packet Size (MQTT 5 CONNACK): rejected
                # before it is sent.
                big = [Message(b"b" * PRIVATE_MAX_PACKET, {"to": "allowed/x"}, "big")]
                with pytest.raises(MessageRejected, match="Maximum Packet Size"):
                    await writer.write(big)
                # A PUBLISH the ACL refuses is rejected (its PUBACK says so); the rest
                # of the batch is confirmed.
                batch = [
                    Message(b"yes", {"to": "allowed/x"}, "a"),
                    Message(b"no", {"to": "secret/x"}, "b"),
                ]
                with pytest.raises(MessageRejected) as rejected:
                    await writer.write(batch)
                assert rejected.value.indices == (1,)
                assert "Not authorized" in rejected.value.reason
                assert (await receiver.receive()).message.id == "a"
            # (Mosquitto 2.0 closes the connection after refusing: a new one works.)
            async with sink.open() as writer:
                await writer.write([Message(b"after", {"to": "allowed/x"}, "c")])
            assert (await receiver.receive()).message.id == "c"


@pytest.mark.deadline(40)
async def test_a_broker_restart_mid_stream_loses_nothing(tmp_path: Path) -> None:
    async with private_mosquitto(tmp_path) as broker:
        base = topic()
        total = 3000
        source = FakeSource(messages(total))
        ctx = Context(route="m", in_flight=200)
        fast = {"connect_timeout": 2.0}
        to_mqtt = Route(
            "in",
            source,
            MqttSink(sink_config(broker.url, base, **fast), ctx),
            in_flight=200,
            batch_count=50,
        )
        out = FakeSink()
        from_mqtt = Route(
            "out",
            MqttSource(source_config(broker.url, [base], **fast), ctx),
            out,
            in_flight=200,
            batch_count=50,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(from_mqtt.run)
            await from_mqtt.ready.wait()
            nursery.start_soon(to_mqtt.run)
            await wait_until(lambda: len(out.written) >= total // 3)
            await broker.restart()
            await wait_until(lambda: len(set(out.written)) >= total)
            from_mqtt.stop()
        assert set(out.written) == {m.id for m in messages(total)}
        assert len(source.acked) == total
        assert to_mqtt.stats.restarts + from_mqtt.stats.restarts >= 1


@pytest.mark.deadline(30)
async def test_tls_is_verified_by_default(tmp_path: Path) -> None:
    async with private_mosquitto(tmp_path) as broker:
        to = "allowed/tls"
        trusted = sink_config(broker.tls_url, to, ca_file=str(broker.ca_file))
        source = MqttSource(source_config(broker.tls_url, [to], ca_file=str(broker.ca_file)), CTX)
        async with source.open() as receiver, MqttSink(trusted, CTX).open() as writer:
            await writer.write([Message(b"\x00secret\xff", {}, "t")])
            assert (await receiver.receive()).message.body == b"\x00secret\xff"
        untrusted = MqttSink(sink_config(broker.tls_url, to), CTX)  # the system CAs
        with pytest.raises(MqttError, match=r"TLS failed: .*certificate verify failed"):
            async with untrusted.open():
                pass


def test_check_takes_the_documented_config_and_names_bad_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQTT_PASS", "s3cret-pass")
    config = tmp_path / "mqtt.toml"
    config.write_text(
        "[routes.m]\n"
        'source = { type = "mqtt", url = "mqtt://bridge:${MQTT_PASS}@127.0.0.1:1883", '
        'topics = ["sensors/+/temp"], qos = 1, client_id = "bridge-sensors" }\n'
        'sink = { type = "mqtt", url = "mqtts://127.0.0.1:8883", topic = "alerts/{header:site}", '
        "qos = 1, retain = false }\n"
    )
    check_says(
        capsys,
        config,
        "m: mqtt sensors/+/temp (qos 1) on mqtt://127.0.0.1:1883 -> mqtt alerts/",
        "s3cret-pass",
        ("qos = 1, retain", "protocol = 3, retain"),
        "route 'm': sink.protocol:",
    )


_HEADER_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)


@settings(max_examples=25, deadline=None)
@given(
    body=st.binary(max_size=3000),
    headers=st.dictionaries(_HEADER_TEXT.filter(bool), _HEADER_TEXT, max_size=4),
    message_id=_HEADER_TEXT.filter(bool),
)
def test_any_body_and_headers_go_through_mqtt5_or_are_rejected_whole(
    body: bytes, headers: dict[str, str], message_id: str
) -> None:
    url = require_mqtt()
    skip = {"mqtt-topic", "mqtt-qos", "mqtt-retain", "bridge-id"}
    headers = {k: v for k, v in headers.items() if k not in skip}
    texts = [message_id, *headers, *headers.values()]
    sendable = all(check_string(text, "x") is None for text in texts)
    base = topic()

    async def main() -> None:
        source = MqttSource(source_config(url, [base]), CTX)
        async with source.open() as receiver, MqttSink(sink_config(url, base), CTX).open() as w:
            message = Message(body, headers, message_id)
            if not sendable:
                with pytest.raises(MessageRejected, match="MQTT strings cannot carry"):
                    await w.write([message])
                return
            await w.write([message])
            with trio.fail_after(10):
                got = (await receiver.receive()).message
            assert got.body == body
            assert got.id == message_id
            assert {k: v for k, v in got.headers.items() if k not in skip} == headers

    trio.run(main)


@given(st.text(alphabet="ab/+#", max_size=12))
def test_topic_names_never_hold_wildcards_and_filters_keep_the_level_rules(text: str) -> None:
    as_name = check_topic(text, filter=False)
    assert (as_name is None) == (bool(text) and "+" not in text and "#" not in text)
    as_filter = check_topic(text, filter=True)
    levels = text.split("/")
    well_formed = bool(text) and all(
        level in ("+", "#") or ("+" not in level and "#" not in level) for level in levels
    )
    well_formed = well_formed and "#" not in levels[:-1]
    assert (as_filter is None) == well_formed


async def test_without_bridge_id_the_id_is_empty_unless_chosen_from_the_payload() -> None:
    url = require_mqtt()
    base = topic()
    plain = MqttSource(source_config(url, [base], protocol=4), CTX)
    hashed = MqttSource(source_config(url, [base], protocol=4, id_from_payload=True), CTX)
    sink = MqttSink(sink_config(url, base, protocol=4), CTX)
    async with plain.open() as first, hashed.open() as second:
        async with sink.open() as writer:
            await writer.write([Message(b"21.5", {}, "a"), Message(b"21.5", {}, "b")])
        got = await take(first, 2)
        assert [e.message.id for e in got] == ["", ""]  # 3.1.1 carries no bridge-id
        same = await take(second, 2)
        assert same[0].message.id.startswith("m/mqtt-")
        assert same[0].message.id == same[1].message.id  # identical payloads: one id
        for envelope in [*got, *same]:
            await envelope.ack()


async def test_two_routes_digests_of_one_topic_and_payload_are_two_ids() -> None:
    # Two brokers' (here: two routes') messages with the same topic and payload are two
    # messages once they meet in one queue: the digest goes under the route's name.
    url = require_mqtt()
    base = topic()
    sources = [
        MqttSource(
            source_config(url, [base], protocol=4, id_from_payload=True),
            Context(route=route, in_flight=100),
        )
        for route in ("a", "b")
    ]
    sink = MqttSink(sink_config(url, base, protocol=4), CTX)
    async with sources[0].open() as first, sources[1].open() as second:
        async with sink.open() as writer:
            await writer.write([Message(b"21.5", {}, "x")])
        (one,) = await take(first, 1)
        (two,) = await take(second, 1)
        digest = one.message.id.removeprefix("a/")
        assert digest.startswith("mqtt-")
        assert two.message.id == f"b/{digest}"
        await one.ack()
        await two.ack()


def _received(topic_name: str, payload: bytes) -> paho.MQTTMessage:
    message = paho.MQTTMessage(topic=topic_name.encode())
    message.payload = payload
    return message


def test_id_template_makes_the_id_of_a_message_without_bridge_id() -> None:
    source = MqttSource(
        source_config("mqtt://127.0.0.1:1", ["t/#"], id_template="{header:mqtt-topic}:{body_hash}"),
        CTX,
    )
    receiver = _MqttReceiver("here", 10, v5=False, id_from_payload=False)
    receiver.id_template = source._id_template
    first = receiver._convert(_received("t/a", b"21.5"))
    assert first.id.startswith("t/a:")
    assert receiver._convert(_received("t/a", b"21.5")).id == first.id  # (redelivered: same)
    assert receiver._convert(_received("t/b", b"21.5")).id != first.id
    with pytest.raises(InvalidSetting, match="id_template"):
        MqttSource(source_config("mqtt://127.0.0.1:1", ["t/#"], id_template="{nope}"), CTX)
