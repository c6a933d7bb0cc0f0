"""TLS and SASL settings of the kafka endpoints: librdkafka's names, checks, secrets."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import trustme
from family_kit import bridges_command
from kafka_servers import require_kafka

from bridges import (
    Context,
    InvalidSetting,
    InvalidSettings,
    Message,
    default_registry,
    load_config,
)
from bridges.endpoints.kafka import KafkaSink, KafkaSinkConfig, KafkaSource, KafkaSourceConfig
from bridges.endpoints.kafka._connection import KafkaEndpointError

PASSWORD = "k4fka-s3cret-pw"


def sink(**settings: Any) -> KafkaSink:
    return KafkaSink(KafkaSinkConfig(topic="t", **settings), Context(route="r"))


def source(**settings: Any) -> KafkaSource:
    return KafkaSource(KafkaSourceConfig(topic="t", **settings), Context(route="r"))


def problems(build: Any, **settings: Any) -> dict[str, str]:
    """Each bad key and why, as the endpoint reports them (all at once)."""
    with pytest.raises(InvalidSetting) as caught:
        build(**settings)
    found = caught.value.found if isinstance(caught.value, InvalidSettings) else (caught.value,)
    return {each.key: each.message for each in found}


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    client = ca.issue_cert("bridge.example")
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    client.cert_chain_pems[0].write_to_path(str(folder / "client.pem"))
    client.private_key_pem.write_to_path(str(folder / "client.key"))
    return {
        "ssl_ca_file": str(folder / "ca.pem"),
        "ssl_cert_file": str(folder / "client.pem"),
        "ssl_key_file": str(folder / "client.key"),
    }


def test_plaintext_is_the_default_and_adds_nothing_else() -> None:
    for endpoint in (sink(), source()):
        settings = endpoint.settings()
        assert settings["security.protocol"] == "plaintext"
        assert not [name for name in settings if name.startswith(("ssl.", "sasl."))]


@pytest.mark.parametrize("build", [sink, source])
def test_sasl_over_tls_maps_to_librdkafkas_settings(build: Any, tls_files: dict[str, str]) -> None:
    endpoint = build(
        security_protocol="sasl_ssl",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="bridge",
        sasl_password=PASSWORD,
        ssl_key_password="key-pw",
        **tls_files,
    )
    settings = endpoint.settings()
    assert {name: settings[name] for name in settings if name.startswith(("ssl", "sasl"))} == {
        "ssl.ca.location": tls_files["ssl_ca_file"],
        "ssl.certificate.location": tls_files["ssl_cert_file"],
        "ssl.key.location": tls_files["ssl_key_file"],
        "ssl.key.password": "key-pw",
        "ssl.endpoint.identification.algorithm": "https",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bridge",
        "sasl.password": PASSWORD,
    }
    assert settings["security.protocol"] == "sasl_ssl"
    assert PASSWORD not in endpoint.describe()
    assert PASSWORD not in repr(endpoint._config)


def test_tls_alone_and_hostname_checks_off() -> None:
    settings = sink(security_protocol="ssl", ssl_check_hostname=False).settings()
    assert settings["security.protocol"] == "ssl"
    assert settings["ssl.endpoint.identification.algorithm"] == "none"
    assert "ssl.ca.location" not in settings  # the system's CAs: librdkafka's default
    assert "sasl.mechanism" not in settings


@pytest.mark.parametrize("build", [sink, source])
def test_settings_that_do_not_go_together_are_each_named(build: Any) -> None:
    assert problems(build, ssl_ca_file="ca.pem", sasl_username="u", ssl_check_hostname=False) == {
        "ssl_ca_file": 'needs security_protocol = "ssl" or "sasl_ssl" (it is "plaintext")',
        "sasl_username": (
            'needs security_protocol = "sasl_ssl" or "sasl_plaintext" (it is "plaintext")'
        ),
        "ssl_check_hostname": "means nothing without TLS",
    }
    assert problems(build, security_protocol="sasl_plaintext", sasl_mechanism="PLAIN") == {
        "sasl_username": 'missing: security_protocol = "sasl_plaintext" needs it',
        "sasl_password": 'missing: security_protocol = "sasl_plaintext" needs it',
    }
    assert problems(build, security_protocol="ssl", ssl_cert_file="c.pem") == {
        "ssl_cert_file": "give ssl_cert_file and ssl_key_file together",
    }


def write(tmp_path: Path, sink_table: str) -> Path:
    config = tmp_path / "bridge.toml"
    config.write_text(
        "[routes.k]\n"
        'source = { type = "file", path = "in" }\n'
        f'sink = {{ type = "kafka", topic = "t", {sink_table} }}\n'
    )
    return config


def test_bridges_check_names_each_bad_key_and_never_the_password(tmp_path: Path) -> None:
    (tmp_path / "not-a-ca.pem").write_text("no certificate here\n")
    config = write(
        tmp_path,
        'security_protocol = "sasl_ssl", sasl_mechanism = "SCRAM-SHA-256", '
        f'sasl_password = "{PASSWORD}", ssl_ca_file = "not-a-ca.pem", '
        'ssl_key_file = "missing.key"',
    )
    done = subprocess.run(
        [*bridges_command(), "check", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    where = "route 'k': sink."
    assert f"{where}sasl_username: missing" in output, output
    assert f"{where}ssl_ca_file: " in output, output
    assert "not a PEM CA bundle" in output, output
    assert f"{where}ssl_key_file: cannot read" in output, output
    assert f"{where}ssl_cert_file: give ssl_cert_file and ssl_key_file together" in output
    assert PASSWORD not in output


def test_the_password_may_come_from_a_file_and_is_a_secret(tmp_path: Path) -> None:
    (tmp_path / "kafka-password").write_text(PASSWORD + "\n")
    config = write(
        tmp_path,
        'security_protocol = "sasl_plaintext", sasl_mechanism = "PLAIN", '
        f'sasl_username = "bridge", sasl_password_file = "{tmp_path / "kafka-password"}"',
    )
    loaded = load_config(config, default_registry())
    assert PASSWORD in loaded.secrets  # (redacted by value from everything the process says)
    (route,) = loaded.routes
    assert route.sink.config.sasl_password == PASSWORD
    assert PASSWORD not in repr(route.sink)


@pytest.mark.deadline(60)
async def test_the_settings_reach_librdkafka_tls_to_a_plaintext_broker_fails() -> None:
    # (a TLS client on the plaintext listener cannot get a record in; test_kafka_tls.py
    # uses the TLS listeners)
    servers = require_kafka()
    config = KafkaSinkConfig(
        bootstrap_servers=servers, topic="never-written", security_protocol="ssl", timeout=2.0
    )
    async with KafkaSink(config, Context(route="r")).open() as writer:
        with pytest.raises(KafkaEndpointError, match=r"(?i)timed out|ssl|transport"):
            await writer.write([Message(b"x", {}, "id-1")])
