"""setup.py's choice between the compiled codec and pure Python, without building.

scripts/check-dist builds both for real (a compiled wheel; an sdist with no C
compiler); these pin the choice itself, in a second each.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def setup_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """setup.py as a module (it calls ``setup()`` only when run as a script)."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("TRIO_STOMP_PURE", raising=False)
    spec = importlib.util.spec_from_file_location("trio_stomp_setup", REPO / "setup.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("value", ["1", "yes"])
def test_trio_stomp_pure_forces_a_pure_build(
    setup_module: ModuleType, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TRIO_STOMP_PURE", value)
    assert setup_module.why_pure() == "TRIO_STOMP_PURE is set"


def test_a_compiler_that_fails_makes_a_pure_build_that_says_why(
    setup_module: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CC", "/bin/false")
    monkeypatch.setattr(sys, "argv", ["setup.py", "bdist_wheel"])
    assert setup_module.codec_extensions() == []
    notice = capsys.readouterr().err.strip()
    assert notice.startswith("trio-stomp: building pure Python, without the compiled codec: ")
    assert len(notice.splitlines()) == 1
    # No Python headers, or no mypyc, are said first; with both, the compiler is the reason.
    reason = notice.split(": ", 2)[2]
    assert reason.startswith(
        (
            "no working C compiler (/bin/false cannot compile against Python.h)",
            "no Python headers",
            "mypyc is not installed",
        )
    )


@pytest.mark.parametrize("command", [["egg_info"], ["dist_info"], ["sdist"]])
def test_metadata_and_the_sdist_run_no_mypyc(
    setup_module: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    monkeypatch.setattr(sys, "argv", ["setup.py", *command])
    monkeypatch.setattr(setup_module, "why_pure", lambda: pytest.fail("asked to compile"))
    assert setup_module.codec_extensions() == []
    assert capsys.readouterr().err == ""


def test_an_editable_install_stays_pure_and_says_so(
    setup_module: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Compiled modules in the source tree would shadow the ``.py`` files a developer edits."""
    monkeypatch.setattr(sys, "argv", ["setup.py", "editable_wheel", "--dist-info-dir", "x"])
    monkeypatch.setattr(setup_module, "why_pure", lambda: pytest.fail("asked to compile"))
    assert setup_module.codec_extensions() == []
    notice = capsys.readouterr().err
    assert notice == (
        "trio-stomp: an editable install is pure Python "
        "(scripts/compile-codec compiles the codec in place)\n"
    )


def test_the_compiled_modules_are_the_codecs(setup_module: ModuleType) -> None:
    """setup.py's list names modules that exist, all in the sans-IO codec."""
    assert setup_module.CODEC
    for name in setup_module.CODEC:
        assert (REPO / "trio_stomp" / "frame" / f"{name}.py").is_file(), name


def test_the_compiled_broker_modules_import_nothing_of_the_project(
    setup_module: ModuleType,
) -> None:
    """setup.py's BROKER names broker modules that exist and that stand alone: compiled,
    each imports only the standard library (never a module that may run pure)."""
    import ast

    assert setup_module.BROKER
    for name in setup_module.BROKER:
        path = REPO / "trio_stomp" / "broker" / f"{name}.py"
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, (name, node.module)
                assert node.module in sys.stdlib_module_names | {"__future__"}, node.module
            elif isinstance(node, ast.Import):
                assert all(alias.name in sys.stdlib_module_names for alias in node.names)
