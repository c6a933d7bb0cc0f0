"""The kafka endpoints over TLS and SASL, against the project's broker's TLS listeners.

scripts/brokers starts Kafka with a TLS listener that wants a client
certificate and a SASL_SSL one (SCRAM); a test adds its own SCRAM user over
the plaintext listener. A refused connection (a wrong password, no client
certificate, a CA that did not sign the broker's) fails at once in Kafka's
words, not after the endpoint's timeout as "Message timed out".
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import trio
import trustme
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka_servers import TLS, create_topic, require_kafka_listeners

from bridges import Context, Message
from bridges.endpoints.kafka import KafkaSink, KafkaSinkConfig, KafkaSource, KafkaSourceConfig
from bridges.endpoints.kafka._connection import KafkaEndpointError

#: What breaks naive quoting: spaces, quotes, a backslash, `$`, `=`, `,`, `]`, a tab, non-ASCII.
ODD_PASSWORD = 'p@ss "wörd" \\ $HOME;=,]\tend'


def scram_user(servers: str, password: str) -> str:
    """A new SCRAM-SHA-512 user with ``password``, added over the plaintext listener."""
    name = f"bridge-{uuid.uuid4().hex[:8]}"
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsert = UserScramCredentialUpsertion(name, info, password.encode())
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    return name


def sasl(servers: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": servers,
        "security_protocol": "sasl_ssl",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": user,
        "sasl_password": password,
        "ssl_ca_file": str(TLS / "ca.pem"),
    }


def mutual_tls(servers: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": servers,
        "security_protocol": "ssl",
        "ssl_ca_file": str(TLS / "ca.pem"),
        "ssl_cert_file": str(TLS / "client.pem"),
        "ssl_key_file": str(TLS / "client-key.pem"),
    }


async def round_trip(
    topic: str, sink_settings: dict[str, Any], source_settings: dict[str, Any]
) -> None:
    """Three messages written by the sink and read back by the source, ids and bodies intact."""
    sent = [Message(f"m{i}".encode(), {"n": str(i)}, f"id-{i}") for i in range(3)]
    sink = KafkaSink(KafkaSinkConfig(topic=topic, **sink_settings), Context(route="tls"))
    async with sink.open() as writer:
        await writer.write(sent)
    group = f"g-{uuid.uuid4().hex[:8]}"
    config = KafkaSourceConfig(topic=topic, group=group, **source_settings)
    source = KafkaSource(config, Context(route="tls"))
    async with source.open() as receiver:
        got = [(await receiver.receive()).message for _ in sent]
    assert [(m.body, m.id, m.headers["n"]) for m in got] == [
        (m.body, m.id, m.headers["n"]) for m in sent
    ]


@pytest.mark.deadline(60)
async def test_scram_over_tls_with_an_odd_password_carries_records_both_ways() -> None:
    plain, _tls, sasl_ssl = require_kafka_listeners()
    user = await trio.to_thread.run_sync(scram_user, plain, ODD_PASSWORD)
    topic = await trio.to_thread.run_sync(create_topic, plain)
    settings = sasl(sasl_ssl, user, ODD_PASSWORD)
    await round_trip(topic, settings, settings)


@pytest.mark.deadline(60)
async def test_mutual_tls_with_a_client_certificate_carries_records_both_ways() -> None:
    plain, tls, _sasl = require_kafka_listeners()
    topic = await trio.to_thread.run_sync(create_topic, plain)
    # (the broker's certificate names 127.0.0.1: hostname checks stay on)
    await round_trip(topic, mutual_tls(tls), mutual_tls(tls) | {"ssl_check_hostname": True})


async def failed_write(settings: dict[str, Any]) -> tuple[str, float]:
    """The sink's error for one message, and how long it took (its timeout is 20 s)."""
    config = KafkaSinkConfig(topic="never-written", timeout=20.0, **settings)
    started = time.monotonic()
    async with KafkaSink(config, Context(route="tls")).open() as writer:
        with pytest.raises(KafkaEndpointError) as caught:
            await writer.write([Message(b"x", {}, "id-1")])
    return str(caught.value), time.monotonic() - started


@pytest.mark.deadline(60)
async def test_a_wrong_password_fails_the_write_at_once_naming_authentication() -> None:
    plain, _tls, sasl_ssl = require_kafka_listeners()
    user = await trio.to_thread.run_sync(scram_user, plain, ODD_PASSWORD)
    error, took = await failed_write(sasl(sasl_ssl, user, ODD_PASSWORD + "x"))
    assert "the brokers refused the connection" in error, error
    assert "Authentication failed" in error, error
    assert "_AUTHENTICATION" in error, error
    assert ODD_PASSWORD not in error
    assert took < 10, took  # (not the 20 s timeout)


@pytest.mark.deadline(60)
async def test_a_ca_that_did_not_sign_the_broker_fails_the_write_at_once() -> None:
    _plain, tls, _sasl = require_kafka_listeners()
    other = trustme.CA()
    with other.cert_pem.tempfile() as other_ca:
        error, took = await failed_write(mutual_tls(tls) | {"ssl_ca_file": other_ca})
    assert "certificate verify failed" in error, error
    assert "_SSL" in error, error
    assert took < 10, took


@pytest.mark.deadline(60)
async def test_no_client_certificate_fails_at_the_timeout_naming_the_brokers_refusal() -> None:
    # The broker closes the handshake ("bad certificate"): librdkafka calls that a
    # transport error, as it does a broker going down, so the sink waits its timeout.
    _plain, tls, _sasl = require_kafka_listeners()
    settings = mutual_tls(tls)
    del settings["ssl_cert_file"], settings["ssl_key_file"]
    config = KafkaSinkConfig(topic="never-written", timeout=2.0, **settings)
    async with KafkaSink(config, Context(route="tls")).open() as writer:
        with pytest.raises(KafkaEndpointError) as caught:
            await writer.write([Message(b"x", {}, "id-1")])
    error = str(caught.value)
    assert "Message timed out" in error, error
    assert "the last connection error:" in error, error
    assert "bad certificate" in error, error


@pytest.mark.deadline(60)
async def test_a_source_with_a_wrong_password_fails_at_once_naming_authentication() -> None:
    plain, _tls, sasl_ssl = require_kafka_listeners()
    user = await trio.to_thread.run_sync(scram_user, plain, ODD_PASSWORD)
    config = KafkaSourceConfig(topic="never-read", timeout=20.0, **sasl(sasl_ssl, user, "wrong"))
    started = time.monotonic()
    with pytest.raises(KafkaEndpointError, match="the brokers refused the connection") as caught:
        async with KafkaSource(config, Context(route="tls")).open() as receiver:
            await receiver.receive()
    assert "_AUTHENTICATION" in str(caught.value)
    assert time.monotonic() - started < 10
