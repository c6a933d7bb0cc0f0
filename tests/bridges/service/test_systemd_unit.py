"""examples/systemd/bridges@.service passes ``systemd-analyze verify`` and says what it must."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "examples" / "systemd" / "bridges@.service"


def test_the_unit_template_has_what_a_notify_service_needs() -> None:
    lines = set(UNIT.read_text().splitlines())
    for line in (
        "Type=notify",
        "ExecStart=/usr/local/bin/bridges run /etc/bridges/%i.toml",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "StateDirectory=bridges/%i",
        "LoadCredential=%i:/etc/bridges/credentials/%i",
    ):
        assert line in lines, line
    assert any(line.startswith("WatchdogSec=") for line in lines)


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:  # never skipped: scripts/test installs Debian's systemd
        pytest.fail("systemd-analyze is missing: apt-get install systemd (scripts/test does)")
    # verify checks that ExecStart's program exists: point it at this venv's bridges.
    bridges = Path(sys.executable).with_name("bridges")
    assert bridges.exists()
    text = UNIT.read_text().replace("/usr/local/bin/bridges", str(bridges))
    instance = tmp_path / "bridges@orders.service"
    instance.write_text(text)
    (tmp_path / "bridges@.service").write_text(text)
    env = {**os.environ, "SYSTEMD_LOG_LEVEL": "notice"}
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(instance)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    complaints = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if "bridges@" in line  # (not the host's own units, which verify also loads)
    ]
    assert done.returncode == 0, done.stdout + done.stderr
    assert complaints == []
