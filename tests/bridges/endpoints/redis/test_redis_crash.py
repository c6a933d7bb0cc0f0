"""Kill -9 loses no message, stomp -> redis and redis -> stomp: a small run of the crash bench.

``bench/mqtt_redis_crash.py`` runs ``bridges run`` against a private Redis
and the embedded broker (each in its own process), kills the
bridge with SIGKILL at a random moment and starts it again; every
message must arrive, duplicates within ``kills * in_flight``, and the last
run must stop cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from redis_servers import private_redis_available

SCRIPT = Path(__file__).resolve().parents[4] / "bench" / "mqtt_redis_crash.py"


def test_sigkill_loses_nothing_in_either_direction() -> None:
    private_redis_available()
    command = [sys.executable, str(SCRIPT), "--count", "200", "--kills", "1", "--seed", "7"]
    done = subprocess.run(
        [*command, "--only", "stomp-to-redis,redis-to-stomp", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    results = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [r["scenario"] for r in results] == ["stomp-to-redis", "redis-to-stomp"], (
        done.stdout + done.stderr
    )
    for result in results:
        assert "error" not in result, result
        assert result["missing"] == 0, result
        assert result["arrived"] == 200, result
        assert result["duplicates"] <= result["bound"], result
        assert result["exit_status"] == 0, result
    assert done.returncode == 0
