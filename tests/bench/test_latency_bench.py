"""A short run of bench/speed/latency.py at a low rate: its report has the shape the docs plot.

The client round trip through the embedded broker and the STOMP -> STOMP
bridge (``bridges run`` in its own process), each for half a second at 40 msg/s:
every path and series is reported, and every latency is positive and ordered
(p50 <= p99 <= max).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "speed" / "latency.py"


def test_a_short_latency_run_reports_ordered_positive_percentiles(tmp_path: Path) -> None:
    report = tmp_path / "latency.json"
    command = [
        sys.executable, str(SCRIPT), "--paths", "embedded,stomp-stomp", "--rate", "40",
        "--seconds", "0.5", "--warmup", "0.1", "--rounds", "1", "--json", str(report),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(report.read_text())
    assert (figures["bench"], figures["unit"]) == ("latency", "ms")
    assert figures["command"].startswith(".venv/bin/python bench/speed/latency.py --paths")
    by_label: dict[str, dict[str, float]] = {}
    for row in figures["rows"]:
        assert row["rate"] == 40
        by_label.setdefault(row["label"], {})[row["series"]] = row["value"]
    assert sorted(by_label) == ["STOMP->STOMP 40/s", "embedded 40/s"]
    for label, series in by_label.items():
        assert sorted(series) == ["max", "p50", "p99"], label
        assert 0 < series["p50"] <= series["p99"] <= series["max"], (label, series)
    assert "| bridge STOMP -> STOMP | 40/s |" in done.stdout
