"""Kill -9 loses nothing through the amqp endpoints, either way (bench/queues_crash.py, small).

``bridges run`` is killed with SIGKILL once at a random moment and started
again, for file -> amqp (publisher confirms) and for amqp -> file (manual
acks), against the RabbitMQ of ``scripts/brokers up`` (fresh queues). Every
message arrives, duplicates stay within the in-flight bound, the last run
stops cleanly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from amqp_servers import require_amqp

SCRIPT = Path(__file__).resolve().parents[4] / "bench" / "queues_crash.py"


def test_sigkill_loses_nothing_through_amqp_in_either_direction() -> None:
    require_amqp()
    command = [sys.executable, str(SCRIPT), "--count", "600", "--kills", "1", "--seed", "3"]
    command += ["--only", "amqp-sink,amqp-source", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    results = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [r.get("scenario") for r in results] == ["amqp-sink", "amqp-source"], (
        done.stdout + done.stderr
    )
    for result in results:
        assert "error" not in result, result
        assert result["missing"] == 0, result
        assert result["arrived"] == 600, result
        assert result["duplicates"] <= result["bound"], result
        assert result["exit_status"] == 0, result
    assert done.returncode == 0
