"""Reading a file the config names (a secret, a CA bundle, the config itself), safely.

Every such file is untrusted: it may be a FIFO that never delivers, a
device that never ends (``/dev/zero``), a directory, a link to something
the bridge should not read, or sit on a file system that hangs. One reader
(:func:`read_file`) serves them all, for ``bridges check``, ``bridges run``
and a reload alike:

- the file is opened without following a link (unless asked) and without
  blocking (``O_NONBLOCK``: opening a FIFO with no writer returns at once),
  and checked on the open descriptor: only a regular file is read; a FIFO,
  a device, a socket or a directory is refused by what it is, before any
  byte is read;
- at most ``limit`` bytes are read (a larger file is refused, without
  reading the rest): :data:`MAX_SECRET_BYTES` for a secret;
- the whole of it (open, checks, reads) runs in a worker thread that the
  caller waits for at most :data:`READ_TIMEOUT` s. A file system that hangs
  (a dead NFS server) holds only that thread: the caller gets an error
  naming the file, in about that time.

A thread stuck in the kernel cannot be cancelled, only abandoned. It is a
daemon thread (it cannot hold up the process's exit), it owns nothing but
the descriptor it opened (closed if the call ever returns), and its result
is thrown away. At most :data:`MAX_STUCK` may be stuck at once (file reads;
and apart, the folder checks of :func:`bridges._fs.unwritable`): while that
many are, the next is refused at once rather than starting another.
"""

from __future__ import annotations

import errno
import os
import ssl
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

import trio

from ._endpoint import Context, InvalidSetting

T = TypeVar("T")

#: The largest secret file read (``*_file`` keys, ``${credential:NAME}``), bytes.
MAX_SECRET_BYTES: Final = 64 * 1024
#: The largest CA bundle read (``ca_file``, ``cafile``), bytes.
MAX_CA_BYTES: Final = 4 * 1024 * 1024
#: The largest config file read, bytes.
MAX_CONFIG_BYTES: Final = 4 * 1024 * 1024
#: How long one file may take to open and read, s.
READ_TIMEOUT: Final = 1.0
#: Most reader threads left stuck (abandoned after their timeout) at once.
MAX_STUCK: Final = 4

_KINDS: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)

_lock = threading.Lock()
#: Threads abandoned and not yet done, per kind of work (``run_bounded``'s ``pool``):
#: file reads, and folder checks (:func:`bridges._fs.unwritable`), capped apart so
#: that slow reads never refuse a check, nor checks a read.
_stuck: dict[str, int] = {"read": 0, "check": 0}


class FileRefused(ValueError):
    """A file the config names cannot be used: the message says which and why, never
    what is in it."""


class FileMissing(FileRefused):
    """There is no such file."""


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, for an error message."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def read_file(
    path: str | os.PathLike[str],
    *,
    limit: int = MAX_SECRET_BYTES,
    follow_links: bool = False,
    dir_fd: Callable[[], int] | None = None,
    timeout: float = READ_TIMEOUT,
    what: str | None = None,
) -> bytes:
    """The content of the regular file ``path``: at most ``limit`` bytes, within ``timeout`` s.

    Args:
      follow_links: open ``path`` even when it is a symbolic link (its
        target is then checked as the file). Directories on the way are
        followed either way.
      dir_fd: opens the directory ``path`` is relative to (called in the
        worker thread, which closes what it returns), or None.
      what: how the error names the file (default: ``'PATH'``).

    Raises:
      FileRefused: naming the file and what is wrong with it: missing,
        unreadable, a link, not a regular file (saying what it is), larger
        than ``limit``, or not read within ``timeout``.
    """
    name = what if what is not None else repr(str(path))
    return run_bounded(
        lambda: _read(path, limit, follow_links, dir_fd, name), timeout=timeout, what=name
    )


def read_text(
    path: str | os.PathLike[str],
    *,
    limit: int = MAX_SECRET_BYTES,
    follow_links: bool = False,
    dir_fd: Callable[[], int] | None = None,
    timeout: float = READ_TIMEOUT,
    what: str | None = None,
) -> str:
    """:func:`read_file` as UTF-8 text, one trailing newline (``\\n`` or ``\\r\\n``) removed."""
    what = what if what is not None else repr(str(path))
    data = read_file(
        path, limit=limit, follow_links=follow_links, dir_fd=dir_fd, timeout=timeout, what=what
    )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileRefused(f"{what}: not UTF-8 text") from None
    return text.removesuffix("\n").removesuffix("\r")


