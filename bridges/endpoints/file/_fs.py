"""The one durable-write recipe of the file family, and its helpers.

A file that must be whole or absent after a crash (a message in
``format = "files"``, the tail's position file) is written by
:func:`atomic_write`: a temporary name created exclusively, the data,
``fsync``, a rename over the final name, and an ``fsync`` of the directory
so that the rename itself survives a power cut.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (a write may be short)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def temporary_name(path: Path) -> Path:
    """``.NAME.tmp`` next to ``path``: a name readers of the directory skip."""
    return path.with_name(f".{path.name}.tmp")


def _create_exclusive(temporary: Path) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        return os.open(temporary, flags, 0o644)
    except FileExistsError:
        # Left by a write that was killed half-way: never renamed, so nobody's file.
        temporary.unlink(missing_ok=True)
        return os.open(temporary, flags, 0o644)


def atomic_write(path: Path, data: bytes, *, fsync: bool = True, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old file or the new, whole.

    Args:
      fsync: fsync the file before the rename (off only where the user
        chose speed over durability).
      sync_dir: fsync the directory after the rename; a caller that writes
        many files to one directory passes False and calls :func:`fsync_dir`
        once at the end.

    Raises:
      OSError: the write failed; the temporary file is gone again.
    """
    temporary = temporary_name(path)
    fd = _create_exclusive(temporary)
    try:
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    if fsync and sync_dir:
        fsync_dir(path.parent)
