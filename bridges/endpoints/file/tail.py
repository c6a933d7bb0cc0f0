"""The ``file`` source's JSON-lines mode: tail one file, persist the acked offset.

Each complete line (ending in a newline) is one message, its id
``ROUTE/NAME:OFFSET`` (ROUTE: the route's name); once the file was replaced
or truncated (read again from its start), ``ROUTE/NAME#GEN:OFFSET``, GEN
counting those starts over (kept in the position file): the new file's lines
must not take the ids of the old one's, or a de-duplicating sink would skip
them as repeats. Acks may come in any order; the offset below which every
line is acked is persisted (temporary file, fsync, rename) after each burst
of acks, with the offsets of the lines acked beyond it (at most the in-
flight window), by :class:`bridges.Positions`, so a restart resumes after
the last acked line, skips those acked out of order, and repeats only what
was in flight: an ack is final. A nacked line is handed out again before new
ones. A file replaced (new inode) or truncated is read again from its start,
once nothing of the old one is in flight.

The file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and must be a regular
file (``path`` names the file itself, not a link to it); a link or a FIFO
found there is logged and waited out like a missing file, never followed
or blocked on. The position file is read the same way (a link there is
refused: an error) and replaced by a fresh temporary file, never written
through. A line longer than ``max_line`` bytes is skipped as it streams past
(logged with its offset and length): memory stays bounded by ``max_line``
plus one read. It goes to the dead-letter sink (its first ``max_line``
bytes, the reason naming its length and the limit), as does a line that is
not a record (``lines = "envelope"``); without a dead-letter sink both are
skipped, logged.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal, Protocol

import attrs
import trio

from ..._fs import Refused, open_directory, open_regular
from ..._message import ACKED, OPEN, Envelope, Message, UnreadableEnvelope
from ..._positions import Extra, Positions
from ._records import parse_record

log = logging.getLogger("bridges.file")

#: One read of the tailed file, bytes.
READ_SIZE: Final = 256 * 1024


class TailSettings(Protocol):
    """The settings of the ``file`` source that the JSON-lines mode reads."""

    @property
    def lines(self) -> Literal["raw", "envelope"]: ...
    @property
    def max_line(self) -> int: ...
    @property
    def poll_interval(self) -> float: ...


class Tailed(Protocol):
    """What the JSON-lines mode tails (the ``file`` source is one): a file and its position."""

    @property
    def path(self) -> Path: ...
    @property
    def position(self) -> Path: ...
    @property
    def config(self) -> TailSettings: ...
    @property
    def namespace(self) -> str: ...


class JsonlReceiver:
    """Tails one file; persists the offset below which every line is acked."""

    def __init__(self, source: Tailed) -> None:
        self._source = source
        self._config = source.config
        self._name = source.path.name
        self._file: BinaryIO | None = None
        self._inode: int | None = None
        self._read_at = 0  # where the next read starts
        self._buffer = b""
        # (start, first max_line bytes) of an over-long line being skipped
        self._skipping: tuple[int, bytes] | None = None
        self._refused = False  # logged that the path is not a regular file
        self._lines: collections.deque[tuple[int, int, bytes]] = collections.deque()
        self._again: list[tuple[int, int, bytes]] = []  # nacked, handed out first
        #: The offset below which every line is acked, saved in the position file
        #: with the file's inode and generation.
        self.positions = Positions(source.position)
        #: How many times the file was replaced or truncated: part of each line's id.
        self.generation = 0
        self._id_prefix = f"{source.namespace}{self._name}:"

    def _started_over(self) -> None:
        """The file is read again from its start: its lines are new messages."""
        self.generation += 1
        self._id_prefix = f"{self._source.namespace}{self._name}#{self.generation}:"

    async def start(self) -> None:
        positions = self.positions
        await positions.restore()
        inode, generation = positions.extra.get("inode"), positions.extra.get("generation", 0)
        self._inode = inode if isinstance(inode, int) else None
        self._read_at = positions.committed
        if isinstance(generation, int) and generation:
            self.generation = generation - 1
            self._started_over()
        self._note_file()

    def _note_file(self) -> None:
        """Keep the file's inode and generation with the position (saved with it)."""
        extra: dict[str, Extra] = {"inode": self._inode, "generation": self.generation}
        if self.positions.extra != extra:
            self.positions.extra = extra
            self.positions.changed()

    async def persist_loop(self) -> None:
        """Write the position after acks: one write per burst of acks."""
        await self.positions.save_loop()

    async def persist(self) -> None:
        """Write the position now, if it changed."""
        await self.positions.save()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    async def receive(self) -> Envelope:
        while True:
            if self._again:
                start, end, line = self._again.pop(0)
            else:
                while not self._lines:
                    more = await trio.to_thread.run_sync(self._read_more)
                    self._note_file()  # the file was replaced: start over, say so
                    if not more:
                        await trio.sleep(self._config.poll_interval)
                start, end, line = self._lines.popleft()
            envelope = self._envelope(start, end, line)
            if envelope is not None:
                return envelope

    def _envelope(self, start: int, end: int, line: bytes) -> Envelope | None:
        if not self.positions.take(start, end):  # acked before the restart
            return None
        error: ValueError | None = None
        text = line.rstrip(b"\r")
        if end - start > self._config.max_line:
            error = ValueError(
                f"a line of {end - start} bytes, more than max_line = {self._config.max_line} "
                f"(the dead letter holds its first {len(line)})"
            )
            log.warning("%s at offset %d: %s; skipped", self._name, start, error)
            message = Message(line, {}, f"{self._id_prefix}{start}")
        elif not text.strip():
            self.positions.ack(start)
            return None
        elif self._config.lines == "envelope":
            try:
                message = parse_record(text)
            except ValueError as exc:
                error = ValueError(f"not a record ({exc})")
                log.error("%s at offset %d: %s; skipped", self._name, start, error)
                message = Message(text, {}, f"{self._id_prefix}{start}")
            if not message.id:
                message = attrs.evolve(message, id=f"{self._id_prefix}{start}")
        else:
            message = Message(text, {}, f"{self._id_prefix}{start}")
        ack = partial(self._ack, start)
        nack = partial(self._nack, start, end, line, error is not None)
        origin = f"file {self._source.path}:{start}"
        if error is not None:
            return UnreadableEnvelope(message, ack=ack, nack=nack, origin=origin, error=error)
        return _LineEnvelope(message, start, self.positions, ack=ack, nack=nack, origin=origin)

    def _open_file(self) -> bool:
        path = self._source.path
        try:
            dir_fd = open_directory(path.parent)
            try:
                fd, info = open_regular(dir_fd, path.name)
            finally:
                os.close(dir_fd)
        except FileNotFoundError:
            return False
        except Refused as exc:
            if not self._refused:
                self._refused = True
                log.error("%s is %s; waiting for a regular file there", path, exc.strerror)
            return False
        self._refused = False
        self._file = os.fdopen(fd, "rb")
        if self._inode is not None and info.st_ino != self._inode:
            log.warning("%s was replaced; reading the new file from its start", self._name)
            self._started_over()
            self._read_at = 0
            self.positions.reset()
            self._buffer, self._skipping = b"", None  # (the old file's unfinished last line)
        self._inode = info.st_ino
        self._file.seek(self._read_at)
        return True

    def _read_more(self) -> bool:
        """Read what was appended; False when there was nothing (the caller waits)."""
        if self._file is None and not self._open_file():
            return False
        assert self._file is not None
        chunk = self._file.read(READ_SIZE)
        if not chunk:
            self._check_replaced()
            return False
        offset = self._read_at - len(self._buffer)
        self._read_at += len(chunk)
        if self._skipping is not None:
            newline = chunk.find(b"\n")
            if newline < 0:
                return True
            end = offset + newline + 1
            start, prefix = self._skipping
            self._lines.append((start, end, prefix))
            self._skipping = None
            chunk = chunk[newline + 1 :]
            offset = end
        self._split(self._buffer + chunk, offset)
        return True

    def _split(self, data: bytes, offset: int) -> None:
        """Queue the complete lines of ``data`` (starting at ``offset``); keep the rest."""
        limit = self._config.max_line
        end = data.rfind(b"\n") + 1
        pos = offset
        for line in data[:end].split(b"\n")[:-1]:
            size = len(line) + 1
            self._lines.append((pos, pos + size, line if size <= limit else line[:limit]))
            pos += size
        if len(data) - end > limit:  # an unterminated line past the limit: stop holding it
            self._buffer = b""
            self._skipping = (pos, data[end : end + limit])
        else:
            self._buffer = data[end:]

    def _check_replaced(self) -> None:
        try:
            stat = os.lstat(self._source.path)
        except FileNotFoundError:
            return
        idle = not self.positions.in_flight
        if stat.st_ino != self._inode and idle and not self._lines:
            self.close()  # reopened (from offset 0) by the next read
        elif stat.st_ino == self._inode and stat.st_size < self._read_at and idle:
            log.warning("%s was truncated; reading it from its start", self._name)
            self._started_over()
            self._read_at = 0
            self.positions.reset()
            self._buffer = b""
            self._skipping = None
            if self._file is not None:
                self._file.seek(0)

    async def _ack(self, start: int) -> None:
        self.positions.ack(start)
        await self.positions.saved()  # the slot is freed once the ack is on disk

    async def _nack(
        self, start: int, end: int, line: bytes, unreadable: bool, error: BaseException | None
    ) -> None:
        if unreadable and error is not None:
            self.positions.ack(start)  # no dead-letter sink took it: skipped (logged already)
            return
        self._again.append((start, end, line))  # (still open: the position waits for it)
        self._again.sort()


class _LineEnvelope(Envelope):
    """A line of one tailed file: a run of them is acked with one save of the position."""

    __slots__ = ("settle_key", "start")

    def __init__(self, message: Message, start: int, positions: Positions, **settle: Any) -> None:
        super().__init__(message, **settle)
        self.start = start
        self.settle_key: object = positions

    async def ack_all(self, envelopes: Sequence[Envelope]) -> None:
        positions = self.settle_key
        assert isinstance(positions, Positions)
        for envelope in envelopes:
            if envelope.state is OPEN and isinstance(envelope, _LineEnvelope):
                envelope.state = ACKED
                positions.ack(envelope.start)
        await positions.saved()