def run_bounded(work: Callable[[], T], *, timeout: float, what: str, pool: str = "read") -> T:
    """``work()`` in a daemon thread, waited for at most ``timeout`` s (see the module docs).

    At most :data:`MAX_STUCK` threads of one ``pool`` (``"read"``, ``"check"``)
    may be stuck at once.

    Raises:
      FileRefused: ``work`` did not finish in time, or too many earlier
        ones are still stuck; or what ``work`` raised.
    """
    with _lock:
        if _stuck[pool] >= MAX_STUCK:
            raise FileRefused(
                f"{what}: not read: {_stuck[pool]} earlier file reads are still stuck "
                "(a file system that does not answer?)"
            )
    outcome: list[tuple[bool, object]] = []
    state = {"abandoned": False}

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as exc:
            outcome.append((False, exc))
        with _lock:
            if state["abandoned"]:
                _stuck[pool] -= 1

    thread = threading.Thread(target=run, name=f"read {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    with _lock:
        if not outcome:
            state["abandoned"] = True
            _stuck[pool] += 1
            raise FileRefused(f"{what}: not read within {timeout:g} s (a file system that hangs?)")
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def _read(
    path: str | os.PathLike[str],
    limit: int,
    follow_links: bool,
    dir_fd: Callable[[], int] | None,
    what: str,
) -> bytes:
    directory = None
    if dir_fd is not None:
        try:
            directory = dir_fd()
        except OSError as exc:
            raise FileRefused(f"{what}: cannot open its directory: {exc.strerror}") from None
    try:
        return _read_at(path, limit, follow_links, directory, what)
    finally:
        if directory is not None:
            os.close(directory)


def _read_at(
    path: str | os.PathLike[str], limit: int, follow_links: bool, dir_fd: int | None, what: str
) -> bytes:
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError as exc:
        raise FileMissing(f"{what}: {exc.strerror}") from None
    except OSError as exc:
        link = exc.errno == errno.ELOOP and not follow_links
        reason = "a symbolic link (not followed)" if link else exc.strerror
        raise FileRefused(f"{what}: {reason}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused(f"{what}: {kind_of(mode)}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileRefused(f"{what}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileRefused(f"{what}: larger than {limit} bytes")
    return b"".join(chunks)


def directory_opener(directory: str | Path) -> Callable[[], int]:
    """A ``dir_fd`` for :func:`read_file`: opens ``directory`` (following links)."""
    return lambda: os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def verifying_context(cafile: Path | None) -> ssl.SSLContext:
    """A verifying TLS client context: the system's CAs, or those of ``cafile`` (PEM).

    ``cafile`` is read by :func:`read_file` (a link is followed: a CA bundle is
    no secret), at most :data:`MAX_CA_BYTES`. Blocking (up to
    :data:`READ_TIMEOUT` s): call it at check time or in a worker thread
    (:func:`open_verifying_context`).

    Raises:
      FileRefused: ``cafile`` cannot be used, naming it and why.
    """
    if cafile is None:
        return ssl.create_default_context()
    what = f"cannot read {str(cafile)!r}"
    text = read_text(cafile, limit=MAX_CA_BYTES, follow_links=True, what=what)
    try:
        return ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise FileRefused(f"{str(cafile)!r}: not a PEM CA bundle ({exc})") from None


async def open_verifying_context(cafile: Path | None) -> ssl.SSLContext:
    """:func:`verifying_context` off the event loop (bounded by :data:`READ_TIMEOUT`)."""
    return await trio.to_thread.run_sync(verifying_context, cafile)


def checked_cafile(key: str, value: str | None, context: Context) -> Path | None:
    """The CA bundle of setting ``key`` (None: the system's), read and checked now
    when the config is being checked (``bridges check``, a load, a reload).

    Raises:
      InvalidSetting: the file cannot be used (at ``key``).
    """
    if value is None:
        return None
    path = context.path(value)
    if context.checking:
        try:
            verifying_context(path)
        except FileRefused as exc:
            raise InvalidSetting(key, str(exc)) from None
    return path


def check_file(key: str, path: Path, context: Context, limit: int = MAX_CA_BYTES) -> None:
    """Read ``path`` (setting ``key``: a TLS certificate or key file that a library
    loads itself) by :func:`read_file` when the config is being checked, so that
    ``bridges check`` refuses what the library would hang on or drown in.

    Raises:
      InvalidSetting: the file cannot be used (at ``key``).
    """
    if context.checking:
        try:
            read_file(path, limit=limit, follow_links=True, what=f"cannot read {str(path)!r}")
        except FileRefused as exc:
            raise InvalidSetting(key, str(exc)) from None
