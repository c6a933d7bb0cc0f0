"""scripts/docs names what it lacks in one line, and installs what it installs
without touching trio-stomp's own install (a compiled one stays compiled)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def copy_of_scripts(tmp_path: Path) -> Path:
    """A folder with scripts/docs and pyproject.toml, as a checkout has them."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "docs", tmp_path / "scripts" / "docs")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_without_a_venv_it_says_what_to_run_in_one_line(tmp_path: Path) -> None:
    checkout = copy_of_scripts(tmp_path)
    done = subprocess.run(
        [checkout / "scripts" / "docs"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert done.stderr == "docs: no ./.venv here: run scripts/test (or scripts/quickstart) first\n"


def test_without_pythons_inventory_it_names_the_debian_package(tmp_path: Path) -> None:
    checkout = copy_of_scripts(tmp_path)
    (checkout / ".venv" / "bin").mkdir(parents=True)
    fake = checkout / ".venv" / "bin" / "python"
    fake.write_text("#!/bin/sh\necho 3.99\n")  # a Python whose docs package cannot exist
    fake.chmod(0o755)
    done = subprocess.run(
        [checkout / "scripts" / "docs"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert done.stderr == (
        "docs: Python's docs inventory is missing: "
        "apt-get install python3.99-doc (Debian's package)\n"
    )


def test_what_it_would_install_is_the_extras_requirements_never_the_project() -> None:
    script = (ROOT / "scripts" / "docs").read_text()
    program = script.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=True
    )
    wanted = done.stdout.split()
    assert "sphinx>=8,<10" in wanted
    assert any(name.startswith("pyspark") for name in wanted)  # every family's library
    assert not [name for name in wanted if name.startswith("trio-stomp")]
