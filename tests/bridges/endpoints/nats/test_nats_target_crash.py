"""nats-server killed under the nats sink: nothing JetStream acknowledged is lost.

A small run of ``bench/crash/target_crash.py`` (file inbox -> nats sink, a
JetStream stream with file storage); the nats-server of ``scripts/brokers``
is SIGKILLed once mid-stream and started again. Re-sent messages carry the
same ``Nats-Msg-Id``, so the stream keeps one copy of each.
"""

from __future__ import annotations

from family_kit import target_crash_run
from nats_servers import require_nats


def test_nats_sigkill_loses_nothing_acknowledged() -> None:
    require_nats()
    results = target_crash_run(["nats"], ["nats"])
    assert results[0]["duplicates"] == 0
