"""bridges@.service under a real systemd: a quick run of bench/crash/systemd_unit.py.

A Debian bookworm tree (debootstrapped once, cached in /var/cache/trio-stomp/)
is booted with systemd-nspawn; this checkout is installed in it as the README
says, and the unit is started, fed a credential, watched for its watchdog,
reloaded and stopped with files in flight (the script's docstring lists
every check). Needs root, systemd-nspawn and debootstrap, which scripts/test
installs: without them this test fails, it never skips. About 25 s with the
tree cached; the first run adds its debootstrap (1-2 min).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "bench" / "crash" / "systemd_unit.py"
LIMIT = 900  # s: a cold cache (debootstrap) on a slow mirror included


def test_the_unit_starts_reloads_feeds_its_watchdog_and_stops_without_loss() -> None:
    command = [sys.executable, str(SCRIPT), "--quick", "--files", "200", "--json"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=LIMIT)
    finally:
        if process.poll() is None:
            # SIGTERM, not SIGKILL: the script powers the container off on its way out.
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=120)
    if process.returncode == 2 and "missing" in err:
        pytest.fail(f"cannot boot a systemd here: {err.strip()}")
    assert process.returncode == 0, err[-6000:]
    figures = json.loads(out.splitlines()[-1])
    assert figures["status_at_start"].startswith("2 routes: 2 running"), figures
    assert figures["stop"]["result"] == "success", figures
    assert figures["stop"]["out_at_stop"] >= 1, figures  # stopped with files flowing
    assert figures["lost"] == 0, figures
