"""Kill -9 loses nothing through the kafka endpoints, either way (small bench/crash/kafka_crash.py).

``bridges run`` is killed with SIGKILL once at a random moment and started
again, for file -> kafka with ``transactional = true`` (no duplicates: the
sink reads its committed tail back when it starts again; the at-least-once
sink is ``kafka-sink`` in the script) and for kafka ->
file (a consumer group; the JSON-lines sink reads its own tail back, so no
duplicates). Every message arrives, the last run stops cleanly (the
assertions: ``family_kit.crash_run``).
"""

from __future__ import annotations

from family_kit import crash_run
from kafka_servers import require_kafka


def test_sigkill_loses_nothing_through_kafka_in_either_direction() -> None:
    require_kafka()
    results = crash_run("kafka_crash.py", ["kafka-once", "kafka-source"], count=400, seed=3)
    assert results[0]["duplicates"] == 0  # the transactional sink's read-back
    assert results[1]["duplicates"] == 0  # the jsonl sink's own tail
