"""The ``file`` source's JSON-lines mode: tail one file, persist the acked offset.

Each complete line (ending in a newline) is one message, its id
``NAME:OFFSET``. Acks may come in any order; the offset below which every
line is acked is persisted (temporary file, fsync, rename) after each burst
of acks, so a restart resumes after the last acked line and repeats at most
what was in flight. A nacked line is handed out again before new ones. A file
replaced (new inode) or truncated is read again from its start, once nothing
of the old one is in flight.
"""

from __future__ import annotations

import collections
import json
import logging
import os
from functools import partial
from typing import TYPE_CHECKING, BinaryIO

import attrs
import trio

from ..._message import Envelope, Message
from ._fs import atomic_write
from ._records import parse_record

if TYPE_CHECKING:
    from .source import FileSource

log = logging.getLogger("bridges.file")


class JsonlReceiver:
    """Tails one file; persists the offset below which every line is acked."""

    def __init__(self, source: FileSource) -> None:
        self._source = source
        self._config = source.config
        self._name = source.path.name
        self._file: BinaryIO | None = None
        self._inode: int | None = None
        self._read_at = 0  # where the next read starts
        self._buffer = b""
        self._lines: collections.deque[tuple[int, int, bytes]] = collections.deque()
        self._again: list[tuple[int, int, bytes]] = []  # nacked, handed out first
        # start offset -> [end offset, acked]; in offset order
        self._open: collections.OrderedDict[int, list[int | bool]] = collections.OrderedDict()
        self.committed = 0
        self._persisted: tuple[int | None, int] | None = None
        self._dirty = trio.Event()

    async def start(self) -> None:
        inode, offset = await trio.to_thread.run_sync(self._load_position)
        self._inode, self.committed = inode, offset
        self._read_at = offset
        self._persisted = (inode, offset)

    def _load_position(self) -> tuple[int | None, int]:
        try:
            data = json.loads(self._source.position.read_text(encoding="utf-8"))
            return (data.get("inode"), int(data["offset"]))
        except FileNotFoundError:
            return (None, 0)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise OSError(f"the position file {self._source.position} is unusable: {exc}") from exc

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
                    if (self._inode, self.committed) != self._persisted:
                        self._dirty.set()  # the file was replaced: start over, say so
                    if not more:
                        await trio.sleep(self._config.poll_interval)
                start, end, line = self._lines.popleft()
            envelope = self._envelope(start, end, line)
            if envelope is not None:
                return envelope

    def _envelope(self, start: int, end: int, line: bytes) -> Envelope | None:
        if start not in self._open:
            self._open[start] = [end, False]
        text = line.rstrip(b"\r")
        if not text.strip():
            self._settle(start)
            return None
        if self._config.lines == "envelope":
            try:
                message = parse_record(text)
            except ValueError as exc:
                log.error("%s at offset %d: not a record (%s); skipped", self._name, start, exc)
                self._settle(start)
                return None
            if not message.id:
                message = attrs.evolve(message, id=f"{self._name}:{start}")
        else:
            message = Message(text, {}, f"{self._name}:{start}")
        return Envelope(
            message,
            ack=partial(self._ack, start),
            nack=partial(self._nack, start, end, line),
            origin=f"file {self._source.path}:{start}",
        )

    def _read_more(self) -> bool:
        """Read what was appended; False when there was nothing (the caller waits)."""
        if self._file is None:
            try:
                self._file = open(self._source.path, "rb")  # noqa: SIM115 - kept open
            except FileNotFoundError:
                return False
            inode = os.fstat(self._file.fileno()).st_ino
            if self._inode is not None and inode != self._inode:
                log.warning("%s was replaced; reading the new file from its start", self._name)
                self._read_at = self.committed = 0
            self._inode = inode
            self._file.seek(self._read_at)
        chunk = self._file.read(256 * 1024)
        if not chunk:
            self._check_replaced()
            return False
        data = self._buffer + chunk
        offset = self._read_at - len(self._buffer)
        end = data.rfind(b"\n") + 1
        self._buffer = data[end:]
        self._read_at += len(chunk)
        pos = offset
        for line in data[:end].split(b"\n")[:-1]:
            self._lines.append((pos, pos + len(line) + 1, line))
            pos += len(line) + 1
        return True

    def _check_replaced(self) -> None:
        try:
            stat = os.stat(self._source.path)
        except FileNotFoundError:
            return
        if stat.st_ino != self._inode and not self._open and not self._lines:
            self.close()  # reopened (from offset 0) by the next read
        elif stat.st_ino == self._inode and stat.st_size < self._read_at and not self._open:
            log.warning("%s was truncated; reading it from its start", self._name)
            self._read_at = self.committed = 0
            self._buffer = b""
            if self._file is not None:
                self._file.seek(0)

    async def _ack(self, start: int) -> None:
        self._settle(start)

    async def _nack(self, start: int, end: int, line: bytes, error: BaseException | None) -> None:
        self._again.append((start, end, line))
        self._again.sort()

    def _settle(self, start: int) -> None:
        entry = self._open.get(start)
        if entry is None:
            return
        entry[1] = True
        advanced = False
        while self._open:
            first, (end, acked) = next(iter(self._open.items()))
            if not acked:
                break
            del self._open[first]
            self.committed = int(end)
            advanced = True
        if advanced:
            self._dirty.set()

    async def persist_loop(self) -> None:
        """Write the committed offset after acks: one write per burst of acks."""
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            await self.persist()

    async def persist(self) -> None:
        state = (self._inode, self.committed)
        if state != self._persisted:
            await trio.to_thread.run_sync(self._write_position, state)
            self._persisted = state

    def _write_position(self, state: tuple[int | None, int]) -> None:
        data = json.dumps({"inode": state[0], "offset": state[1]}).encode()
        atomic_write(self._source.position, data)
