"""The ``file`` sink's file-per-message mode: names, conflicts, one durable file each.

Each message becomes one file, named by the sink's ``name`` template, made
safe as one file name (no separators or control characters, no leading
dot). A name longer than 255 bytes in UTF-8 (the limit of Linux file
systems, per path component) is not cut short, where two long names could
become one: the message is rejected (dead-lettered), as is a name the file
system refuses (``EINVAL``, ``EILSEQ``...). Only errors of the disk itself
(``ENOSPC``, ``EIO``) are transient failures that the route retries.

The body goes to a fresh temporary file (unpredictable name, created
exclusively, fsynced), then takes its name according to ``conflict``, the
strategies of NiFi's PutFile plus a unique suffix:

- ``fail`` (the default): if the name exists, the message is rejected (it
  goes to the dead-letter sink) and the existing file is kept: nothing
  acknowledged is ever overwritten silently.
- ``replace``: the new file replaces the name (a link there is replaced,
  its target never touched).
- ``ignore``: the existing file is kept and the message counts as written.
- ``rename``: the file is written as ``STEM-1.EXT``, ``STEM-2.EXT``... (the
  first free name).

A name that already holds exactly the message's bytes is not a conflict:
that is the same message delivered again (at-least-once), and nothing more
is written. The no-replace cases use ``link`` (it fails if the name exists,
whatever it is), so a file that appears at the last moment is never lost.
The directory is fsynced once per batch.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Final

from ..._blocking import Worker
from ..._endpoint import MessageRejected
from ..._fs import NAME_MAX, link_new, rename, same_content, unlink_quietly, write_temporary
from ..._message import Message
from ..._template import Template, TemplateError, safe_filename

log = logging.getLogger("bridges.file")

#: The most ``-N`` suffixes ``conflict = "rename"`` tries.
MAX_RENAMES: Final = 10_000
#: Errors of a name that no retry will cure: the message is rejected.
_BAD_NAME: Final = frozenset(
    {
        errno.ENAMETOOLONG,
        errno.EINVAL,
        errno.EILSEQ,
        errno.EISDIR,
        errno.ENOTDIR,
        errno.EEXIST,
        errno.ENOTEMPTY,
    }
)


class _Rejected(Exception):
    """One message of the batch cannot be written; why."""


class FilesWriter:
    """Writes a batch as one file per message in the directory ``dir_fd``."""

    def __init__(
        self, own: Worker, dir_fd: int, name: Template, conflict: str, *, fsync: bool
    ) -> None:
        #: The sink's thread, where each batch is written.
        self._own = own
        self._dir_fd = dir_fd
        self._name = name
        self._conflict = conflict
        self._fsync = fsync
        #: Messages the last write found written already (their name holds their bytes).
        self.skipped = 0

    async def write(self, batch: Sequence[Message]) -> None:
        files: list[tuple[int, str, bytes]] = []
        bad: list[int] = []
        reasons: list[str] = []
        for index, message in enumerate(batch):
            try:
                files.append((index, file_name(self._name, message), message.body))
            except (TemplateError, _Rejected) as exc:
                bad.append(index)
                reasons.append(str(exc))
        rejected = await self._own.run(partial(self._write, files))
        for index, reason in rejected:
            bad.append(index)
            reasons.append(reason)
        if bad:
            raise MessageRejected.each(dict(zip(bad, reasons, strict=True)))

    def _write(self, files: list[tuple[int, str, bytes]]) -> list[tuple[int, str]]:
        """Write every file; return the (index, reason) of those rejected."""
        rejected = []
        self.skipped = 0
        for index, name, body in files:
            try:
                self.skipped += not self._write_one(name, body)
            except _Rejected as exc:
                rejected.append((index, str(exc)))
            except OSError as exc:
                if exc.errno not in _BAD_NAME:
                    raise
                rejected.append((index, f"cannot write {name!r}: {exc.strerror or exc}"))
        if self._fsync and len(rejected) < len(files):
            os.fsync(self._dir_fd)
        return rejected

    def _write_one(self, name: str, body: bytes) -> bool:
        """Write one file; False when its name already held exactly ``body``."""
        dir_fd = self._dir_fd
        temporary = write_temporary(dir_fd, body, fsync=self._fsync)
        try:
            if self._conflict == "replace":
                rename(dir_fd, temporary, dir_fd, name)
                return True
            for candidate in _candidates(name, self._conflict == "rename"):
                if link_new(dir_fd, temporary, candidate):
                    return True
                if same_content(dir_fd, candidate, body):
                    return False  # this message, delivered again: written already
                if self._conflict == "ignore":
                    log.info("%s exists; message not written (conflict = ignore)", name)
                    return True
            if self._conflict == "fail":
                raise _Rejected(f"{name!r} exists with other content (conflict = fail)")
            raise _Rejected(f"no free name for {name!r} (conflict = rename)")
        finally:
            unlink_quietly(dir_fd, temporary)


def file_name(template: Template, message: Message) -> str:
    """The message's file name: the template, made one safe name of at most 255 bytes.

    Raises:
      TemplateError: the template cannot be rendered (a missing header).
      _Rejected: the name is longer than 255 bytes in UTF-8.
    """
    rendered = template.render(message)
    name = safe_filename(rendered, limit=len(rendered) + 1)
    size = len(os.fsencode(name))
    if size > NAME_MAX:
        raise _Rejected(
            f"a file name of {size} bytes in UTF-8, more than the limit of {NAME_MAX} "
            f"({name[:32]!r}...)"
        )
    return name


def _candidates(name: str, renaming: bool) -> Iterator[str]:
    """``NAME``; with ``renaming``, then ``STEM-1.EXT``, ``STEM-2.EXT``... while they fit."""
    yield name
    if not renaming:
        return
    stem, dot, ext = name.rpartition(".")
    if not stem:  # no extension
        stem, dot, ext = name, "", ""
    for n in range(1, MAX_RENAMES + 1):
        candidate = f"{stem}-{n}{dot}{ext}"
        if len(os.fsencode(candidate)) > NAME_MAX:
            return
        yield candidate
