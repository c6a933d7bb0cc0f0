"""Crash test for consume-transform-produce: kafka -> kafka in one transaction, SIGKILLed.

    .venv/bin/python bench/crash/kafka_eos_crash.py [--count 10000] [--kills 5]
        [--only kafka-kafka,kafka-kafka-apart] [--restart] [--seed N] [--json]

    kafka-kafka:       topic of ``count`` records (a consumer group)  ->  a transactional
                       kafka sink on the same servers: the group's offsets are committed in
                       each batch's transaction. ``dedup_window = 0``: the sink reads nothing
                       back, so the offsets alone must keep out duplicates: 0 duplicates.
    kafka-kafka-apart: the control: the same, but the sink names the cluster differently
                       (``localhost`` for ``127.0.0.1``), so the source commits its offsets
                       itself after each write: at least once (duplicates within the bound).

The output topic is read with ``read_committed`` (records of an aborted
transaction are not counted). The harness (kills, restarts, figures) is
``bench/crash/_crash.py``; the topics and readers are ``kafka_crash.py``'s.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from _crash import Factory, Scenario, main
from kafka_crash import SERVERS, bodies, create_topic, fill, restart_kafka, stored


def kafka_kafka(work: Path, ids: list[str], apart: bool = False) -> Scenario:
    del work
    source_topic, sink_topic = create_topic(), create_topic()
    fill(source_topic, ids)
    source = (
        f'{{ type = "kafka", bootstrap_servers = "{SERVERS}", topic = "{source_topic}", '
        f'group = "crash-{source_topic}" }}'
    )
    servers = SERVERS.replace("127.0.0.1", "localhost") if apart else SERVERS
    sink = (
        f'{{ type = "kafka", bootstrap_servers = "{servers}", topic = "{sink_topic}", '
        "transactional = true, dedup_window = 0 }"
    )
    return Scenario(
        source,
        sink,
        lambda: stored(sink_topic),
        lambda: bodies(sink_topic),
        lambda: len(bodies(sink_topic)) >= len(ids),
        restart_kafka,
        once=not apart,
    )


SCENARIOS: Final = ["kafka-kafka", "kafka-kafka-apart"]


@contextmanager
def setup(names: list[str]) -> Iterator[dict[str, Factory]]:
    """A factory per scenario (the project's Kafka serves them all)."""
    del names
    yield {
        "kafka-kafka": kafka_kafka,
        "kafka-kafka-apart": lambda work, ids: kafka_kafka(work, ids, apart=True),
    }


if __name__ == "__main__":
    sys.exit(main(__doc__ or "", SCENARIOS, setup))
