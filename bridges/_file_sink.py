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

File-per-message mode (``format = "files"``): the body is written to a
temporary ``.NAME.tmp``, fsynced, renamed to NAME (from the ``name``
template, made safe as a file name), and the directory is fsynced once per
batch. A message written twice (after a crash) replaces the first copy.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from json.encoder import encode_basestring
from pathlib import Path
from typing import Literal

import attrs
import trio
from attrs.validators import ge

from ._endpoint import Context, InvalidSetting, MessageRejected
from ._message import Message
from ._template import Template, TemplateError, safe_filename

log = logging.getLogger("bridges.file")
_string = encode_basestring  # str -> JSON string literal (C), non-ASCII kept

#: Bound on finishing the current file when the sink closes, s.
CLOSE_TIMEOUT = 10.0


@attrs.frozen
class FileSinkConfig:
    """Write JSON lines (rotated) or a file per message, fsynced before the ack."""

    path: str
    format: Literal["jsonl", "files"] = "jsonl"
    body: Literal["auto", "text", "base64"] = "auto"
    prefix: str = "messages"
    rotate_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=ge(1))
    rotate_seconds: float = attrs.field(default=3600.0, validator=ge(0.001))
    name: str = "{id}"
    fsync: bool = True


def record_lines(messages: Iterable[Message], body: str = "auto") -> list[str]:
    """One JSON line (with its newline) per message, as text.

    Built by hand from the C string encoder: twice as fast as ``json.dumps``
    of a dict, and this runs for every message, so a batch per call. The
    result may hold lone surrogates (a file name that is not UTF-8):
    :func:`encode_record` copes.

    Raises:
      ValueError: ``body="text"`` and a body is not UTF-8.
    """
    string = _string
    lines = []
    for message in messages:
        if body == "base64":
            payload = f'"body_base64":"{base64.b64encode(message.body).decode("ascii")}"'
        else:
            try:
                payload = '"body":' + string(message.body.decode("utf-8"))
            except UnicodeDecodeError:
                if body == "text":
                    raise ValueError('the body is not UTF-8 text (body = "text")') from None
                payload = f'"body_base64":"{base64.b64encode(message.body).decode("ascii")}"'
        fields = []  # (a loop: a comprehension's own frame costs more than it saves here)
        for name, value in message.headers.items():
            fields.append(f"{string(name)}:{string(value)}")
        headers = ",".join(fields)
        if message.destination is None:
            lines.append(f'{{"id":{string(message.id)},"headers":{{{headers}}},{payload}}}\n')
        else:
            destination = string(message.destination)
            lines.append(
                f'{{"id":{string(message.id)},"destination":{destination},'
                f'"headers":{{{headers}}},{payload}}}\n'
            )
    return lines


def record_text(message: Message, body: str = "auto") -> str:
    """One JSON line (with its newline) for ``message``, as text: see :func:`record_lines`.

    Raises:
      ValueError: ``body="text"`` and the body is not UTF-8.
    """
    return record_lines((message,), body)[0]


def encode_record(message: Message, body: str = "auto") -> bytes:
    """One JSON line (with its newline) for ``message``, UTF-8.

    Raises:
      ValueError: ``body="text"`` and the body is not UTF-8.
    """
    text = record_text(message, body)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them, as JSON allows
        return json.dumps(json.loads(text), separators=(",", ":")).encode("ascii") + b"\n"


