"""One version, pyproject.toml's: ``__version__``, the broker's ``server`` header, ``--version``."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import trio

import trio_stomp
from trio_stomp.broker import open_broker
from trio_stomp.cli import main
from trio_stomp.testing import open_raw_client

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def pyproject_version() -> str:
    version: str = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    return version


def test_the_version_is_pyprojects_as_installed() -> None:
    assert trio_stomp.__version__ == pyproject_version()
    assert trio_stomp.__version__ == importlib.metadata.version("trio-stomp")


def test_importing_the_package_does_not_read_the_metadata() -> None:
    """``importlib.metadata`` costs some 25 ms: ``import trio_stomp`` must not pay it."""
    code = "import sys, trio_stomp; print('importlib.metadata' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def codec_build() -> str:
    """The codec's build as ``--version`` names it, told apart here by the parser's
    file: a compiled module is an extension (``.so``), not its ``.py`` source."""
    source = sys.modules[trio_stomp.frame.FrameParser.__module__].__file__ or ""
    return "pure Python" if source.endswith(".py") else "compiled codec"


def test_trio_stomp_version_prints_it_and_the_codecs_build(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"trio-stomp {pyproject_version()} ({codec_build()})\n"
    assert (codec_build() == "compiled codec") is trio_stomp.frame.compiled


async def test_the_broker_says_its_version_in_connected() -> None:
    with trio.fail_after(5):
        async with open_broker() as broker, open_raw_client(broker, connect=False) as client:
            await client.send("CONNECT", {"accept-version": "1.2"})
            connected = await client.expect("CONNECTED")
    assert connected.headers["server"] == f"trio-stomp/{pyproject_version()}"
