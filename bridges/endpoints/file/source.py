"""The ``file`` source: a watched directory (a file per message), or a tailed JSON-lines file.

Directory mode (``mode = "directory"``): the directory is polled (no inotify
needed). A file is taken when it is *complete*: its name does not start with
``.`` or end with ``.tmp`` / ``.part`` (so a writer that writes under such a
name and then renames it into place is never read half-written), and it has
not been modified for ``settle`` seconds (for writers that write in place;
``settle = 0`` relies on renames alone). Files are taken oldest first (by
modification time, then name). Each file is one message: its bytes are the
body, its name the ``file-name`` header, ``ROUTE/NAME@MTIME_NS`` its id (ROUTE:
the route's name, :func:`~bridges.endpoints._id_template.id_namespace`). Only after
the ack is it moved into ``done_dir`` (or deleted, ``after = "delete"``); a
nacked file stays and is read again. A name already taken in ``done_dir``
(an earlier file of the same name, or anything planted there) is never
replaced: the later file is kept as ``NAME@MTIME_NS`` (then
``-2``, ``-3``... should that be taken too), and a warning names both. A
file that a writer replaced or rewrote after it was read is never the one
moved or deleted: it stays, to be read in its turn. A file that cannot be
read is logged and left where it is, as is one that the sink rejected (too
big for it, say) when the route has no dead-letter sink: neither is read
again until it changes.

Nothing planted in the directory is followed or blocks (see
:mod:`bridges.endpoints.file._fs`): each file is opened with ``O_NOFOLLOW |
O_NONBLOCK`` relative to the directory's descriptor and checked on that
descriptor (a regular file of at most ``max_bytes``), so a symbolic link or
FIFO swapped in after the scan is logged and left alone; ``done_dir`` is
opened without following links, and a link in its place stops the move (the
file stays, logged) rather than moving it elsewhere.

JSON-lines mode (``mode = "jsonl"``): the file is tailed; each complete
line (ending in a newline) is one message, its id ``ROUTE/NAME:OFFSET``. The
offset up to which every line was acked is persisted (written to a temporary
file, fsynced, renamed) in ``position_file`` after acks, so a restart
resumes after the last acked line. A line longer than ``max_line`` bytes is
never held in memory whole: it goes to the dead-letter sink (its first
``max_line`` bytes), or is skipped, logged, without one. ``lines = "raw"`` makes the line the
body; ``lines = "envelope"`` reads records as the ``file`` sink writes them
(``id``, ``headers``, ``body`` or ``body_base64``, ``destination``). That
mode lives in :mod:`bridges.endpoints.file.tail`.
"""

from __future__ import annotations

import collections
import fnmatch
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Literal

import attrs
import trio
from attrs.validators import ge

from ..._blocking import blocking
from ..._endpoint import Context, InvalidSetting, MessageRejected
from ..._fs import (
    NAME_MAX,
    NO_LINKS,
    TAKEN_PREFIX,
    Refused,
    link_into,
    move_new,
    open_directory,
    open_subdirectory,
    read_regular,
    take,
    taken_name,
    unlink_quietly,
    unwritable_problem,
)
from ..._message import Envelope, Message
from .._id_template import id_namespace
from .tail import JsonlReceiver

log = logging.getLogger("bridges.file")

_INCOMPLETE_SUFFIXES = (".tmp", ".part")
#: The most names in ``done_dir`` a file done with tries before it stays where it is.
MAX_DONE_NAMES = 10_000
#: What identifies the file that was read: device, inode, modification time.
_Identity = tuple[int, int, int]


def _identity(info: os.stat_result) -> _Identity:
    return info.st_dev, info.st_ino, info.st_mtime_ns


