"""What every bench script needs, throughput (``bench/speed/``) or crash (``bench/crash/``).

The layer under both harnesses (``bench/speed/_common.py``, ``bench/crash/_crash.py``),
which put this folder on ``sys.path`` and re-export what their scripts use:

- :class:`BenchError`: a measurement could not be made, said in one line;
- :func:`free_port`, :func:`wait_port`, :func:`stop_process` and
  :func:`bridges_command`: the processes a bench starts, and their ports;
- :func:`environment_line` and :func:`write_report`: what a run prints first and
  the JSON of its figures (``docs/performance/data``); :func:`bench_command`, the
  command a report records.

Nothing here is timed by itself, and nothing imports trio or bridges at import time
(measurement children start clean).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

HOST: Final = "127.0.0.1"


class BenchError(Exception):
    """A measurement could not be made; the message says why, in one line."""


def bridges_command() -> list[str]:
    """The ``bridges`` console script beside this interpreter, else ``python -m bridges._cli``."""
    script = Path(sys.executable).with_name("bridges")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bridges._cli"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def wait_port(port: int, process: subprocess.Popen[bytes], what: str, limit: float = 10.0) -> None:
    """Until PORT accepts connections (``limit`` s at most); BenchError if PROCESS ends first."""
    deadline = time.monotonic() + limit
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise BenchError(f"{what} did not start") from None
            time.sleep(0.05)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM ``proc`` and wait; SIGKILL it if it is still there after ``timeout`` s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def environment_line() -> str:
    """The build measured (trio-stomp's version and its codec's: compiled or pure
    Python), Python, CPU count and load: what the numbers depend on. A bench prints
    it first. Only the parent process calls it: trio_stomp is imported here."""
    from trio_stomp._version import build, version

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"trio-stomp {version()} ({build()}); Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {load} at start"
    )


def bench_command(script: str, argv: list[str]) -> str:
    """The command that runs ``script`` (a bench's ``__file__``) again with ``argv``, from
    the repository's root, for :func:`write_report` (``--json PATH`` and ``--profile
    DIR`` left out: what a reader reruns is the measurement)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--json", "--profile"):
            skip = True
        elif not arg.startswith(("--json=", "--profile=")):
            kept.append(arg)
    where = os.path.relpath(os.path.abspath(script), Path(__file__).resolve().parent.parent)
    return " ".join([".venv/bin/python", where, *kept])


def write_report(
    path: str | os.PathLike[str],
    *,
    bench: str,
    command: str,
    unit: str,
    rows: list[dict[str, Any]],
) -> None:
    """Write one bench run's figures as JSON, for ``docs/performance`` and its plots.

    ``rows`` are flat records: at least ``series`` (a bar colour: a mode, a
    percentile), ``label`` (a position on the axis: a broker, a route) and
    ``value`` (in ``unit``); anything else (``ratio``, ``cpu_us``) rides along.
    The environment line, the date and the command that reproduces the run are
    recorded beside them so that a figure never travels without its conditions.
    """
    import datetime

    for row in rows:
        missing = {"series", "label", "value"} - row.keys()
        if missing:
            raise BenchError(f"report row {row!r} has no {', '.join(sorted(missing))}")
    report = {
        "bench": bench,
        "command": command,
        "environment": environment_line(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "unit": unit,
        "rows": rows,
    }
    Path(path).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
