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
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import attrs

#: The answer file's name in ``$RUNTIME_DIRECTORY``.
ANSWER_NAME: Final = "reload"
#: How long ``bridges reload --wait`` waits for an answer by default, s: the
#: longest a reload reads its config (10 s) plus a route's shutdown (10 s by
#: default), with room to spare, and less than systemd's default timeout (90 s).
WAIT_TIMEOUT: Final = 60.0
#: How often the answer file is read while waiting, s.
POLL_INTERVAL: Final = 0.05


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
    """The answer in ``path``; None when there is none (yet) or it is not one."""
    try:
        with open(path, encoding="utf-8") as file:  # (a small file on a tmpfs)
            data = json.load(file)
        return Answer(
            pid=int(data["pid"]),
            reloads=int(data["reloads"]),
            ok=bool(data["ok"]),
            refused=bool(data.get("refused", False)),
            note=str(data.get("note", "")),
        )
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
      WaitFailed: no such process, it ended first, or no answer within ``timeout``.
    """
    before = read_answer(path)
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