@attrs.frozen
class FileSourceConfig:
    """Read a directory (a file per message) or tail a JSON-lines file (a line per message).

    Attributes:
      path: required: the directory to watch (created when missing), or the
        JSON-lines file to tail.
      mode: ``"directory"``: each complete file is a message; ``"jsonl"``:
        each complete line of the file is a message.
      pattern: directory: the names to take (an ``fnmatch`` pattern).
      settle: directory: how long a file must be left unmodified before it is
        taken, s (0: rely on renames alone).
      after: directory: what happens to a file once its message is acked:
        ``"move"`` into ``done_dir``, or ``"delete"``.
      done_dir: directory: where taken files go, relative to ``path`` (and
        inside it).
      poll_interval: how long to wait between scans (or reads) when idle, s.
      max_bytes: directory: a larger file is left alone (and logged), bytes.
      position_file: JSON lines: where the offset of the last acked line is
        kept; default: ``PATH.position``.
      lines: JSON lines: ``"raw"``: the line is the body; ``"envelope"``:
        records as the ``file`` sink writes them.
      max_line: JSON lines: a longer line goes to the dead-letter sink (its
        first ``max_line`` bytes) or is skipped, bytes.
    """

    path: str
    mode: Literal["directory", "jsonl"] = "directory"
    pattern: str = "*"
    settle: float = attrs.field(default=1.0, validator=ge(0.0))
    after: Literal["move", "delete"] = "move"
    done_dir: str = "done"
    poll_interval: float = attrs.field(default=0.5, validator=ge(0.001))
    max_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=ge(1))
    position_file: str | None = None
    lines: Literal["raw", "envelope"] = "raw"
    max_line: int = attrs.field(default=1024 * 1024, validator=ge(1))


