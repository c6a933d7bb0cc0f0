"""A real systemd to test units under: Debian bookworm booted with systemd-nspawn.

This machine's PID 1 need not be systemd (CI containers' is not), so the
unit runs in a container of its own:

- :func:`base_tree` debootstraps a minimal bookworm with systemd, dbus and
  python3 (with venv) once, into :data:`CACHE` (about 300 MB, 35-90 s), and
  reuses it while its stamp matches; a half-made tree is never used (it is
  made under a temporary name and renamed when complete).
- :func:`booted` copies that tree (about 1 s), boots it with ``systemd-nspawn
  -b --private-network`` (its own network namespace: only a loopback of its
  own, so nothing it listens on reaches this machine's ports), waits for
  ``systemctl is-system-running --wait``, and yields a :class:`Container`
  whose :meth:`Container.run` runs a command inside through ``nsenter``.
  Whatever happens in the block (a failure, Ctrl-C, SIGTERM), the container
  is powered off, waited for, killed if it does not stop, and its copy removed;
  if this process dies without cleaning up, nspawn gets SIGTERM from the
  kernel (``PR_SET_PDEATHSIG``), which powers the container off.

Needs root, ``systemd-nspawn`` (Debian's systemd-container) and
``debootstrap``; ``scripts/test`` installs both when missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

#: Where the debootstrapped base tree is kept between runs.
CACHE: Final = Path(os.environ.get("TRIO_STOMP_NSPAWN_CACHE", "/var/cache/trio-stomp"))
SUITE: Final = "bookworm"
PACKAGES: Final = ("systemd", "systemd-sysv", "dbus", "python3", "python3-venv")
MIRROR: Final = "http://deb.debian.org/debian"
#: The environment of commands run inside: none of this machine's (pip's settings...).
INSIDE_ENV: Final = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_PR_SET_PDEATHSIG: Final = 1


class ContainerError(Exception):
    """The container could not be made, booted or driven (not a finding about the unit)."""


def missing_tools() -> list[str]:
    """What is missing to boot a container here (empty when nothing is)."""
    missing = [
        tool for tool in ("systemd-nspawn", "debootstrap", "nsenter") if not shutil.which(tool)
    ]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def _stamp() -> str:
    return f"{SUITE} minbase {','.join(PACKAGES)}\n"


def base_tree(say: Callable[[str], None] = print) -> tuple[Path, float]:
    """The cached base tree, made first if missing; and the seconds spent making it (0 if cached).

    Raises:
      ContainerError: debootstrap failed (its output's tail is in the message).
    """
    CACHE.mkdir(parents=True, exist_ok=True)
    tree = CACHE / f"{SUITE}-systemd"
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run making it: wait for it
        stamp = tree / ".trio-stomp-stamp"
        if stamp.is_file() and stamp.read_text() == _stamp():
            return tree, 0.0
        say(f"debootstrap {SUITE} into {tree} (once; cached)")
        started = time.monotonic()
        partial = Path(tempfile.mkdtemp(prefix=f"{SUITE}-systemd.", dir=CACHE))
        partial.chmod(0o755)  # the container's /: mkdtemp's 0700 would lock out its users
        try:
            command = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}"]
            _debootstrap([*command, SUITE, str(partial), MIRROR])
            (partial / ".trio-stomp-stamp").write_text(_stamp())
            if tree.exists():
                shutil.rmtree(tree)
            partial.rename(tree)
        finally:
            if partial.exists():
                _remove(partial)
        return tree, time.monotonic() - started


def _debootstrap(command: list[str]) -> None:
    """Run debootstrap; stopped with SIGTERM (its traps unmount what it mounted), never SIGKILL."""
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        try:
            status = process.wait(timeout=900)
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=120)
        if status != 0:
            output.seek(0)
            tail = "\n".join(output.read().decode(errors="replace").splitlines()[-15:])
            raise ContainerError(f"debootstrap failed ({status}):\n{tail}")


def _remove(path: Path) -> None:
    """``rm -rf path``, unless something is mounted under it (a /dev bound in): then say so."""
    if _mounted_under(path):
        raise ContainerError(f"{path} still has mounts; left in place")
    shutil.rmtree(path, ignore_errors=True)


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Container:
    """A booted container: :attr:`root` is its tree as seen from here; :attr:`pid` its PID 1."""

    def __init__(self, root: Path, nspawn: subprocess.Popen[bytes]) -> None:
        self.root = root
        self.nspawn = nspawn
        self.pid = 0

    def run(
        self, *command: str, check: bool = True, timeout: float = 120.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``command`` inside the container (all its namespaces, its root), with output captured.

        Raises:
          ContainerError: ``check`` and the command failed (its output in the message).
        """
        done = subprocess.run(
            ["nsenter", "-t", str(self.pid), "-a", *command],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=INSIDE_ENV,
            input=input,
            check=False,
        )
        if check and done.returncode != 0:
            raise ContainerError(
                f"{' '.join(command)}: exit {done.returncode}\n{done.stdout}{done.stderr}"
            )
        return done

    def show(self, unit: str, prop: str) -> str:
        """``systemctl show -p PROP --value UNIT``."""
        return self.run("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()

    def find_init(self, deadline: float) -> None:
        children = Path(f"/proc/{self.nspawn.pid}/task/{self.nspawn.pid}/children")
        while time.monotonic() < deadline:
            if self.nspawn.poll() is not None:
                raise ContainerError(f"systemd-nspawn exited with {self.nspawn.returncode}")
            with contextlib.suppress(OSError):
                for pid in children.read_text().split():
                    if Path(f"/proc/{pid}/exe").resolve().name == "systemd":
                        self.pid = int(pid)
                        return
            time.sleep(0.1)
        raise ContainerError("the container's systemd did not start")

    def wait_booted(self, deadline: float) -> str:
        self.find_init(deadline)
        state = ""
        while time.monotonic() < deadline:
            # Until dbus and the manager are up, systemctl fails at once: try again.
            left = max(1.0, deadline - time.monotonic())
            done = self.run("systemctl", "is-system-running", "--wait", check=False, timeout=left)
            state = done.stdout.strip()
            if state in ("running", "degraded"):
                return state
            time.sleep(0.2)
        raise ContainerError(f"the container did not finish booting (state {state!r})")

    def poweroff(self, timeout: float = 60.0) -> None:
        """Stop the container: ``systemctl poweroff``, then SIGTERM, then SIGKILL to nspawn."""
        if self.nspawn.poll() is not None:
            return
        if self.pid:
            # What `systemctl poweroff` asks for, straight from the manager (not through logind).
            poweroff = ("systemctl", "start", "--no-block", "--job-mode=replace-irreversibly")
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.run(*poweroff, "poweroff.target", check=False, timeout=10)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                self.nspawn.wait(timeout=timeout)
                return
            except subprocess.TimeoutExpired:
                self.nspawn.send_signal(sig)  # SIGTERM: nspawn asks the container to power off
        self.nspawn.wait(timeout=timeout)


def _mounted_under(path: Path) -> bool:
    prefix = str(path) + "/"
    with open("/proc/self/mounts") as mounts:
        return any(
            (line.split()[1] + "/").startswith(prefix) for line in mounts if len(line.split()) > 1
        )


@contextlib.contextmanager
def booted(
    base: Path, extra: Sequence[str] = (), boot_timeout: float = 180.0, log: Path | None = None
) -> Iterator[Container]:
    """A copy of ``base`` booted with systemd-nspawn, powered off and removed after the block.

    ``extra``: more systemd-nspawn options. The console goes to ``log`` (or nowhere).

    Raises:
      ContainerError: it did not boot within ``boot_timeout`` s.
    """
    work = Path(tempfile.mkdtemp(prefix="trio-stomp-nspawn."))
    root = work / "tree"
    try:
        subprocess.run(["cp", "-a", "--reflink=auto", str(base), str(root)], check=True)
        with log.open("ab") if log else open(os.devnull, "wb") as console:
            nspawn = subprocess.Popen(
                [
                    "systemd-nspawn",
                    "--quiet",
                    "--directory",
                    str(root),
                    "--machine",
                    f"trio-stomp-{os.getpid()}",
                    "--register=no",
                    "--keep-unit",
                    "--private-network",
                    "--console=pipe",
                    *extra,
                    "--boot",
                ],
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=console,
                start_new_session=True,  # Ctrl-C reaches this process, which powers it off
                preexec_fn=_die_with_parent,
            )
        container = Container(root, nspawn)
        try:
            container.wait_booted(time.monotonic() + boot_timeout)
            yield container
        finally:
            container.poweroff()
    finally:
        _remove(work)
