"""A small run of bench/crash/quickstart_crash.py: the quickstart killed twice loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.deadline(60)
def test_the_quickstart_killed_twice_loses_nothing() -> None:
    script = ROOT / "bench" / "crash" / "quickstart_crash.py"
    command = [sys.executable, str(script), "--count", "200", "--kills", "2", "--seed", "3"]
    result = subprocess.run(
        [*command, "--json"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(result.stdout.splitlines()[-1])
    assert figures["lost"] == 0, figures
    assert figures["wrong_content"] == 0, figures
    assert figures["final_exit"] == 0, figures
    assert len(figures["at_kills"]) == 2
