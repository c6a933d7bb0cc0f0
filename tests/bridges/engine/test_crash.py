"""Kill -9 at random moments loses nothing: a small run of ``bench/crash/bridge_crash.py``.

1,000 files go file -> STOMP -> file through ``bridges run``, which is killed
with SIGKILL three times at random points of the transfer and started again; the broker
runs in its own process (``trio-stomp broker`` for the embedded one) so it
survives. Every message must arrive, duplicates stay within the in-flight
bound, no line is half-written, and the last run stops cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import require_real_broker

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "crash" / "bridge_crash.py"


def crash_run(broker: str, seed: int) -> dict[str, Any]:
    command = [
        sys.executable,
        str(SCRIPT),
        "--count",
        "1000",
        "--kills",
        "3",
        "--brokers",
        broker,
        "--seed",
        str(seed),
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(lines[-1])
    assert "error" not in result, result
    return result


@pytest.mark.parametrize("broker", ["embedded", "rabbitmq"])
def test_sigkill_at_random_moments_loses_nothing_and_duplicates_stay_bounded(
    broker: str,
) -> None:
    if broker == "rabbitmq":
        require_real_broker("rabbitmq")
    result = crash_run(broker, seed=20240611)
    figures = {k: v for k, v in result.items() if k != "log_tail"}
    print(f"\ncrash figures ({broker}): {figures}")
    assert result["missing"] == 0, figures
    assert result["unexpected"] == 0, figures
    assert result["arrived"] == result["done_files"] == 1000, figures
    assert result["bad_lines"] == 0, figures
    assert result["duplicates"] <= result["bound"], figures
    assert result["exit_status"] == 0, result["log_tail"]
    assert min(result["arrived_at_kills"]) < 1000, figures  # the kills landed mid-transfer
