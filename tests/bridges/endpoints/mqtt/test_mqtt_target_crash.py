"""Mosquitto killed under the mqtt sink: nothing PUBACKed is lost, with the recommended autosave.

A small run of ``bench/crash/target_crash.py`` (file inbox -> mqtt sink, QoS
1, into a persistent session that is offline); the Mosquitto of
``scripts/brokers`` (``autosave_on_changes true``, ``autosave_interval 1``)
is SIGKILLed once mid-stream and started again with its data.
"""

from __future__ import annotations

from family_kit import target_crash_run
from mqtt_servers import require_mqtt


def test_mosquitto_sigkill_loses_nothing_pubacked() -> None:
    require_mqtt()
    target_crash_run(["mqtt"], ["mosquitto"])
