"""``bridges run``'s status line: on a terminal (a real pty), and nowhere else.

Each test runs ``bridges run`` as a process on a small config (files into
the embedded broker's /queue/q and out of it into ./outbox) with five files
waiting, and reads what it printed.
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import signal
import struct
import subprocess
import termios
from pathlib import Path

import pytest
import trio
from family_kit import bridges_command

from bridges import Route
from bridges.service._status import Rates, StatusLine, abbreviated, broker_line, route_line
from bridges.service._terminal import MAX_PENDING, Screen
from bridges.testing import FakeSink, FakeSource, wait_until
from trio_stomp.broker import DestinationDepth

CONFIG = """
[broker]
embedded = true
listen = "127.0.0.1:0"

[routes.in]
source = { type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }
sink = { type = "stomp", url = "embedded", destination = "/queue/q" }

[routes.out]
source = { type = "stomp", url = "embedded", destination = "/queue/q" }
sink = { type = "file", path = "outbox", format = "files", name = "{header:file-name}" }
"""
FILES = 5
SHOW_CURSOR = "\x1b[?25h"
#: Terminal control sequences (the status line's cursor moves and erasures): each ends a line.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _pty() -> tuple[int, int]:
    """A pty of 160 x 40 (a pty starts at 0 x 0, taken for 80 columns)."""
    main, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    return main, child


async def _run(
    tmp_path: Path, *, stdout_tty: bool, args: tuple[str, ...] = (), until: str = "running 2"
) -> tuple[int, str]:
    """Run the bridge until ``until`` appears in its output and every file is in
    the outbox, plus a bit (the status line's refresh), then Ctrl-C; its exit status
    and everything it wrote (stdout and stderr, both on the pty, or stderr on it
    and stdout on a pipe), control sequences removed."""
    (tmp_path / "bridge.toml").write_text(CONFIG)
    (tmp_path / "inbox").mkdir()
    for i in range(FILES):
        (tmp_path / "inbox" / f"f{i}").write_text(str(i))
    main, child = _pty()
    out = child if stdout_tty else subprocess.PIPE
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "40"}
    process = await trio.lowlevel.open_process(
        [*bridges_command(), "run", *args, "bridge.toml"],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=out, stderr=child, env=env,
    )  # fmt: skip
    os.close(child)
    seen = bytearray()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_pty, main, seen)
            if process.stdout is not None:
                nursery.start_soon(_read_pipe, process.stdout, seen)

            def text() -> str:
                return ANSI.sub("\n", seen.decode(errors="replace").replace("\r", ""))

            outbox = tmp_path / "outbox"
            with trio.fail_after(20):
                while until not in text() or len(list(outbox.glob("f*"))) < FILES:  # noqa: ASYNC110
                    await trio.sleep(0.05)
                await trio.sleep(1.5)  # a refresh after the last file
            process.send_signal(signal.SIGINT)
            with trio.fail_after(15):
                status = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(main)
    return status, text()


async def _read_pty(fd: int, seen: bytearray) -> None:
    stream = trio.lowlevel.FdStream(os.dup(fd))
    async with stream:
        while True:
            try:
                chunk = await stream.receive_some(65536)
            except (OSError, trio.BrokenResourceError):  # EIO: every writer closed the pty
                return
            if not chunk:
                return
            seen += chunk


def _pause(main: int, child: int) -> None:
    """Type Ctrl-S and return once the terminal has stopped its output.

    The kernel takes what is typed into a pty later, in a worker of its own: a
    write to the terminal right after the Ctrl-S may still go through (it did
    under load). A line typed after it is read back on the other side once it
    was taken, and what is typed is taken in order.
    """
    os.write(main, b"\x13paused\n")
    typed = b""
    while not typed.endswith(b"paused\n"):
        typed += os.read(child, 64)


async def _read_pipe(pipe: trio.abc.ReceiveStream, seen: bytearray) -> None:
    while chunk := await pipe.receive_some(65536):
        seen += chunk


@pytest.mark.deadline(40)
async def test_on_a_terminal_the_status_line_shows_each_routes_counts(tmp_path: Path) -> None:
    status, text = await _run(tmp_path, stdout_tty=True, until="written 5")
    assert status == 0, text
    route_in = re.search(
        r"in \s+running\s+received 5\s+written 5\s+[\d.]+ msg/s\s+in flight 0", text
    )
    assert route_in, text
    assert re.search(r"out\s+running\s+received 5\s+written 5 ", text), text
    assert "retries 0  dead-lettered 0" in text
    assert "embedded broker: /queue/q 0" in text
    # Logs print above it, whole; the stop summary is the last line.
    assert "bridges: running 2 route(s)" in text.splitlines()
    assert text.strip().splitlines()[-1] == "bridges: stopped", text


@pytest.mark.deadline(40)
@pytest.mark.parametrize(("stdout_tty", "args"), [(False, ()), (True, ("--quiet",))])
async def test_no_status_line_off_a_terminal_or_when_quiet(
    tmp_path: Path, stdout_tty: bool, args: tuple[str, ...]
) -> None:
    status, text = await _run(tmp_path, stdout_tty=stdout_tty, args=args)
    assert status == 0, text
    assert "bridges: running 2 route(s)" in text  # the logs are there
    assert "msg/s" not in text
    assert "embedded broker:" not in text
    assert text.strip().splitlines()[-1] == "bridges: stopped", text


# -- the lines themselves ---------------------------------------------------------------------


async def test_route_line_broker_line_and_the_rate() -> None:
    route = Route("orders", FakeSource(), FakeSink())
    route.stats.received, route.stats.written, route.stats.retries = 1204, 1200, 2
    rates = Rates()
    assert rates.update([route], 10.0) == [0.0]  # nothing to compare with yet
    route.stats.written += 50
    assert rates.update([route], 10.5) == [100.0]
    line = route_line(route, 100.0, width=8)
    assert line == (
        "orders    starting  received 1,204  written 1,250  100.0 msg/s  in flight 0  "
        "retries 2  dead-lettered 0"
    )
    depths = [DestinationDepth("/queue/a", 2, 1, 1), DestinationDepth("/topic/t", 0, 0, 1)]
    assert broker_line(depths) == "embedded broker: /queue/a 3, /topic/t 0"
    assert broker_line([]) == "embedded broker: no queues yet"


async def test_stop_erases_the_lines_and_shows_the_cursor_at_once() -> None:
    """What the hard stop relies on: os._exit follows, nothing unwinds."""
    screen = io.StringIO()
    status = StatusLine(Screen(screen, columns=120))
    route = Route("orders", FakeSource(), FakeSink())
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(status.run, [route], None)
            await wait_until(lambda: "orders" in screen.getvalue())
            assert screen.getvalue().count(SHOW_CURSOR) == 0
            status.stop()
            # The line erased (back to its start, erased to the end), then the cursor back.
            assert screen.getvalue().endswith("\r\x1b[J" + SHOW_CURSOR)
            nursery.cancel_scope.cancel()


# -- 80 columns, a resize ---------------------------------------------------------------------


def test_at_80_columns_the_line_keeps_retries_and_dead_letters() -> None:
    route = Route("orders-to-archive", FakeSource(), FakeSink())
    stats = route.stats
    stats.received, stats.written, stats.retries, stats.dead_lettered = 1_204_332, 1_200_001, 17, 3
    line = route_line(route, 41_234.5, width=17, columns=79)
    assert line == "orders-to-archive  starting  in 1.2M  out 1.2M  41k/s  retries 17  dead 3"
    # Narrower still: the rate and the count received give way too.
    narrow = route_line(route, 41_234.5, width=17, columns=60)
    assert narrow == "orders-to-archive  starting  out 1.2M  retries 17  dead 3"
    short = Route("orders", FakeSource(), FakeSink())
    assert route_line(short, 412.0, width=6, columns=79) == (
        "orders  starting  in 0  out 0  412/s  flight 0  retries 0  dead 0"
    )
    # Wide enough: the counters' own words, in full.
    assert "dead-lettered 3" in route_line(route, 1.0, columns=200)
    assert [abbreviated(n) for n in (0, 999, 1_000, 12_345, 1_250_000, 3e9)] == [
        "0", "999", "1.0k", "12k", "1.2M", "3.0G",
    ]  # fmt: skip


class _Resizing(io.StringIO):
    """A terminal whose width the test sets (Screen reads it per frame)."""

    width = 120


async def test_a_narrowed_terminal_is_redrawn_without_a_stale_line() -> None:
    out = io.StringIO()
    screen = Screen(out, columns=120)
    screen.draw(["a" * 100, "b" * 10])
    assert out.getvalue() == "\x1b[?25l" + "a" * 100 + "\r\n" + "b" * 10  # (cursor hidden)
    screen._columns = 40  # the window narrowed: the 100-character line now fills 3 rows
    screen.draw(["c" * 50])
    # Back up over all 4 rows the old frame fills now (3 + 1), erase, draw cut to 39.
    assert out.getvalue().endswith("\r\x1b[3A\x1b[J" + "c" * 39)
    screen.log("a log line\n")
    assert out.getvalue().endswith("\r\x1b[J" + "a log line\n" + "c" * 39)


@pytest.mark.deadline(60)
async def test_a_terminal_paused_with_ctrl_s_never_stops_the_routes(tmp_path: Path) -> None:
    """Ctrl-S (XOFF) stops a terminal's output: a write to it blocks. The bridge draws and
    logs off the loop, so files still move; at Ctrl-Q it draws again and stops cleanly."""
    (tmp_path / "bridge.toml").write_text(CONFIG)
    (tmp_path / "inbox").mkdir()
    main, child = _pty()
    attributes = termios.tcgetattr(child)
    attributes[0] |= termios.IXON  # (the default: Ctrl-S and Ctrl-Q work)
    termios.tcsetattr(child, termios.TCSANOW, attributes)
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "40"}
    process = await trio.lowlevel.open_process(
        [*bridges_command(), "run", "bridge.toml"],
        cwd=tmp_path, stdin=child, stdout=child, stderr=child, env=env,
    )  # fmt: skip
    os.close(child)
    seen = bytearray()
    outbox = tmp_path / "outbox"
    try:
        async with trio.open_nursery() as nursery:
            reader = trio.CancelScope()

            async def read() -> None:
                with reader:
                    await _read_pty(main, seen)

            nursery.start_soon(read)
            with trio.fail_after(20):
                while b"msg/s" not in seen:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            reader.cancel()  # nobody reads any more,
            os.write(main, b"\x13")  # and the terminal is paused (Ctrl-S)
            await trio.sleep(2.5)  # two refreshes: each would block a writer on the loop
            for i in range(FILES):
                (tmp_path / "inbox" / f"f{i}").write_text(str(i))
            with trio.fail_after(15):
                while len(list(outbox.glob("f*"))) < FILES:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            os.write(main, b"\x11")  # Ctrl-Q: the terminal takes output again
            nursery.start_soon(_read_pty, main, seen)
            await trio.sleep(1.5)
            process.send_signal(signal.SIGINT)
            with trio.fail_after(15):
                status = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(main)
    text = ANSI.sub("\n", seen.decode(errors="replace").replace("\r", ""))
    assert status == 0, text
    assert "written 5" in text, text  # drawn again once the terminal read again
    assert text.strip().splitlines()[-1] == "bridges: stopped", text


async def test_a_paused_terminal_drops_frames_and_counts_the_log_lines_it_drops() -> None:
    main, child = _pty()
    attributes = termios.tcgetattr(child)
    attributes[0] |= termios.IXON
    attributes[3] &= ~termios.ECHO  # (the marker line below is not echoed)
    termios.tcsetattr(child, termios.TCSANOW, attributes)
    await trio.to_thread.run_sync(_pause, main, child)  # Ctrl-S: output stopped
    seen = bytearray()
    with os.fdopen(child, "w") as terminal, trio.fail_after(20):
        screen = Screen(terminal, columns=80)
        async with trio.open_nursery() as nursery:
            await nursery.start(screen.pump)
            assert screen.draw(["first frame"])
            await trio.sleep(0.2)
            assert not screen.draw(["second frame"])  # the first is not taken yet
            assert screen.dropped_frames == 1
            line = "x" * 99 + "\n"
            for _ in range(MAX_PENDING // len(line) + 10):  # more than may wait
                screen.log(line)
            assert screen.dropped_lines >= 10
            os.write(main, b"\x11")  # Ctrl-Q: the terminal reads again
            nursery.start_soon(_read_pty, main, seen)
            await wait_until(lambda: b"first frame" in seen)
            screen.log("after\n")
            await wait_until(lambda: b"after" in seen)
            nursery.cancel_scope.cancel()
    os.close(main)
    text = seen.decode()
    assert f"({screen.dropped_lines} log line(s) dropped: the terminal did not read them)" in text
    assert "second frame" not in text
