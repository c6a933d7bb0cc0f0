"""Kill -9 loses no webhook, either way: a small run of ``bench/crash/http_crash.py``.

``bridges run`` is killed with SIGKILL twice at random moments and started
again, once for http -> stomp (a sender that retries until it gets a 2xx)
and once for stomp -> http (a receiver that counts ``webhook-id``s); the
embedded broker runs in its own process and survives. Every webhook that got
a 2xx is in the queue, the receiver gets every message, duplicates stay
within the in-flight bound, and the last run stops cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[4] / "bench" / "crash" / "http_crash.py"


def test_sigkill_loses_no_webhook_in_either_direction() -> None:
    command = [sys.executable, str(SCRIPT), "--count", "200", "--kills", "2", "--seed", "7"]
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120)
    results = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [r.get("direction") for r in results] == ["http -> stomp", "stomp -> http"], (
        done.stdout + done.stderr
    )
    for result in results:
        assert "error" not in result, result
        assert result["lost"] == 0, result
        assert result["unexpected"] == 0, result
        assert result["acknowledged"] >= 200, result
        assert result["duplicates"] <= result["bound"], result
        assert result["exit_status"] == 0, result
    # A receiver honouring Idempotency-Key takes effect once per message.
    assert results[1]["effects"] == results[1]["acknowledged"], results[1]
    assert results[1]["effect_duplicates"] == 0, results[1]
    assert results[1]["keys_not_the_id"] == 0, results[1]
    assert done.returncode == 0
