"""The crash tests' runner (``tests/family_kit.py``'s ``crash_run``) when a run stalls.

A crash script that stops making progress used to be killed at the test's
timeout with its output thrown away (``subprocess.run``'s capture), and the
``bridges`` it started went on running. Now the test fails with what the
script said so far, naming the phase it stalled in, and nothing it started
outlives it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from family_kit import crash_run

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
