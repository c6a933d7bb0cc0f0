"""Kill -9 loses nothing through the nats endpoints, either way (bench/queues_crash.py, small).

``bridges run`` is killed with SIGKILL once at a random moment and started
again, for file -> nats (JetStream drops the re-sent messages by
``Nats-Msg-Id``) and for nats -> file (a durable consumer); the script runs
its own nats-server, which survives the kill. Every message arrives,
duplicates stay within the in-flight bound, the last run stops cleanly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nats_servers import NATS_SERVER, unavailable

SCRIPT = Path(__file__).resolve().parents[4] / "bench" / "queues_crash.py"


def test_sigkill_loses_nothing_through_nats_in_either_direction() -> None:
    if not os.access(NATS_SERVER, os.X_OK):
        unavailable("nats-server is not installed (scripts/brokers up installs it)")
    command = [sys.executable, str(SCRIPT), "--count", "600", "--kills", "1", "--seed", "3"]
    command += ["--only", "nats-sink,nats-source", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    results = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [r.get("scenario") for r in results] == ["nats-sink", "nats-source"], (
        done.stdout + done.stderr
    )
    for result in results:
        assert "error" not in result, result
        assert result["missing"] == 0, result
        assert result["arrived"] == 600, result
        assert result["duplicates"] <= result["bound"], result
        assert result["exit_status"] == 0, result
    assert results[0]["duplicates"] == 0  # JetStream's duplicate window
    assert done.returncode == 0
