"""Kill -9 loses nothing through the nats endpoints, either way (small bench/crash/queues_crash.py).

``bridges run`` is killed with SIGKILL once at a random moment and started
again, for file -> nats (JetStream drops the re-sent messages by
``Nats-Msg-Id``) and for nats -> file (a durable consumer); the script runs
its own nats-server, which survives the kill. Every message arrives,
duplicates stay within the in-flight bound, the last run stops cleanly
(the assertions: ``family_kit.crash_run``).
"""

from __future__ import annotations

from family_kit import crash_run, require_programs
from nats_servers import NATS_SERVER


def test_sigkill_loses_nothing_through_nats_in_either_direction() -> None:
    require_programs(NATS_SERVER)
    results = crash_run("queues_crash.py", ["nats-sink", "nats-source"], count=600, seed=3)
    assert results[0]["duplicates"] == 0  # JetStream's duplicate window
