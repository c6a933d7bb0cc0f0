"""The examples in examples/ run as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_hello_example_round_trips_on_the_embedded_broker() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "hello.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0].startswith("embedded broker on stomp://127.0.0.1:")
    assert lines[1] == "connected: STOMP 1.2 to trio-stomp/0.1.0"
    received = [line.split("'")[1] for line in lines if line.startswith("received")]
    assert received == ["hello, world", "first of two", "second of two"]
