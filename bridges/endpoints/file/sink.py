"""The ``file`` sink: JSON lines, or a file per message; durable before it returns.

JSON-lines mode (``format = "jsonl"``): each message is one line,
``{"id": ..., "destination": ..., "headers": {...}, "body": "..."}`` (text
when the body is UTF-8, else ``body_base64``; see ``body``). A batch is
appended to ``PREFIX-TIMESTAMP.jsonl.part`` and fsynced before the write
returns; once the file holds ``rotate_bytes`` or is ``rotate_seconds`` old
(or the sink closes), it is renamed to ``PREFIX-TIMESTAMP.jsonl``, so readers
that take ``*.jsonl`` only ever see complete files. A batch that fails
(ENOSPC...) is cut off again, so a retry never leaves half a line behind.
``.part`` files left by a process that was killed are finished at the next
start: cut after their last complete line, then renamed.

Repeats (``dedup_window``, JSON lines only, on by default): on open, after
finishing the ``.part`` files, the sink reads back the ids of the last
``dedup_window`` lines of its files (see :mod:`._readback`), and adds each
batch's ids once the batch is fsynced; a message whose id is among them is
not written again (counted in :attr:`_JsonlWriter.skipped`). With a source
whose ids are stable, a repeat after a crash is then a no-op: effectively
once, within the window and while the files stay in the directory.

File-per-message mode (``format = "files"``): see :mod:`._files` (names of
at most 255 bytes, ``conflict`` = fail / replace / ignore / rename). The
default name is the id, so a repeat finds its own file (same bytes: nothing
written; ``conflict = "replace"``: replaced): effectively once by name.

Nothing planted in the directory is written through (see :mod:`._fs`): the
sink works relative to the directory's descriptor, ``.part`` files are
created exclusively without following links and reach their final name by
``link`` (never replacing an existing file), and recovery leaves a ``.part``
that is a link or not a regular file alone (logged).
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Literal

import attrs
import trio
from attrs.validators import ge, optional

from ..._blocking import Worker, worker_thread
from ..._endpoint import Context, InvalidSetting, InvalidSettings, prepare_each
from ..._fs import (
    Refused,
    link_new,
    open_directory,
    open_regular,
    unlink_quietly,
    unwritable_problem,
    write_all,
)
from ..._message import Message
from ..._template import Template, TemplateError
from ._files import FilesWriter
from ._readback import RecentIds, read_back
from ._records import encode_record, record_lines, record_text

log = logging.getLogger("bridges.file")

#: Bound on finishing the current file when the sink closes, s.
CLOSE_TIMEOUT = 10.0
#: Ids of the last lines written that a JSON-lines sink keeps to skip repeats, by default
#: (or the route's in_flight, when that is more).
DEFAULT_DEDUP_WINDOW = 10_000


@attrs.frozen
class FileSinkConfig:
    """Write JSON lines (rotated) or a file per message, fsynced before the ack.

    Attributes:
      path: required: the directory written to (created when missing).
      format: ``"jsonl"``: a line per message in rotated files;
        ``"files"``: a file per message.
      body: JSON lines: ``"auto"`` writes ``body`` when the body is UTF-8
        text, else ``body_base64``; ``"text"`` rejects a body that is not
        UTF-8; ``"base64"`` always writes ``body_base64``.
      prefix: JSON lines: files are named ``PREFIX-TIMESTAMP.jsonl``.
      rotate_bytes: JSON lines: a file that holds this many bytes is
        finished (renamed from ``.part`` to ``.jsonl``).
      rotate_seconds: JSON lines: a file this old is finished, s. As a
        route's ``dead_letter``, each write finishes its file at once, so dead
        letters show as ``.jsonl`` files while the bridge runs.
      name: file per message: the file's name, a template (``{id}``,
        ``{header:NAME}``...); the id makes repeats no-ops.
      conflict: file per message: what to do when the name exists with other
        content: ``"fail"`` (reject the message), ``"replace"``, ``"ignore"``
        (count it written) or ``"rename"`` (``STEM-1.EXT``...).
      fsync: false skips fsync: faster; survives ``kill -9`` but not a power
        cut.
      dedup_window: JSON lines: the ids of this many last lines are read back
        on open and kept, and a message with one of them is not written again
        (0: off); default: 10,000, or the route's ``in_flight`` if more.
    """

    path: str
    format: Literal["jsonl", "files"] = "jsonl"
    body: Literal["auto", "text", "base64"] = "auto"
    prefix: str = "messages"
    rotate_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=ge(1))
    rotate_seconds: float = attrs.field(default=3600.0, validator=ge(0.001))
    name: str = "{id}"
    conflict: Literal["fail", "replace", "ignore", "rename"] = "fail"
    fsync: bool = True
    dedup_window: int | None = attrs.field(default=None, validator=optional(ge(0)))


class FileSink:
    """A directory of JSON-lines files or of one file per message."""

    def __init__(self, config: FileSinkConfig, context: Context) -> None:
        self.config = config
        self.path = context.path(config.path)
        #: As a route's dead letters, a JSON-lines file is finished after each
        #: write: they are rare, and a user looks for them while the bridge runs.
        self.finish_each_write = context.role == "dead_letter"
        found: list[InvalidSetting] = []  # (all at once: one round of bridges check)
        if problem := unwritable_problem(self.path):
            found.append(InvalidSetting("path", problem))
        self._create = not context.checking
        if "/" in config.prefix or config.prefix.startswith("."):
            found.append(InvalidSetting("prefix", "must be a plain file name prefix"))
        window = config.dedup_window
        #: Ids of the last lines kept to skip repeats (0: off).
        self.dedup_window = (
            max(DEFAULT_DEDUP_WINDOW, context.in_flight) if window is None else window
        )
        if config.format == "jsonl" and 0 < self.dedup_window < context.in_flight:
            found.append(
                InvalidSetting(
                    "dedup_window",
                    f"{self.dedup_window} is less than the route's in_flight "
                    f"({context.in_flight}): repeats after a crash could fall outside it "
                    "(0 turns it off)",
                )
            )
        try:
            self.name = Template.parse(config.name)
        except TemplateError as exc:
            found.append(InvalidSetting("name", str(exc)))
        InvalidSettings.raise_any(found)

    @classmethod
    def build(cls, config: FileSinkConfig, context: Context) -> FileSink:
        return cls(config, context)

    def writes(self) -> list[Path]:
        """The folders this sink writes: its ``path``."""
        return [self.path]

    def describe(self) -> str:
        return f"file {self.path}/ ({self.config.format})"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_JsonlWriter | FilesWriter]:
        # Every file call of an open sink runs in this thread, never in the shared ones:
        # other routes' calls hung on a dead mount cannot hold up this sink.
        async with worker_thread(f"file sink {self.path}") as own:
            if self._create:
                await own.run(partial(self.path.mkdir, parents=True, exist_ok=True))
            dir_fd = await own.run(partial(open_directory, self.path))
            try:
                if self.config.format == "files":
                    config = self.config
                    yield FilesWriter(own, dir_fd, self.name, config.conflict, fsync=config.fsync)
                else:
                    async with self._open_jsonl(own, dir_fd) as writer:
                        yield writer
            finally:
                os.close(dir_fd)

    @asynccontextmanager
    async def _open_jsonl(self, own: Worker, dir_fd: int) -> AsyncIterator[_JsonlWriter]:
        writer = _JsonlWriter(self, dir_fd, own)
        await own.run(writer.recover)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.rotate_when_old)
                try:
                    yield writer
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            # The wait for a write in progress is bounded (the .part is then finished at
            # the next start); the call itself runs to its end, as every write does.
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                async with writer.lock:
                    await own.run(writer.finish)


class _JsonlWriter:
    def __init__(self, sink: FileSink, dir_fd: int, own: Worker) -> None:
        self._sink = sink
        self._config = sink.config
        self._dir_fd = dir_fd
        self.lock = trio.Lock()
        self._fd: int | None = None
        self._part: str | None = None
        self._size = 0
        self._opened_at = 0.0
        #: The ids of the last lines written (read back on open); None: not kept.
        self.recent: RecentIds | None = None
        #: Messages the last write did not write again (their ids were recent).
        self.skipped = 0
        #: The thread each file call (append, fsync, rename) runs in, while the sink is open.
        self._own = own

    async def write(self, batch: Sequence[Message]) -> None:
        recent = self.recent
        fresh: list[str] | None = None
        if recent is not None:
            ids = [message.id for message in batch]
            if recent.none_of(ids):  # (the common case: checked and kept in C)
                fresh = ids
                self.skipped = 0
            else:
                batch = self._new_only(batch, recent)
                if not batch:
                    return
        body = self._config.body
        try:
            lines = record_lines(batch, body)
        except ValueError:  # name every message that cannot be written, each with its reason
            lines = prepare_each(batch, lambda message: record_text(message, body))
        try:
            data = "".join(lines).encode("utf-8")
        except UnicodeEncodeError:
            data = b"".join(encode_record(message, body) for message in batch)
        try:  # (uncontended, the usual case: no scheduler pass to take it)
            self.lock.acquire_nowait()
        except trio.WouldBlock:
            await self.lock.acquire()
        try:
            await self._own.run(partial(self._append, data))
        finally:
            self.lock.release()
        if fresh is not None:
            assert recent is not None
            recent.add_new(fresh)
        elif recent is not None:
            recent.add(message.id for message in batch)

    def _new_only(self, batch: Sequence[Message], recent: RecentIds) -> Sequence[Message]:
        """``batch`` without the messages whose id is recent (or earlier in the batch)."""
        fresh: list[Message] = []
        ids: set[str] = set()
        for message in batch:
            message_id = message.id
            if message_id and (message_id in recent or message_id in ids):
                continue
            ids.add(message_id)
            fresh.append(message)
        self.skipped = len(batch) - len(fresh)
        if self.skipped:
            log.debug("%d message(s) written already; skipped", self.skipped)
        return fresh if self.skipped else batch

    def _append(self, data: bytes) -> None:
        config = self._config
        if self._fd is not None and (
            self._size >= config.rotate_bytes
            or time.monotonic() - self._opened_at >= config.rotate_seconds
        ):
            self.finish()
        if self._fd is None:
            self._start()
        assert self._fd is not None
        before = self._size
        try:
            write_all(self._fd, data)
            if config.fsync:
                os.fsync(self._fd)
        except OSError:
            self._cut(before)
            raise
        self._size += len(data)
        if self._sink.finish_each_write:
            self.finish()

    def _cut(self, size: int) -> None:
        """Take a failed batch off the end again, so a retry leaves no half line."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, size)
        except OSError as exc:
            # Leave the file as .part: the next start cuts it after its last line.
            log.error("cannot cut %s back after a failed write: %s", self._part, exc)
            os.close(self._fd)
            self._fd = None

    def _start(self) -> None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        for attempt in range(1000):
            suffix = f"-{attempt}" if attempt else ""
            part = f"{self._config.prefix}-{stamp}{suffix}.jsonl.part"
            try:
                os.lstat(part.removesuffix(".part"), dir_fd=self._dir_fd)
                continue  # that final name is taken
            except FileNotFoundError:
                pass
            try:
                fd = os.open(part, flags, 0o644, dir_fd=self._dir_fd)
            except FileExistsError:
                continue
            break
        else:  # pragma: no cover - a thousand files in one microsecond
            raise OSError(f"cannot find a free file name in {self._sink.path}")
        self._fd, self._part, self._size = fd, part, 0
        self._opened_at = time.monotonic()
        if self._config.fsync:
            os.fsync(self._dir_fd)

    def finish(self) -> None:
        """Close the current file and give it its final name."""
        if self._fd is None or self._part is None:
            return
        fd, part = self._fd, self._part
        self._fd = self._part = None
        os.close(fd)
        if self._size == 0:
            unlink_quietly(self._dir_fd, part)
            return
        self._publish(part)

    def _publish(self, part: str) -> None:
        """``NAME.jsonl.part`` -> ``NAME.jsonl`` (or ``NAME-N.jsonl``), never replacing a file."""
        final = part.removesuffix(".part")
        stem = final.removesuffix(".jsonl")
        for attempt in range(1000):
            name = f"{stem}-{attempt}.jsonl" if attempt else final
            if link_new(self._dir_fd, part, name):
                break
        else:  # pragma: no cover - a thousand files of one name
            raise OSError(f"cannot find a free file name for {part} in {self._sink.path}")
        if self._config.fsync:
            os.fsync(self._dir_fd)

    def recover(self) -> None:
        """Finish ``.part`` files a killed process left: cut after the last line, rename.

        A ``.part`` that is a symbolic link or not a regular file is nobody's
        output: it is logged and left alone (never followed, cut or renamed).
        """
        prefix = f"{self._config.prefix}-"
        with os.scandir(self._dir_fd) as entries:
            parts = sorted(
                e.name for e in entries if e.name.startswith(prefix) and e.name.endswith(".part")
            )
        for part in parts:
            try:
                fd, _ = open_regular(self._dir_fd, part, os.O_RDWR)
            except Refused as exc:
                log.warning(
                    "%s is %s; left alone", self._sink.path / part, exc.strerror or "refused"
                )
                continue
            except FileNotFoundError:
                continue
            with os.fdopen(fd, "r+b") as file:
                data = file.read()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    file.truncate(keep)
                    file.flush()
                    os.fsync(file.fileno())
            if keep == 0:
                unlink_quietly(self._dir_fd, part)
            else:
                self._publish(part)
            log.info("finished %s left by an earlier run (%d bytes)", part, keep)
        if self._config.fsync:
            os.fsync(self._dir_fd)
        window = self._sink.dedup_window
        if window:
            self.recent = read_back(self._dir_fd, self._finished(), window)

    def _finished(self) -> list[str]:
        """This sink's finished files in the directory, newest first (by name: its timestamp)."""
        prefix = f"{self._config.prefix}-"
        with os.scandir(self._dir_fd) as entries:
            names = [e.name for e in entries if e.name.startswith(prefix)]
        return sorted((n for n in names if n.endswith(".jsonl")), reverse=True)

    async def rotate_when_old(self) -> None:
        """Rename a file that reached ``rotate_seconds`` even when no write comes."""
        period = self._config.rotate_seconds
        while True:
            await trio.sleep(max(period / 4, 0.05))
            if self._fd is not None and time.monotonic() - self._opened_at >= period:
                async with self.lock:
                    await self._own.run(self.finish)
