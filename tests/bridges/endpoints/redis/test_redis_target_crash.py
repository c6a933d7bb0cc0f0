"""Redis killed under the redis sink and under the redis source: nothing acknowledged is lost.

Small runs of ``bench/crash/target_crash.py``: file inbox -> redis sink
(``XADD``; ``appendonly yes``, ``appendfsync always``), and a stream -> the
redis source (consumer group) -> a file per message; the Redis of
``scripts/brokers`` is SIGKILLed once mid-stream and started again.
"""

from __future__ import annotations

from family_kit import target_crash_run
from redis_servers import require_redis


def test_redis_sigkill_under_the_sink_loses_nothing_acknowledged() -> None:
    require_redis()
    target_crash_run(["redis"], ["redis"])


def test_redis_sigkill_under_the_source_loses_nothing() -> None:
    require_redis()
    results = target_crash_run(["source-redis"], ["redis"])
    assert results[0]["duplicates"] == 0  # the files sink names each file by message id
