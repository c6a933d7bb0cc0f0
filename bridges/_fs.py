"""File-system operations that nothing planted in a directory can subvert.

Used by the file family and by :class:`bridges.Positions`.

Every byte under the bridge's directories is untrusted: whoever may drop a
file into an inbox may also drop a symbolic link, a FIFO or a device, or
swap one in between our scan and our open. So, inside a directory whose
descriptor we hold (the configured directory itself is the operator's and
is opened normally):

- files are opened with ``O_NOFOLLOW | O_NONBLOCK`` relative to that
  descriptor and checked on the opened descriptor (``fstat``: a regular
  file, within a size limit) before one byte is read: a link is never
  followed, a FIFO never blocks the open;
- new files are created under unpredictable names (``.bridge-<random>.tmp``)
  with ``O_CREAT | O_EXCL | O_NOFOLLOW``, so a link planted in advance can
  neither be guessed nor written through, and a stale temporary file is
  simply never reused;
- a file reaches its final name by ``rename`` (which replaces the *name*,
  never a link's target) or, where an existing file must not be replaced, by
  ``link`` (which fails if the name exists, whatever it is), both relative to
  the directory descriptors; a file done with is first taken from its name
  (:func:`take`) and checked to be the one that was read, then given its
  name in ``done/`` the second way (:func:`move_new`), a new one when its
  own is taken;
- a subdirectory (``done/``) is opened component by component with
  ``O_NOFOLLOW``: a link planted in its place is refused.

A file that must be whole or absent after a crash (a message in
``format = "files"``, the tail's position file) is written by
:func:`atomic_write`: a fresh temporary file, the data, ``fsync``, a rename
over the final name, and an ``fsync`` of the directory so that the rename
itself survives a power cut.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from ._readfile import FileRefused, run_bounded

#: How every file the family creates starts and ends: hidden, skipped by the
#: directory source, and never a name a message can have (those never start
#: with a dot).
TEMP_PREFIX = ".bridge-"
TEMP_SUFFIX = ".tmp"

#: The longest file name, in bytes (NAME_MAX on Linux, per path component).
NAME_MAX: Final = 255
#: How a name the directory source took from a file it is done with starts (:func:`take`).
TAKEN_PREFIX = ".bridge-taken-"
#: Errors of ``link`` that mean "this file system has no hard links".
NO_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK})

#: How long checking that a configured folder can be written (``statvfs``, ``access``) may
#: take, s: a network mount that does not answer fails the check, naming the folder.
WRITABLE_TIMEOUT: Final = 2.0
_NO_ANSWER: Final = "the file system did not answer"

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(OSError):
    """What is at a name is not something we may read or write: a link, a FIFO, too big."""


def open_directory(path: Path) -> int:
    """A descriptor of a configured directory (the operator's path: links there are theirs)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_subdirectory(dir_fd: int, relative: str) -> int:
    """A descriptor of ``relative`` under ``dir_fd``, refusing a link at any component.

    Raises:
      Refused: a component is a symbolic link or not a directory.
      OSError: it does not exist, or cannot be opened.
    """
    fd = os.dup(dir_fd)
    try:
        for part in Path(relative).parts:
            try:
                child = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(
                        exc.errno, f"{part!r} is a symbolic link or not a directory (refused)"
                    ) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(dir_fd: int, name: str, flags: int = _READ_FLAGS) -> tuple[int, os.stat_result]:
    """Open ``name`` in ``dir_fd`` without following a link or blocking; a regular file only.

    Returns:
      the descriptor (the caller closes it) and its ``fstat``.

    Raises:
      Refused: a symbolic link, or not a regular file (FIFO, device, directory).
      OSError: it cannot be opened (FileNotFoundError: it is gone).
    """
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(errno.ELOOP, "a symbolic link (not followed)") from None
        if exc.errno == errno.ENXIO:  # a FIFO opened for writing with no reader, a socket
            raise Refused(errno.ENXIO, "not a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(errno.EINVAL, "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_regular(dir_fd: int, name: str, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``name`` (at most ``limit``), checked on its descriptor.

    Raises:
      Refused: a link, not a regular file, or more than ``limit`` bytes
        (checked by ``fstat`` and again while reading, for a file still growing).
    """
    fd, info = open_regular(dir_fd, name)
    try:
        if info.st_size > limit:
            raise Refused(errno.EFBIG, f"{info.st_size} bytes, more than max_bytes = {limit}")
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise Refused(errno.EFBIG, f"more than max_bytes = {limit} bytes (still growing)")
        return data, info
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (a write may be short)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def create_temporary(dir_fd: int, flags: int = 0) -> tuple[str, int]:
    """A new file under an unpredictable hidden name in ``dir_fd``: (name, write descriptor)."""
    while True:
        name = f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}"
        try:
            return name, os.open(name, _CREATE_FLAGS | flags, 0o644, dir_fd=dir_fd)
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue


def write_temporary(dir_fd: int, data: bytes, *, fsync: bool = True) -> str:
    """``data`` in a new temporary file of ``dir_fd`` (fsynced unless told); its name.

    Raises:
      OSError: the write failed; the temporary file is gone again.
    """
    name, fd = create_temporary(dir_fd)
    try:
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        unlink_quietly(dir_fd, name)
        raise
    return name


def unlink_quietly(dir_fd: int, name: str) -> None:
    """Remove ``name`` (a link itself, never its target); gone already is fine."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def rename(dir_fd: int, name: str, new_dir_fd: int, new_name: str) -> None:
    """Rename within or across directory descriptors, replacing a name (never a link's target)."""
    os.rename(name, new_name, src_dir_fd=dir_fd, dst_dir_fd=new_dir_fd)


def link_new(dir_fd: int, temporary: str, name: str) -> bool:
    """Give the file ``temporary`` the name ``name`` unless that name exists; drop ``temporary``.

    ``link`` fails when the name exists, whatever it is (a file, a link, a
    FIFO): the no-replace rename. On a file system without hard links it
    falls back to check-then-rename (which a concurrent writer could race).

    Returns:
      True if ``name`` is now the new file; False if the name was taken
      (``temporary`` is kept: the caller decides what to do with it).
    """
    try:
        os.link(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in NO_LINKS:
            raise
        return _rename_if_free(dir_fd, temporary, dir_fd, name)
    unlink_quietly(dir_fd, temporary)
    return True


def _rename_if_free(dir_fd: int, name: str, new_dir_fd: int, new_name: str) -> bool:
    """Without hard links: rename ``name`` to ``new_name`` unless that exists (check,
    then rename, which a concurrent writer could race). True if it was renamed."""
    try:
        os.lstat(new_name, dir_fd=new_dir_fd)
    except FileNotFoundError:
        rename(dir_fd, name, new_dir_fd, new_name)
        return True
    return False


def take(dir_fd: int, name: str) -> tuple[str, os.stat_result]:
    """Take whatever is at ``name`` away from it: rename it to a hidden name in ``dir_fd``.

    One ``rename``: the name is taken atomically, whatever a writer does to it
    at the same moment, so the caller can check on the taken file (``lstat``,
    never followed) that it is the one it read before letting it go. The
    hidden name (``.bridge-taken-<random>-NAME``, ``NAME`` left out if it
    would not fit) keeps the name for :func:`taken_name`, should a crash
    leave it there.

    Returns:
      the hidden name and its ``lstat``.

    Raises:
      OSError: the rename failed (FileNotFoundError: ``name`` is gone).
    """
    hidden = f"{TAKEN_PREFIX}{secrets.token_hex(4)}-{name}"
    if len(os.fsencode(hidden)) > NAME_MAX:
        hidden = f"{TAKEN_PREFIX}{secrets.token_hex(4)}"
    rename(dir_fd, name, dir_fd, hidden)
    return hidden, os.lstat(hidden, dir_fd=dir_fd)


def taken_name(hidden: str) -> str | None:
    """The name a file had before :func:`take` hid it, if the hidden name holds it."""
    rest = hidden.removeprefix(TAKEN_PREFIX)
    return rest[9:] if len(rest) > 9 and rest[8] == "-" else None


def link_into(dir_fd: int, name: str, new_dir_fd: int, candidates: Iterable[str]) -> str:
    """Give the file at ``name`` a second name in ``new_dir_fd``, the first free candidate.

    Nothing at a candidate is ever replaced or followed: ``link`` fails if
    the name exists, whatever it is (a file, a link planted there, a FIFO).
    A candidate that already is this very file (same device and inode: a
    move that a crash cut short) is taken as it is.

    Returns:
      the candidate that now names the file.

    Raises:
      FileExistsError: every candidate was taken.
      OSError: ``name`` is gone, or the file system has no hard links
        (``errno`` in :data:`NO_LINKS`).
    """
    for candidate in candidates:
        if _link_or_same(dir_fd, name, new_dir_fd, candidate):
            return candidate
    raise FileExistsError(errno.EEXIST, f"no free name for {name!r}")


def move_new(dir_fd: int, name: str, new_dir_fd: int, candidates: Iterable[str]) -> str:
    """Move ``name`` into ``new_dir_fd`` under the first of ``candidates`` that is free.

    As :func:`link_into`, then ``name`` is removed. On a file system without
    hard links it falls back to check-then-rename (which a concurrent writer
    could race).

    Returns:
      the candidate that ``name`` now has in ``new_dir_fd``.

    Raises:
      FileExistsError: every candidate was taken.
      OSError: the move failed (FileNotFoundError: ``name`` is gone).
    """
    for candidate in candidates:
        try:
            if not _link_or_same(dir_fd, name, new_dir_fd, candidate):
                continue
        except OSError as exc:
            if exc.errno not in NO_LINKS:
                raise
            if _rename_if_free(dir_fd, name, new_dir_fd, candidate):
                return candidate
            continue
        unlink_quietly(dir_fd, name)
        return candidate
    raise FileExistsError(errno.EEXIST, f"no free name for {name!r}")


def _link_or_same(dir_fd: int, name: str, new_dir_fd: int, candidate: str) -> bool:
    """True if ``candidate`` now names the file at ``name`` (linked, or it did already)."""
    try:
        os.link(name, candidate, src_dir_fd=dir_fd, dst_dir_fd=new_dir_fd, follow_symlinks=False)
    except FileExistsError:
        return _same_file(dir_fd, name, new_dir_fd, candidate)
    return True


def _same_file(dir_fd: int, name: str, other_dir_fd: int, other: str) -> bool:
    """True if both names are links of one file (neither followed)."""
    try:
        a = os.lstat(name, dir_fd=dir_fd)
        b = os.lstat(other, dir_fd=other_dir_fd)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def same_content(dir_fd: int, name: str, data: bytes) -> bool:
    """True if ``name`` is a regular file holding exactly ``data`` (a link never is)."""
    try:
        fd, info = open_regular(dir_fd, name)
    except OSError:
        return False
    try:
        if info.st_size != len(data):
            return False
        view = memoryview(data)
        while view:
            chunk = os.read(fd, min(len(view), 1024 * 1024))
            if not chunk or chunk != view[: len(chunk)]:
                return False
            view = view[len(chunk) :]
        return os.read(fd, 1) == b""
    finally:
        os.close(fd)


def atomic_write(
    directory: Path, name: str, data: bytes, *, fsync: bool = True, sync_dir: bool = True
) -> None:
    """Replace ``directory/name`` with ``data``: a crash leaves the old file or the new, whole.

    A link planted at ``name`` is replaced (never written through); the
    temporary name is unpredictable and created exclusively.

    Args:
      fsync: fsync the file before the rename (off only where the user
        chose speed over durability).
      sync_dir: fsync the directory after the rename.

    Raises:
      OSError: the write failed; the temporary file is gone again.
    """
    dir_fd = open_directory(directory)
    try:
        temporary = write_temporary(dir_fd, data, fsync=fsync)
        try:
            rename(dir_fd, temporary, dir_fd, name)
        except BaseException:
            unlink_quietly(dir_fd, temporary)
            raise
        if fsync and sync_dir:
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def unwritable(path: Path, *, timeout: float | None = None) -> tuple[Path, str] | None:
    """The nearest existing folder at or above ``path`` and why this process could
    never write there (a read-only file system, or no permission), else None.

    Under systemd's ``ProtectSystem=strict`` every path outside the unit's
    state directory (and its ``ReadWritePaths=``) is on a read-only file
    system, and the unit's dynamic user owns nothing else: ``bridges check``
    (the unit's ``ExecStartPre``, run as that user) refuses such a path, rather
    than the route retrying "Read-only file system" or "Permission denied" for ever.

    The checks run in a worker thread waited for at most ``timeout`` s
    (default :data:`WRITABLE_TIMEOUT`; as :func:`~bridges._readfile.run_bounded`
    reads a file): ``statvfs`` of a network mount that does not answer
    hangs in the kernel, and ``bridges run`` checks its config before its
    event loop starts, where nothing else would bound it. Past the timeout
    the thread is abandoned and the folder is reported as one that did not
    answer.
    """
    limit = WRITABLE_TIMEOUT if timeout is None else timeout
    looking = [path]
    try:
        return run_bounded(
            lambda: _unwritable(path, looking), timeout=limit, what=f"checking {path}", pool="check"
        )
    except FileRefused as exc:
        if "still stuck" in str(exc):  # (run_bounded refused at once: MAX_STUCK)
            return looking[-1], f"{_NO_ANSWER}: earlier checks there are still stuck"
        return looking[-1], f"{_NO_ANSWER} within {limit:g} s (WRITABLE_TIMEOUT)"


def _unwritable(path: Path, looking: list[Path]) -> tuple[Path, str] | None:
    for folder in (path, *path.parents):
        looking.append(folder)
        try:
            flags = os.statvfs(folder).f_flag
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:  # cannot tell (no permission to look): the route will say
            return None
        if flags & os.ST_RDONLY:
            return folder, "read-only file system"
        if not os.access(folder, os.W_OK | os.X_OK):
            return folder, f"no permission to write (user {os.geteuid()})"
        return None
    return None


def unwritable_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written (see :func:`unwritable`), or None."""
    found = unwritable(path)
    if found is None:
        return None
    folder, why = found
    if why.startswith(_NO_ANSWER):
        return (
            f"{path} cannot be checked: {why} at {folder} (statvfs or access hung there: "
            "a network mount that is down?)"
        )
    return (
        f"{path} cannot be written: {why} in {folder}; under systemd (ProtectSystem=strict, "
        "DynamicUser=) a path outside the unit's state directory needs ReadWritePaths= "
        "(`bridges unit --paths CONFIG` prints the drop-in) and write permission "
        "(docs: Run under systemd, Paths outside the state directory)"
    )
