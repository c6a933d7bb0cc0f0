"""Kill -9 loses nothing through the amqp endpoints, either way (small bench/crash/queues_crash.py).

``bridges run`` is killed with SIGKILL once at a random moment and started
again, for file -> amqp (publisher confirms) and for amqp -> file (manual
acks), against the RabbitMQ of ``scripts/brokers up`` (fresh queues). Every
message arrives, duplicates stay within the in-flight bound, the last run
stops cleanly (the assertions: ``family_kit.crash_run``).
"""

from __future__ import annotations

from amqp_servers import require_amqp
from family_kit import crash_run


def test_sigkill_loses_nothing_through_amqp_in_either_direction() -> None:
    require_amqp()
    crash_run("queues_crash.py", ["amqp-sink", "amqp-source"], count=600, seed=3)
