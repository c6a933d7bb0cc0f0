"""The kafka source as a group member: session timeout, static membership, rebalance protocol."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, KafkaError
from family_kit import BENCH
from hypothesis import given
from hypothesis import strategies as st
from kafka_servers import create_topic, produce, require_kafka

from bridges import ConfigError, Context, InvalidSetting, default_registry, load_config
from bridges.endpoints.kafka import KafkaSource, KafkaSourceConfig
from bridges.endpoints.kafka._connection import KafkaEndpointError
from bridges.endpoints.kafka._group import explain, stops


def source(**settings: Any) -> KafkaSource:
    return KafkaSource(KafkaSourceConfig(topic="t", **settings), Context(route="r"))


def test_a_member_is_dynamic_with_kafkas_session_timeout_by_default() -> None:
    settings = source().settings()
    assert settings["session.timeout.ms"] == 45_000
    assert settings["heartbeat.interval.ms"] == 3_000
    assert "group.instance.id" not in settings  # (the route's name is the same on every host)


@given(st.floats(6.0, 1800.0))
def test_the_session_timeout_reaches_librdkafka_with_what_it_requires(seconds: float) -> None:
    settings = source(session_timeout=seconds, instance_id="host-1").settings()
    session = settings["session.timeout.ms"]
    assert session == round(seconds * 1000)
    assert 0 < settings["heartbeat.interval.ms"] <= session / 3
    assert settings["max.poll.interval.ms"] >= session  # (librdkafka refuses less)
    assert settings["group.instance.id"] == "host-1"


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("session_timeout = 3.0", "session_timeout"),
        ("session_timeout = 3600.0", "session_timeout"),
        ('instance_id = "two words"', "instance_id"),
        ('instance_id = ""', "instance_id"),
    ],
)
def test_the_config_refuses_what_kafka_would(tmp_path: Path, table: str, key: str) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(
        "[routes.k]\n"
        f'source = {{ type = "kafka", topic = "t", {table} }}\n'
        'sink = { type = "file", path = "out" }\n'
    )
    with pytest.raises(ConfigError, match=f"route 'k': source.{key}"):
        load_config(config, default_registry(), base_dir=tmp_path)


def test_an_invalid_instance_id_is_named() -> None:
    with pytest.raises(InvalidSetting, match="instance_id"):
        source(instance_id="a/b")


def restart(source_keys: str) -> dict[str, Any]:
    """bench/crash/kafka_restart.py, one SIGKILL and restart: its figures."""
    command = [sys.executable, str(BENCH / "kafka_restart.py"), "--rounds", "1", "--json"]
    command += ["--source", source_keys]
    done = subprocess.run(command, capture_output=True, text=True, timeout=150, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.deadline(150)
def test_a_restarted_static_member_resumes_without_waiting_for_the_session_timeout() -> None:
    require_kafka()
    # Dynamic, the killed member's partition waits for its 45 s session to expire
    # (bench/crash/kafka_restart.py measures both); static, the new process replaces it.
    result = restart('instance_id = "kafka-group-test", session_timeout = 45.0')
    (seconds,) = result["restarts"]
    assert seconds < 20, result


@pytest.mark.deadline(60)
async def test_two_running_members_with_one_instance_id_stop_the_older_one() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    await produce(servers, topic, [(b"m-0", {})])
    group = f"g-{uuid.uuid4().hex[:8]}"

    def member() -> KafkaSource:
        config = KafkaSourceConfig(
            bootstrap_servers=servers, topic=topic, group=group, instance_id="same"
        )
        return KafkaSource(config, Context(route="r"))

    with pytest.RaisesGroup(
        pytest.RaisesExc(KafkaEndpointError, match="fenced by other consumer"),
        flatten_subgroups=True,
    ):
        async with member().open() as older:
            assert (await older.receive()).message.body == b"m-0"
            async with member().open():
                await trio.sleep_forever()  # (the older one's reader fails: both close)


def test_the_source_pins_eager_rebalancing_on_kafkas_classic_protocol() -> None:
    settings = source().settings()
    # (the commit at revoke and the offsets carried in a transaction assume eager rebalances)
    assert settings["partition.assignment.strategy"] == "range,roundrobin"
    assert settings["group.protocol"] == "classic"


def test_a_refusal_the_same_settings_meet_again_stops_the_source() -> None:
    for code in (KafkaError.INCONSISTENT_GROUP_PROTOCOL, KafkaError.INVALID_SESSION_TIMEOUT):
        assert stops(KafkaError(code))
    assert not stops(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))  # (waited for)
    assert "session_timeout" in explain(KafkaError(KafkaError.INVALID_SESSION_TIMEOUT))


@pytest.mark.deadline(60)
async def test_a_group_that_rebalances_incrementally_refuses_the_source_clearly() -> None:
    servers = require_kafka()
    topic = await trio.to_thread.run_sync(create_topic, servers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    other = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    try:
        other.subscribe([topic])
        while not other.assignment():  # (a member of the group, with its partition)
            await trio.to_thread.run_sync(other.consume, 10, 0.2)
        config = KafkaSourceConfig(bootstrap_servers=servers, topic=topic, group=group)
        with pytest.RaisesGroup(
            pytest.RaisesExc(KafkaEndpointError, match="it needs eager rebalancing"),
            flatten_subgroups=True,
        ):
            async with KafkaSource(config, Context(route="r")).open() as receiver:
                await receiver.receive()
    finally:
        await trio.to_thread.run_sync(other.close)
