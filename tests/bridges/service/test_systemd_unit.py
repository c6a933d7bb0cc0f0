"""examples/systemd/bridges@.service is ``bridges unit``'s text, passes ``systemd-analyze verify``
and says what it must. (It runs under a real systemd in test_systemd_booted.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from bridges._cli import main
from bridges._convert import CREDENTIAL_DIRECTORY_ID
from bridges.service._unit import DEFAULT_PROGRAM, UnitError, installed_program, render_unit

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "examples" / "systemd" / "bridges@.service"


def test_the_unit_template_has_what_a_notify_service_needs() -> None:
    lines = set(UNIT.read_text().splitlines())
    for line in (
        "Type=notify",
        "ExecStart=/opt/bridges/bin/bridges run /etc/bridges/%i.toml",
        "ExecReload=/opt/bridges/bin/bridges reload --wait $MAINPID",
        "RuntimeDirectory=bridges/%i",
        "RestartPreventExitStatus=2",
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "StateDirectory=bridges/%i",
        f"LoadCredential={CREDENTIAL_DIRECTORY_ID}:/etc/bridges/credentials/%i",
    ):
        assert line in lines, line
    assert any(line.startswith("WatchdogSec=") for line in lines)


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:  # never skipped: scripts/test installs Debian's systemd
        pytest.fail("systemd-analyze is missing: apt-get install systemd (scripts/test does)")
    # verify checks that ExecStart's program exists: `bridges unit` of this venv names its own.
    bridges = Path(sys.executable).with_name("bridges")
    text = subprocess.run(
        [str(bridges), "unit"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert f"ExecStart={bridges} run /etc/bridges/%i.toml" in text.splitlines()
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


def test_the_example_is_the_unit_for_the_documented_install() -> None:
    assert DEFAULT_PROGRAM == "/opt/bridges/bin/bridges"
    assert UNIT.read_text() == render_unit(DEFAULT_PROGRAM)


def test_bridges_unit_names_the_program_of_its_own_install() -> None:
    program = installed_program()
    assert Path(program).parent == Path(sys.executable).parent  # this venv's bin/
    text = render_unit(program)
    assert text.count(program) == 3  # ExecStartPre's check, ExecStart's run, ExecReload
    assert "/opt/bridges/bin/bridges" not in text.split("[Unit]")[1]


@pytest.mark.parametrize(
    "program", ["bridges", "relative/bin/bridges", "/opt/my bridges/bin/bridges", "/opt/%i/bridges"]
)
def test_a_program_systemd_would_read_otherwise_is_refused(program: str) -> None:
    with pytest.raises(UnitError, match="not an absolute path without spaces"):
        render_unit(program)


def test_bridges_unit_prints_the_unit_or_says_why_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["unit"]) == 0
    printed = capsys.readouterr()
    assert printed.out == render_unit(installed_program())
    # An interpreter whose scripts directory has no bridges (a source tree, python -m).
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    assert main(["unit"]) == 1
    printed = capsys.readouterr()
    assert printed.out == ""
    assert f"bridges: no bridges program in {tmp_path}" in printed.err
