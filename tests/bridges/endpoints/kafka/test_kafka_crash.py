"""Kill -9 loses nothing through the kafka endpoints (small bench/crash/kafka_crash.py).

``bridges run`` is killed with SIGKILL once at a random moment and started
again, for each of the four pairs:

- ``kafka-chain``: file -> kafka (``transactional = true``) -> kafka source ->
  JSON lines, two routes in one bridge: 0 duplicates end to end (the sink
  reads its committed tail back, the JSON-lines sink its own);
- ``kafka-broker``: kafka -> the bridge's own embedded broker (a data dir, its
  duplicate window) -> JSON lines: 0 duplicates;
- ``kafka-stomp``: kafka -> stomp on RabbitMQ, at least once;
- ``webhook-kafka``: webhooks posted until a 2xx -> kafka, at least once.

Every message arrives, the last run stops cleanly (the assertions:
``family_kit.crash_run``). The two halves run side by side (each waits mostly
on start-ups and Kafka's group joins): 57 s in all at load 0.5 to 1.7. Kafka itself is
not killed here (``--restart`` in the script: its start takes 20 s).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from family_kit import crash_run
from kafka_servers import require_kafka


def test_sigkill_loses_nothing_through_the_four_kafka_pairs() -> None:
    require_kafka()
    halves = [["kafka-chain", "kafka-stomp"], ["kafka-broker", "webhook-kafka"]]
    with ThreadPoolExecutor(len(halves)) as pool:
        runs = [pool.submit(crash_run, "kafka_crash.py", half, 300, 3) for half in halves]
        results = {r["scenario"]: r for run in runs for r in run.result()}
    assert results["kafka-chain"]["duplicates"] == 0  # the read-backs, end to end
    assert results["kafka-broker"]["duplicates"] == 0  # the broker's window, the jsonl tail
