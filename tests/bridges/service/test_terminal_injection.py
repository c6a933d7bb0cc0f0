"""Names from peers, files and configs reach a terminal or a log escaped, never raw.

Each printer of ``bridges`` gets a name holding each kind of control
sequence a terminal obeys: OSC 52 (clipboard write), ``ESC [ 2 J`` (clear),
OSC 0 (window title), the 8-bit CSI ``0x9b``, DEL, a CR that rewrites the
line, a newline that forges a log line, a bidi override and U+2028.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import trio_stomp
from bridges import Route
from bridges._cli import main
from bridges.service import Stopped
from bridges.service._logs import configure_logging
from bridges.service._status import StatusLine, broker_line
from bridges.service._terminal import Screen
from bridges.testing import FakeSink, FakeSource, wait_until
from trio_stomp.broker import open_broker
from trio_stomp.util import printable

#: name -> a control sequence a hostile peer puts in a name.
ATTACKS = {
    "osc52": "\x1b]52;c;ZXZpbA==\x07",
    "clear": "\x1b[2J",
    "title": "\x1b]0;owned\x07",
    "c1-csi": "\x9b2J",
    "del": "x\x7fy",
    "cr": "\rforged",
    "newline": "\nforged line",
    "bidi": "\u202eevil\u202c",
    "line-separator": "a\u2028b",
}
#: What none of the printers may write raw (they may write their own ESC [ ... sequences).
RAW = ("\x1b]", "\x1b[2J", "\x07", "\x9b", "\x7f", "\rforged", "\u202e", "\u202c", "\u2028")


def _assert_clean(output: str, attack: str) -> None:
    for raw in RAW:
        assert raw not in output, (raw, output)
    assert printable(attack) in output, output  # shown, escaped


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
async def test_the_status_line_and_stop_summary_escape_destinations(attack: str) -> None:
    destination = f"/queue/{attack}"
    async with open_broker() as broker, trio_stomp.connect(broker.url) as client:
        await client.send(destination, b"held", receipt=True)
        assert any(depth.label == destination for depth in broker.depths())
        _assert_clean(broker_line(broker.depths()), attack)
    _assert_clean(Stopped(lost=((destination, 1),)).summary(), attack)
    _assert_clean(Stopped(kept=((destination, 1),), data_dir="d").summary(), attack)
    # Drawn on a terminal, with a route named so too.
    screen = io.StringIO()
    status = StatusLine(Screen(screen, columns=200))
    route = Route(f"r{attack}", FakeSource(), FakeSink())
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(status.run, [route], None)
            await wait_until(lambda: "received" in screen.getvalue())
            nursery.cancel_scope.cancel()
    _assert_clean(screen.getvalue(), attack)


@pytest.mark.usefixtures("root_logging")
@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_log_lines_escape_a_file_name(attack: str, log_format: str) -> None:
    out = io.StringIO()
    say = configure_logging("info", "json" if log_format == "json" else "text", stream=out)
    name = f"inbox/order{attack}.json"
    logging.getLogger("bridges.file").warning("%s is too large; moved aside", name)
    say(f"route 'r': reading {name}")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines  # nothing forged a line
    if log_format == "json":
        for line in lines:
            for raw in RAW:
                assert raw not in line
        record = json.loads(lines[0])
        assert record["message"] == f"{name} is too large; moved aside"  # decodes back
        assert record["event"] == "%s is too large; moved aside"
    else:
        for line in lines:
            _assert_clean(line, attack)


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_bridges_check_escapes_route_names(
    attack: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = json.dumps(f"r{attack}")  # a TOML basic string, like JSON's, escapes controls
    config = tmp_path / "bridge.toml"
    config.write_text(
        f'[routes.{name}]\nsource = {{ type = "file", path = "in" }}\n'
        'sink = { type = "file", path = "out" }\n'
    )
    assert main(["check", str(config)]) == 0
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 2, err  # "OK, 1 route(s)" and the route
    _assert_clean(err, attack)
