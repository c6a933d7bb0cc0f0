"""The crash tests' runner (``tests/family_kit.py``'s ``crash_run``) when a run stalls.

A crash script that stops making progress used to be killed at the test's
timeout with its output thrown away (``subprocess.run``'s capture), and the
``bridges`` it started went on running. Now the test fails with what the
script said so far, naming the phase it stalled in, and nothing it started
outlives it; nor does a run that fails part way leave its ``bridges`` running.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from family_kit import BENCH, crash_run

STALLS = """
import json, subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])  # (as a crash script starts bridges run)
open({pid!r}, "w").write(str(child.pid))
print(json.dumps({{"scenario": "first", "done": True}}), flush=True)
print("phase: first: done", file=sys.stderr, flush=True)
print("phase: second: run 1 of 2: waiting for 40 held, then SIGKILL", file=sys.stderr, flush=True)
time.sleep(600)
"""


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


def test_a_stalled_crash_run_fails_with_its_output_and_phase_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "stalls.py"
    script.write_text(STALLS.format(pid=str(pid_file)))
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as caught:
        crash_run(str(script), ["first", "second"], count=40, seed=1, timeout=3)
    assert time.monotonic() - started < 30
    said = str(caught.value)
    assert said.startswith(
        "stalls.py stalled: not done within 3 s; the last phase: "
        "second: run 1 of 2: waiting for 40 held, then SIGKILL\n"
    )
    assert '--- stdout so far:\n{"scenario": "first", "done": true}\n' in said
    assert "phase: first: done" in said
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(child), f"the script's child {child} outlived it"


FAILS_MID_RUN = """
import random, subprocess, sys
sys.path.insert(0, {crash!r})
import _crash

children = []

def run():
    children.append(subprocess.Popen(["sleep", "600"]))  # (as bridges run)
    print(children[-1].pid, flush=True)
    return children[-1]

def restart_server():
    raise RuntimeError("the server did not come back")

scenario = _crash.Scenario("s", "s", lambda: 0, None, None, restart_server)
_crash._kill_at_random_moments("orders", scenario, run, [0], {{0}}, random.Random(1))
"""


def test_a_crash_run_that_fails_mid_run_leaves_no_bridge_running(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(FAILS_MID_RUN.format(crash=str(BENCH)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert "the server did not come back" in done.stderr
    assert "phase: orders: run 1 of 2: waiting for 0 held, then SIGKILL" in done.stderr
    child = int(done.stdout.split()[0])
    assert gone(child), f"the bridge {child} outlived its failed run"
