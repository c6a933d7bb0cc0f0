"""Kill -9 loses no message, stomp -> redis and redis -> stomp: a small run of the crash bench.

``bench/crash/mqtt_redis_crash.py`` runs ``bridges run`` against a private
Redis and the embedded broker (each in its own process), kills the
bridge with SIGKILL at a random moment and starts it again; every
message must arrive, duplicates within ``kills * in_flight``, and the last
run must stop cleanly on SIGTERM (the assertions: ``family_kit.crash_run``).
"""

from __future__ import annotations

from family_kit import crash_run
from redis_servers import private_redis_available


def test_sigkill_loses_nothing_in_either_direction() -> None:
    private_redis_available()
    crash_run("mqtt_redis_crash.py", ["stomp-to-redis", "redis-to-stomp"], count=200, seed=7)
