"""A terminal's bottom lines (the status) with log lines printed above them, written
without ever blocking the event loop.

A terminal can stop reading: Ctrl-S pauses its output (XOFF), a terminal
emulator's window may hang, a ``screen`` session may be detached. A blocking
``write`` to it then waits, and on the event loop that stops every route. So,
while :meth:`Screen.pump` runs, nothing on the loop writes to the terminal:

- :meth:`Screen.draw` (a status frame) and :meth:`Screen.log` (lines) only
  append to a buffer, and return at once;
- :meth:`Screen.pump`, a task, writes the buffer through a private descriptor
  of the same terminal opened non-blocking (``/proc/self/fd/N`` reopened: a new
  open file description, so the shell's own descriptor stays blocking), and
  waits for it to take more with the loop's own poller: no thread;
- while the terminal does not take what was written, frames are dropped (the
  next frame that gets through shows the current counts), and lines are kept
  up to :data:`MAX_PENDING` bytes, then dropped and counted: a line says how
  many once the terminal reads again.

When the pump ends (or ``bridges run``'s hard stop calls :meth:`Screen.clear`),
what still waits and the erasure of the status lines are written without
blocking: a terminal still paused loses them, and the stop does not wait.
Outside :meth:`Screen.pump` (before it starts, after it ends, or where no
private descriptor can be opened) writes go straight to the file, as any
program's do: the routes have stopped by then.

Each frame is redrawn in place: the cursor goes back to the frame's first row
and the screen is erased from there. Lines are cut to one column less than the
terminal's width (no line ever wraps), and the width is read again for every
frame: when it changed, the old frame's rows are counted as a terminal that
reflows its lines (most do) shows them, so that a narrowed window leaves no
stale line.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
from collections.abc import Sequence
from typing import Final, TextIO

import trio

#: The most bytes waiting for a terminal that stopped reading before log lines are
#: dropped (frames are dropped as soon as anything waits).
MAX_PENDING: Final = 256 * 1024
HIDE_CURSOR: Final = "\x1b[?25l"
SHOW_CURSOR: Final = "\x1b[?25h"


class Screen:
    """Status lines at the bottom of a terminal, and lines printed above them.

    Args:
      file: the terminal (``bridges run``'s stdout).
      columns: a fixed width (tests); by default the terminal's, read per frame.
    """

    def __init__(self, file: TextIO, columns: int | None = None) -> None:
        self._file = file
        self._columns = columns
        self._pending = bytearray()
        self._wake = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._frame: list[str] = []  # as drawn
        self._drawn_width = 0
        self._partial = ""
        #: Frames not drawn because the terminal had not taken the previous one.
        self.dropped_frames = 0
        #: Lines not printed because :data:`MAX_PENDING` bytes waited already.
        self.dropped_lines = 0
        self._told_dropped = 0
        self._hidden = False  # the cursor, while status lines show
        self._private: int | None = None  # the pump's non-blocking descriptor
        # A log record may come from a worker thread (trio.to_thread) while the loop draws.
        self._lock = threading.RLock()

    # -- what the loop calls (never blocks while the pump runs) --------------------------------

    def columns(self) -> int:
        """The terminal's width now."""
        if self._columns is not None:
            return self._columns
        try:
            return os.get_terminal_size(self._file.fileno()).columns or 80
        except (OSError, ValueError, AttributeError):
            return shutil.get_terminal_size().columns

    def draw(self, lines: Sequence[str]) -> bool:
        """Show ``lines`` as the status (each cut to fit); False when the frame was dropped
        (the terminal has not taken what was written before)."""
        with self._lock:
            if self._token is not None and self._pending:
                self.dropped_frames += 1
                return False
            width = self.columns()
            text = "" if self._hidden else HIDE_CURSOR
            self._hidden = True
            text += self._erase(width) + self._show([line[: max(width - 1, 1)] for line in lines])
            self._drawn_width = width
            self._out(text)
            return True

    def log(self, text: str) -> None:
        """Print ``text`` (whole lines) above the status lines."""
        with self._lock:
            if self._token is not None and len(self._pending) + len(text) > MAX_PENDING:
                self.dropped_lines += text.count("\n") or 1
                return
            frame = self._frame
            dropped = self.dropped_lines - self._told_dropped
            note = ""
            if dropped:
                note = f"({dropped} log line(s) dropped: the terminal did not read them)\n"
                self._told_dropped = self.dropped_lines
            width = self.columns()
            self._out(self._erase(width) + note + text + self._show(frame))
            self._drawn_width = width

    def write(self, text: str, /) -> int:
        """A text file's ``write``, for :mod:`logging` and ``print``: complete lines are
        printed above the status, a partial one waits for its end."""
        with self._lock:
            self._partial += text
            if "\n" not in self._partial:
                return len(text)
            whole, _, self._partial = self._partial.rpartition("\n")
        self.log(whole + "\n")
        return len(text)

    def flush(self) -> None:
        """Nothing to do: complete lines are on their way."""

    def clear(self) -> None:
        """Erase the status lines and show the cursor, written at once: at the end of
        :meth:`pump`, or just before ``os._exit``. While the pump runs, through its
        non-blocking descriptor: what a terminal that stopped reading does not take
        is dropped (a stop must not wait on it); else a plain write."""
        with self._lock:
            self._token = None
            shown = SHOW_CURSOR if self._hidden else ""
            self._hidden = False
            data = bytes(self._pending) + (self._erase(self.columns()) + shown).encode()
            self._pending.clear()
            private = self._private
        if private is None:
            self._write_now(data)
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(private, view) :]
        except OSError:  # BlockingIOError: the terminal does not read; the rest is dropped
            pass

    # -- the pump -------------------------------------------------------------------------------

    async def pump(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write what the loop queued, without blocking it, until cancelled; then erase
        the status lines. Where the terminal cannot be reopened non-blocking, writes
        stay direct (as before the pump)."""
        stream = _reopen(self._file)
        if stream is None:
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self.clear()
            return
        self._token = trio.lowlevel.current_trio_token()
        task_status.started()
        async with stream:
            self._private = stream.fileno()
            try:
                while True:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    while self._pending:
                        data = bytes(self._pending)
                        await stream.send_all(data)
                        del self._pending[: len(data)]
            finally:
                self.clear()
                self._private = None

    # -- inside ------------------------------------------------------------------------------

    def _erase(self, width: int) -> str:
        """Back to the first row of the frame on screen, and erase from there."""
        if not self._frame:
            return ""
        rows = len(self._frame)
        if width < self._drawn_width:
            # A narrowed terminal reflows each old line over ceil(len / width) rows.
            rows = sum(max(1, math.ceil(len(line) / width)) for line in self._frame)
        up = f"\x1b[{rows - 1}A" if rows > 1 else ""
        self._frame = []
        return f"\r{up}\x1b[J"

    def _show(self, lines: list[str]) -> str:
        self._frame = lines
        return "\r\n".join(lines)

    def _out(self, text: str) -> None:
        if not text:
            return
        if self._token is None:
            self._write_now(text.encode("utf-8", "replace"))
            return
        self._pending += text.encode("utf-8", "replace")
        try:
            trio.lowlevel.current_task()
        except RuntimeError:  # (a log record from a worker thread)
            self._token.run_sync_soon(self._wake.set)
        else:
            self._wake.set()

    def _write_now(self, data: bytes) -> None:
        buffer = getattr(self._file, "buffer", None)
        if buffer is not None:
            self._file.flush()
            buffer.write(data)
            buffer.flush()
        else:
            self._file.write(data.decode("utf-8", "replace"))
            self._file.flush()


def _reopen(file: TextIO) -> trio.lowlevel.FdStream | None:
    """A private, non-blocking descriptor of the terminal behind ``file`` (Linux)."""
    try:
        fd = file.fileno()
        if not os.isatty(fd):
            return None
        private = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except (OSError, ValueError, AttributeError):
        return None
    file.flush()
    return trio.lowlevel.FdStream(private)
