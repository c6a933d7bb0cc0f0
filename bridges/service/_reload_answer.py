"""How a reload's outcome reaches ``systemctl reload``: ``bridges reload --wait``.

systemd 252 has no ``Type=notify-reload``: its ``ExecReload`` is a command, and
``systemctl reload`` succeeds when that command does. A plain ``kill -HUP``
succeeds at once, so a config that the process then refuses still shows as
"Reloaded". ``bridges reload --wait PID`` closes that gap:

1. it reads the answer file (see below) to learn how many reloads the process
   has finished so far;
2. it sends SIGHUP to PID;
3. it waits until the answer file names PID with one more finished reload,
   and exits 0 if that reload was applied, :data:`~bridges._cli.EXIT_CONFIG`
   (2) if the new config was refused, and 1 if the reload failed otherwise,
   no answer came within the timeout, or PID ended first.

The answer file is ``$RUNTIME_DIRECTORY/reload``: a small JSON object
(``pid``, ``reloads``, ``ok``, ``refused``, ``note``) that ``bridges run``
replaces atomically after each reload, when ``$RUNTIME_DIRECTORY`` is set.
The unit sets it (``RuntimeDirectory=bridges/%i``: a folder of the
service's own, mode 0700, removed at stop) for both ``ExecStart`` and
``ExecReload``, which therefore agree on the path without any configuration.

The folder is the service's own, but its answer file is read as untrusted
all the same (:func:`bridges._fs.open_regular`): a symbolic link is not
followed, a FIFO or a device does not block the open and is refused, and at
most :data:`MAX_ANSWER` bytes are read. Anything else at that name ends the
wait at once, by name, with exit 1 (before the SIGHUP when it is there
already), rather than a hang or a read without end.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import attrs

from .._fs import Refused, open_directory, open_regular

#: The answer file's name in ``$RUNTIME_DIRECTORY``.
ANSWER_NAME: Final = "reload"
#: How long ``bridges reload --wait`` waits for an answer by default, s: the
#: longest a reload reads its config (10 s) plus a route's shutdown (10 s by
#: default), with room to spare, and less than systemd's default timeout (90 s).
WAIT_TIMEOUT: Final = 60.0
#: How often the answer file is read while waiting, s.
POLL_INTERVAL: Final = 0.05
#: The largest answer file read, bytes (what ``bridges run`` writes is well under 1 KiB).
MAX_ANSWER: Final = 64 * 1024


@attrs.frozen
class Answer:
    """What the answer file says: the latest finished reload of process ``pid``."""

    pid: int
    #: Reloads finished (applied or not) since the process started.
    reloads: int
    ok: bool
    #: True when the new config was refused (its problems are in ``note``).
    refused: bool = False
    #: Why it was not applied ('' when it was).
    note: str = ""


def answer_path(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The answer file, in the first folder of ``$RUNTIME_DIRECTORY``, or None."""
    folder = environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    return Path(folder) / ANSWER_NAME if folder else None


def write_answer(path: Path, answer: Answer) -> None:
    """Replace the answer file atomically (a new, unpredictable name, then rename)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(attrs.asdict(answer), file)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def read_answer(path: Path) -> Answer | None:
    """The answer in ``path``; None when there is none (yet) or it is not one.

    Raises:
      WaitFailed: something else is at ``path``: a symbolic link, not a
        regular file (a FIFO, a device), or more than :data:`MAX_ANSWER` bytes.
    """
    try:
        dir_fd = open_directory(path.parent)
        try:
            fd, info = open_regular(dir_fd, path.name)
        finally:
            os.close(dir_fd)
        try:
            if info.st_size > MAX_ANSWER:
                raise Refused(errno.EFBIG, f"{info.st_size} bytes, more than {MAX_ANSWER}")
            text = os.read(fd, MAX_ANSWER + 1)
        finally:
            os.close(fd)
        if len(text) > MAX_ANSWER:
            raise Refused(errno.EFBIG, f"more than {MAX_ANSWER} bytes (still growing)")
        data = json.loads(text)
        return Answer(
            pid=int(data["pid"]),
            reloads=int(data["reloads"]),
            ok=bool(data["ok"]),
            refused=bool(data.get("refused", False)),
            note=str(data.get("note", "")),
        )
    except Refused as exc:
        raise WaitFailed(f"{path}: cannot read: {exc.strerror}") from None
    except (OSError, ValueError, KeyError, TypeError):
        return None


class WaitFailed(Exception):
    """No answer for the reload: the message says why."""


def signal_and_wait(
    pid: int,
    path: Path,
    timeout: float = WAIT_TIMEOUT,
    *,
    kill: Callable[[int, int], None] = os.kill,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Answer:
    """Send SIGHUP to ``pid`` and return the answer of the reload it started.

    A plain, blocking function: ``bridges reload`` is a short-lived command
    with nothing else to do (no event loop).

    Raises:
      WaitFailed: no such process, it ended first, no answer within
        ``timeout``, or something other than an answer file is at ``path``
        (see :func:`read_answer`).
    """
    try:
        before = read_answer(path)
    except WaitFailed as exc:
        raise WaitFailed(f"{exc} (no SIGHUP sent)") from None
    done = before.reloads if before is not None and before.pid == pid else 0
    try:
        kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        raise WaitFailed(f"no process {pid}") from None
    deadline = clock() + timeout
    while True:
        answer = read_answer(path)
        if answer is not None and answer.pid == pid and answer.reloads > done:
            return answer
        try:
            kill(pid, 0)
        except ProcessLookupError:
            raise WaitFailed(f"process {pid} ended before its reload finished") from None
        if clock() >= deadline:
            raise WaitFailed(f"no answer from process {pid} within {timeout:g} s (in {path})")
        sleep(POLL_INTERVAL)
