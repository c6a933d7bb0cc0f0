"""How soon the kafka source starts reading: its topic-id lookup."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import confluent_kafka
import pytest

from bridges import Context
from bridges.endpoints.kafka import KafkaSource, KafkaSourceConfig, _topic_id
from bridges.endpoints.kafka import source as kafka_source
from bridges.endpoints.kafka._refusals import Refusals


class _Uuid:
    def get_most_significant_bits(self) -> int:
        return 1

    def get_least_significant_bits(self) -> int:
        return 2


class _Description:
    topic_id = _Uuid()


class _Admin:
    """An admin client as librdkafka's behaves here: the answer comes on librdkafka's own
    thread 5 ms after the request, and ``poll`` returns only for a callback (none comes)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        threading.Timer(0.005, future.set_result, [_Description()]).start()
        return {name: future for name in topics.topic_names}

    def poll(self, timeout: float) -> int:
        time.sleep(timeout)
        return 0


@pytest.mark.deadline(30)
async def test_the_topic_id_is_known_as_soon_as_the_broker_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka_source, "AdminClient", _Admin)
    # Each wait made 3 s long: a lookup that waits out a whole poll shows as 3 s, not
    # as 100 ms that a loaded machine could mistake for scheduling delay.
    monkeypatch.setattr(_topic_id, "_WAIT", 3.0)
    config = KafkaSourceConfig(topic="t", group="g")
    source = KafkaSource(config, Context(route="t"))
    start = time.monotonic()
    found = await source.topic_id(confluent_kafka.Consumer({"group.id": "g"}), Refusals())
    took = time.monotonic() - start
    assert found == "AAAAAAAAAAEAAAAAAAAAAg"
    # (waiting out a whole 100 ms poll for it was a fifth of the time a 20,000-record
    # run takes to its first record)
    assert took < 1.0