class FileSink:
    """A directory of JSON-lines files or of one file per message."""

    def __init__(self, config: FileSinkConfig, context: Context) -> None:
        self.config = config
        self.path = context.path(config.path)
        self._create = not context.checking
        if "/" in config.prefix or config.prefix.startswith("."):
            raise InvalidSetting("prefix", "must be a plain file name prefix")
        try:
            self.name = Template.parse(config.name)
        except TemplateError as exc:
            raise InvalidSetting("name", str(exc)) from None

    @classmethod
    def build(cls, config: FileSinkConfig, context: Context) -> FileSink:
        return cls(config, context)

    def describe(self) -> str:
        return f"file {self.path}/ ({self.config.format})"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_JsonlWriter | _FilesWriter]:
        if self._create:
            await trio.to_thread.run_sync(lambda: self.path.mkdir(parents=True, exist_ok=True))
        if self.config.format == "files":
            yield _FilesWriter(self)
            return
        writer = _JsonlWriter(self)
        await trio.to_thread.run_sync(writer.recover)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.rotate_when_old)
                try:
                    yield writer
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            # Bounded: if the disk hangs, the .part is finished at the next start instead.
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                async with writer.lock:
                    await trio.to_thread.run_sync(writer.finish)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _JsonlWriter:
    def __init__(self, sink: FileSink) -> None:
        self._sink = sink
        self._config = sink.config
        self.lock = trio.Lock()
        self._fd: int | None = None
        self._part: Path | None = None
        self._size = 0
        self._opened_at = 0.0

    async def write(self, batch: Sequence[Message]) -> None:
        body = self._config.body
        try:
            lines = record_lines(batch, body)
        except ValueError:  # name every message that cannot be written
            bad: list[int] = []
            reason = ""
            for index, message in enumerate(batch):
                try:
                    record_text(message, body)
                except ValueError as exc:
                    bad.append(index)
                    reason = str(exc)
            raise MessageRejected(reason, bad) from None
        try:
            data = "".join(lines).encode("utf-8")
        except UnicodeEncodeError:
            data = b"".join(encode_record(message, body) for message in batch)
        async with self.lock:
            await trio.to_thread.run_sync(self._append, data)

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
            _write_all(self._fd, data)
            if config.fsync:
                os.fsync(self._fd)
        except OSError:
            self._cut(before)
            raise
        self._size += len(data)

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
        for attempt in range(1000):
            suffix = f"-{attempt}" if attempt else ""
            final = self._sink.path / f"{self._config.prefix}-{stamp}{suffix}.jsonl"
            part = final.with_name(final.name + ".part")
            if final.exists():
                continue
            try:
                fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            except FileExistsError:
                continue
            break
        else:  # pragma: no cover - a thousand files in one microsecond
            raise OSError(f"cannot find a free file name in {self._sink.path}")
        self._fd, self._part, self._size = fd, part, 0
        self._opened_at = time.monotonic()
        if self._config.fsync:
            _fsync_dir(self._sink.path)

    def finish(self) -> None:
        """Close the current file and rename it to its final name."""
        if self._fd is None or self._part is None:
            return
        fd, part = self._fd, self._part
        self._fd = self._part = None
        os.close(fd)
        if self._size == 0:
            part.unlink(missing_ok=True)
            return
        os.replace(part, part.with_suffix(""))
        if self._config.fsync:
            _fsync_dir(self._sink.path)

    def recover(self) -> None:
        """Finish ``.part`` files a killed process left: cut after the last line, rename."""
        for part in sorted(self._sink.path.glob(f"{self._config.prefix}-*.jsonl.part")):
            with open(part, "r+b") as file:
                data = file.read()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    file.truncate(keep)
                    file.flush()
                    os.fsync(file.fileno())
            if keep == 0:
                part.unlink()
            else:
                os.replace(part, part.with_suffix(""))
            log.info("finished %s left by an earlier run (%d bytes)", part.name, keep)
        if self._config.fsync:
            _fsync_dir(self._sink.path)

    async def rotate_when_old(self) -> None:
        """Rename a file that reached ``rotate_seconds`` even when no write comes."""
        period = self._config.rotate_seconds
        while True:
            await trio.sleep(max(period / 4, 0.05))
            if self._fd is not None and time.monotonic() - self._opened_at >= period:
                async with self.lock:
                    await trio.to_thread.run_sync(self.finish)


class _FilesWriter:
    def __init__(self, sink: FileSink) -> None:
        self._sink = sink

    async def write(self, batch: Sequence[Message]) -> None:
        files = []
        bad: list[int] = []
        reason = ""
        for index, message in enumerate(batch):
            try:
                files.append((safe_filename(self._sink.name.render(message)), message.body))
            except TemplateError as exc:
                bad.append(index)
                reason = str(exc)
        if bad:
            raise MessageRejected(reason, bad)
        await trio.to_thread.run_sync(self._write, files)

    def _write(self, files: list[tuple[str, bytes]]) -> None:
        directory = self._sink.path
        fsync = self._sink.config.fsync
        for name, body in files:
            temporary = directory / f".{name}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                try:
                    _write_all(fd, body)
                    if fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(temporary, directory / name)
            except OSError:
                temporary.unlink(missing_ok=True)
                raise
        if fsync:
            _fsync_dir(directory)
