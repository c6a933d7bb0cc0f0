"""scripts/plots: a bench report (bench/_common.write_report) becomes a PNG bar chart,
the same bytes each time; a file that is not a report is refused in one line."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import struct
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
REPORT: dict[str, Any] = {
    "bench": "demo",
    "command": ".venv/bin/python bench/demo.py --count 10",
    "environment": "trio-stomp 0.1.0 (pure Python); Python 3.11.7, 2 CPUs, load average 1.00",
    "date": "2026-11-26",
    "unit": "msg/s",
    "rows": [
        {"series": "raw socket", "label": "RabbitMQ send", "value": 60000, "cpu_us": 0.1},
        {"series": "trio_stomp", "label": "RabbitMQ send", "value": 59000},
        {"series": "raw socket", "label": "ActiveMQ send", "value": 100000},
        {"series": "trio_stomp", "label": "ActiveMQ send", "value": 98000.5},
        {"series": "stomp.py 9", "label": "ActiveMQ send", "value": 90000},
    ],
}


@pytest.fixture(scope="module")
def plots() -> ModuleType:
    """scripts/plots as a module (a script without the .py suffix)."""
    path = str(REPO / "scripts" / "plots")
    loader = importlib.machinery.SourceFileLoader("trio_stomp_plots", path)
    spec = importlib.util.spec_from_loader("trio_stomp_plots", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG, from its IHDR chunk (the first, by the format)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert data[-8:-4] == b"IEND"
    return width, height


def test_a_report_becomes_a_png_of_the_set_size_the_same_each_time(
    plots: ModuleType, tmp_path: Path
) -> None:
    report = tmp_path / "demo.json"
    report.write_text(json.dumps(REPORT))
    assert plots.main(["--out", str(tmp_path / "out"), str(report)]) == 0
    first = (tmp_path / "out" / "demo.png").read_bytes()
    assert png_size(first) == (plots.SIZE[0] * plots.DPI, plots.SIZE[1] * plots.DPI)
    assert plots.main(["--out", str(tmp_path / "again"), str(report)]) == 0
    assert (tmp_path / "again" / "demo.png").read_bytes() == first


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not JSON"),
        ("[]", "a JSON object is expected"),
        (json.dumps({**REPORT, "unit": None}), "'unit' is missing or not text"),
        (json.dumps({**REPORT, "rows": []}), "'rows' is missing or empty"),
        (json.dumps({**REPORT, "rows": [{"series": "a", "label": "b"}]}), "row 1 has no finite"),
        (json.dumps({**REPORT, "rows": [{"series": "a", "value": 1}]}), "no text 'label'"),
        (
            json.dumps({**REPORT, "rows": [{"series": "a", "label": "b", "value": "9"}]}),
            "row 1 has no finite number 'value'",
        ),
    ],
)
def test_a_malformed_report_is_refused_in_one_line_and_draws_nothing(
    plots: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    problem: str,
) -> None:
    report = tmp_path / "bad.json"
    report.write_text(text)
    assert plots.main(["--out", str(tmp_path / "out"), str(report)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith(f"plots: {report}: ")
    assert problem in error
    assert not (tmp_path / "out" / "bad.png").exists()


def test_each_bar_is_labelled_with_its_number_so_a_zero_is_drawn(
    plots: ModuleType, tmp_path: Path
) -> None:
    assert [plots._short(v) for v in (0, 0.953, 12.34, 45_600, 1_234_567)] == [
        "0",
        "0.953",
        "12.3",
        "45.6k",
        "1.23M",
    ]
    # A row whose value is 0 (say "0 lost") is drawn as the label "0" on its
    # bar, not left as empty space beside the other bars.
    from matplotlib.axes import Axes

    drawn: list[str] = []
    original = Axes.bar_label

    def recording(self: Axes, container: Any, labels: Any = None, **kwargs: Any) -> Any:
        drawn.extend(labels or [])
        return original(self, container, labels, **kwargs)

    rows = [{"series": "lost", "label": "run", "value": 0}, *REPORT["rows"]]
    report = tmp_path / "zero.json"
    report.write_text(json.dumps({**REPORT, "rows": rows}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Axes, "bar_label", recording)
        assert plots.main(["--out", str(tmp_path / "out"), str(report)]) == 0
    assert "0" in drawn
    assert len(drawn) == len(rows)
