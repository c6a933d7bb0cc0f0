"""Kill -9 loses no message, stomp -> mqtt and mqtt -> stomp: a small run of the crash bench.

``bench/crash/mqtt_redis_crash.py`` runs ``bridges run`` against a private
Mosquitto and the embedded broker (each in its own process), kills the
bridge with SIGKILL at a random moment and starts it again; every
message must arrive, duplicates within ``kills * in_flight``, and the last
run must stop cleanly on SIGTERM (the assertions: ``family_kit.crash_run``).
"""

from __future__ import annotations

from family_kit import crash_run
from mqtt_servers import private_mosquitto_available


def test_sigkill_loses_nothing_in_either_direction() -> None:
    private_mosquitto_available()
    crash_run("mqtt_redis_crash.py", ["stomp-to-mqtt", "mqtt-to-stomp"], count=200, seed=7)