class FileSource:
    """A directory or a JSON-lines file, as a source."""

    def __init__(self, config: FileSourceConfig, context: Context) -> None:
        self.config = config
        self.path = context.path(config.path)
        #: The namespace of this source's ids (its route): see :func:`id_namespace`.
        self.namespace = id_namespace(context.route)
        self.done = self.path / config.done_dir
        self.position = (
            context.path(config.position_file)
            if config.position_file is not None
            else self.path.with_name(self.path.name + ".position")
        )
        done = Path(config.done_dir)
        if config.mode == "directory" and (done.is_absolute() or ".." in done.parts):
            # Inside the watched directory, the move is a rename on one file system.
            raise InvalidSetting("done_dir", "must be a relative path inside the directory")
        for folder in self.writes():
            if problem := unwritable_problem(folder):
                raise InvalidSetting("path", problem)
        self._create = not context.checking

    def writes(self) -> list[Path]:
        """The folders this source writes: the watched one (its ``done`` folder
        inside), or the tail's position file's."""
        return [self.path if self.config.mode == "directory" else self.position.parent]

    @classmethod
    def build(cls, config: FileSourceConfig, context: Context) -> FileSource:
        return cls(config, context)

    def describe(self) -> str:
        return (
            f"file {self.path}{'/' if self.config.mode == 'directory' else ''} ({self.config.mode})"
        )

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_DirectoryReceiver | JsonlReceiver]:
        if self.config.mode == "directory":
            if self._create:
                await blocking(self._make_dirs, what="mkdir")
            dir_fd = await blocking(partial(open_directory, self.path), what="open the folder")
            try:
                directory = _DirectoryReceiver(self, dir_fd)
                if self._create:
                    await blocking(directory.recover, what="recover")
                yield directory
            finally:
                os.close(dir_fd)
            return
        receiver = JsonlReceiver(self)
        await receiver.start()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(receiver.persist_loop)
                try:
                    yield receiver
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            # Bounded: a position not saved now only means a few lines read twice.
            with trio.CancelScope(shield=True), trio.move_on_after(10.0):
                await receiver.persist()
            receiver.close()

    def _make_dirs(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if self.config.after == "move":
            self.done.mkdir(parents=True, exist_ok=True)


# -- directory ------------------------------------------------------------------------


class _DirectoryReceiver:
    def __init__(self, source: FileSource, dir_fd: int) -> None:
        self._source = source
        self._dir_fd = dir_fd
        self._config = source.config
        self._ready: collections.deque[tuple[int, str]] = collections.deque()
        self._taken: set[str] = set()
        self._broken: set[tuple[str, int]] = set()

    async def receive(self) -> Envelope:
        while True:
            while not self._ready:
                found = await blocking(partial(self._scan, frozenset(self._taken)), what="scan")
                if found:
                    self._ready.extend(found)
                else:
                    await trio.sleep(self._config.poll_interval)
            mtime_ns, name = self._ready.popleft()
            try:
                body, info = await blocking(partial(self._read, name), what="read")
            except FileNotFoundError:
                continue
            except OSError as exc:
                self._broken.add((name, mtime_ns))
                log.error(
                    "cannot read %s (%s); it stays where it is",
                    self._source.path / name,
                    exc.strerror or exc,
                )
                continue
            mtime_ns = info.st_mtime_ns
            read = _identity(info)
            self._taken.add(name)
            message_id = f"{self._source.namespace}{name}@{mtime_ns}"  # ROUTE/NAME@MTIME_NS
            message = Message(body, {"file-name": name}, message_id)
            return Envelope(
                message,
                ack=partial(self._ack, name, read),
                nack=partial(self._nack, name, mtime_ns),
                origin=f"file {self._source.path / name}",
            )

    def _scan(self, taken: frozenset[str]) -> list[tuple[int, str]]:
        config = self._config
        settle_ns = int(config.settle * 1e9)
        now = time.time_ns()
        found = []
        with os.scandir(self._dir_fd) as entries:
            for entry in entries:
                name = entry.name
                if name in taken or name.startswith(".") or name.endswith(_INCOMPLETE_SUFFIXES):
                    continue
                if config.pattern != "*" and not fnmatch.fnmatchcase(name, config.pattern):
                    continue
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    stat = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                # A modification time in the future is clock skew, not a writer at work.
                if 0 <= now - stat.st_mtime_ns < settle_ns:
                    continue
                if (name, stat.st_mtime_ns) in self._broken:
                    continue
                if stat.st_size > config.max_bytes:
                    if (name, stat.st_mtime_ns) not in self._broken:
                        self._broken.add((name, stat.st_mtime_ns))
                        log.error(
                            "%s is %d bytes, more than max_bytes = %d; it stays where it is",
                            self._source.path / name,
                            stat.st_size,
                            config.max_bytes,
                        )
                    continue
                found.append((stat.st_mtime_ns, name))
        found.sort()
        return found

    def _read(self, name: str) -> tuple[bytes, os.stat_result]:
        return read_regular(self._dir_fd, name, self._config.max_bytes)

    async def _ack(self, name: str, read: _Identity) -> None:
        try:
            await blocking(partial(self._finish, name, read), what="move or delete")
        except OSError as exc:
            # Kept in _taken: not read again by this process (it would be a
            # duplicate each poll); a restart reads it once more.
            log.error(
                "%s was delivered but could not be %s: %s",
                self._source.path / name,
                "moved" if self._config.after == "move" else "deleted",
                exc.strerror or exc,
            )
            return
        self._taken.discard(name)

    def _finish(self, name: str, read: _Identity) -> None:
        """Move the file that was read to ``done_dir`` (or delete it), never another one.

        The file gets its name in ``done_dir`` first (``link``: nothing there
        is replaced), checked to be the file that was read; then its name in
        the watched directory is taken (one rename to a hidden name) and,
        checked again, let go. If a writer replaced or rewrote the file after
        it was read, the new one stays (or goes back) to be read in its turn.
        A crash in between leaves the file under both names (it is read
        again: a duplicate) or under the hidden one (see :meth:`recover`).
        """
        if self._config.after == "delete":
            self._let_go(name, read)
            return
        try:
            done_fd = open_subdirectory(self._dir_fd, self._config.done_dir)
        except Refused as exc:
            raise Refused(exc.errno, f"done_dir {self._source.done}: {exc.strerror}") from None
        try:
            kept = self._move(name, read, done_fd)
        finally:
            os.close(done_fd)
        if kept is not None and kept != name:
            log.warning(
                "%s is taken (an earlier file of that name); %s is kept as %s",
                self._source.done / name,
                self._source.path / name,
                self._source.done / kept,
            )

    def _move(self, name: str, read: _Identity, done_fd: int) -> str | None:
        try:
            kept = link_into(self._dir_fd, name, done_fd, done_names(name, read[2]))
        except OSError as exc:
            if exc.errno not in NO_LINKS:
                raise
            hidden, info = take(self._dir_fd, name)  # no hard links here: rename it
            if not self._ours(name, hidden, info, read):
                return None
            return move_new(self._dir_fd, hidden, done_fd, done_names(name, read[2]))
        if _identity(os.lstat(kept, dir_fd=done_fd)) != read:
            unlink_quietly(done_fd, kept)  # the name we just gave a file written after the read
            self._changed(name, name)
            return None
        self._let_go(name, read)
        return kept

    def _let_go(self, name: str, read: _Identity) -> None:
        """Remove ``name`` from the watched directory if it is still the file that was read."""
        hidden, info = take(self._dir_fd, name)
        if self._ours(name, hidden, info, read):
            unlink_quietly(self._dir_fd, hidden)

    def _ours(self, name: str, hidden: str, info: os.stat_result, read: _Identity) -> bool:
        """True if the file taken is the one read; else it goes back to be read."""
        if _identity(info) == read:
            return True
        back = move_new(self._dir_fd, hidden, self._dir_fd, done_names(name, info.st_mtime_ns))
        self._changed(name, back)
        return False

    def _changed(self, name: str, back: str) -> None:
        log.warning(
            "%s changed after it was read; the new file stays to be read, as %s",
            self._source.path / name,
            self._source.path / back,
        )

    def recover(self) -> None:
        """Put back what a crash left under a hidden name taken from a file done with.

        A hidden file that has another name too (in ``done_dir``, as the move
        gives it one first) is only that name's duplicate: removed. One without
        is a file that was delivered but not yet deleted, or that a writer put
        in place of one: it goes back under its name, to be read (again).
        """
        with os.scandir(self._dir_fd) as entries:
            hidden = [e.name for e in entries if e.name.startswith(TAKEN_PREFIX)]
        for name in hidden:
            try:
                info = os.lstat(name, dir_fd=self._dir_fd)
            except FileNotFoundError:
                continue
            if info.st_nlink > 1:
                unlink_quietly(self._dir_fd, name)
                continue
            original = taken_name(name) or f"recovered-{name.removeprefix(TAKEN_PREFIX)}"
            back = move_new(
                self._dir_fd, name, self._dir_fd, done_names(original, info.st_mtime_ns)
            )
            log.warning(
                "%s was left by a stop in the middle of its move; it is read again as %s",
                self._source.path / name,
                self._source.path / back,
            )

    async def _nack(self, name: str, mtime_ns: int, error: BaseException | None) -> None:
        self._taken.discard(name)
        if isinstance(error, MessageRejected):
            # The sink can never take it and there is no dead-letter sink: reading it
            # again would only be rejected again. It stays until it changes.
            self._broken.add((name, mtime_ns))
            log.error(
                "%s was rejected (%s); it stays where it is",
                self._source.path / name,
                error.reason,
            )


def done_names(name: str, mtime_ns: int) -> Iterator[str]:
    """The names a file done with may take in ``done_dir``, in order of preference.

    ``NAME``; then its message id ``NAME@MTIME_NS`` (so the kept file names
    the message it was), then ``NAME@MTIME_NS-2``, ``-3``... A name that would
    pass 255 bytes loses characters from the end of ``NAME``, never the suffix.
    """
    yield name
    for n in range(1, MAX_DONE_NAMES):
        suffix = f"@{mtime_ns}" if n == 1 else f"@{mtime_ns}-{n}"
        stem = name
        while len(os.fsencode(stem + suffix)) > NAME_MAX:
            stem = stem[:-1]
        yield stem + suffix
