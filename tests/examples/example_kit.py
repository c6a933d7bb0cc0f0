"""Run an example as its header says: the ``Run:``, ``Send:`` and ``Read:`` lines, verbatim.

Every ``examples/*.toml`` starts with the same fields::

    # Run:    [VAR=value ...] bridges run examples/NAME.toml
    # Needs:  ...
    # Send:   a shell command that puts a message in
    # Read:   a shell command that shows where it came out
    # Waits:  where what it accepted waits

:class:`Example` runs them from a temporary folder of its own that holds a
link ``examples`` to the repository's folder, so the file that runs is the
one shipped, and its relative paths (``state/...``, ``inbox/``...) land in
that temporary folder. Commands find ``bridges``, ``trio-stomp`` and
``python`` first in the folder of this interpreter (the ``.venv/bin`` of the
header's ``source .venv/bin/activate``).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio
from family_kit import EXAMPLES, read_until

BIN = Path(sys.executable).parent
FIELDS = ("Run", "Needs", "Send", "Read", "Waits")


def header(name: str) -> dict[str, str]:
    """The header fields of ``examples/NAME`` (each field's first line)."""
    fields: dict[str, str] = {}
    for line in (EXAMPLES / name).read_text().splitlines():
        if not line.startswith("#"):
            break
        found = re.match(r"# (\w+):\s+(.*)$", line)
        if found and found[1] in FIELDS and found[1] not in fields:
            fields[found[1]] = found[2]
    assert tuple(fields) == FIELDS, f"{name}: the header has {list(fields)}, not {FIELDS}"
    return fields


def environment(*, venv_on_path: bool = True, **extra: str) -> dict[str, str]:
    """This environment, with the venv's commands first on PATH (or, with VENV_ON_PATH
    false, nowhere on it: ``python3`` is then not the venv's), and EXTRA."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != BIN]
    if venv_on_path:
        path.insert(0, str(BIN))
    env = {**os.environ, "PATH": os.pathsep.join(path), **extra}
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):  # the code must manage alone
        env.pop(name, None)
    return env


def last_line(output: bytes | bytearray) -> str:
    lines = bytes(output).decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


@attrs.define
class Example:
    """One example's folder, where its header's commands run."""

    name: str
    cwd: Path
    fields: dict[str, str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.fields = header(self.name)
        if not (self.cwd / "examples").exists():
            (self.cwd / "examples").symlink_to(EXAMPLES)

    def run_command(self, *, venv_on_path: bool = True) -> tuple[list[str], dict[str, str]]:
        """The Run line as argv and environment (``VAR=value`` words first)."""
        words = shlex.split(self.fields["Run"].split("  #")[0])
        extra = {}
        while "=" in words[0]:
            key, _, value = words.pop(0).partition("=")
            extra[key] = value
        return words, environment(venv_on_path=venv_on_path, **extra)

    async def sh(self, command: str, *, check: bool = True) -> str:
        """Run COMMAND with bash in the example's folder; its stdout."""
        done = await trio.run_process(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=environment(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        if check:
            assert done.returncode == 0, (command, done.stdout, done.stderr)
        return done.stdout.decode(errors="replace")

    async def send(self, token: str) -> None:
        """The Send line, with its body's word ``hello`` (the first one) made TOKEN."""
        assert "hello" in self.fields["Send"]
        await self.sh(self.fields["Send"].replace("hello", token, 1))

    async def read(self, token: str, *, resend: str | None = None) -> str:
        """Run the Read line until its output shows TOKEN; that output.

        RESEND: a Send to repeat meanwhile, for a topic, which keeps nothing
        for a subscriber that is not there yet.
        """
        async with trio.open_nursery() as nursery:
            if resend is not None:

                async def again() -> None:
                    while True:
                        await self.send(resend)
                        await trio.sleep(0.5)

                nursery.start_soon(again)
            read = self.fields["Read"]
            while token not in (shown := await self.sh(read, check=False)):  # noqa: ASYNC110 (a command)
                await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
        return shown

    async def round_trip(self, token: str) -> str:
        """Run it, Send TOKEN, Read until it shows, stop it: the stop must be clean
        (exit 0, ``bridges: stopped``). What the Read line showed."""
        async with self.running() as bridge:
            await self.send(token)
            shown = await self.read(token)
            status, last = await bridge.stop()
        assert (status, last) == (0, "bridges: stopped"), bytes(bridge.output)
        return shown

    @asynccontextmanager
    async def running(
        self, ready: bytes = b"bridges: running ", *, venv_on_path: bool = True
    ) -> AsyncIterator[Bridge]:
        """The Run line, once its stderr said READY; killed when the block ends if running.

        VENV_ON_PATH false runs ``.venv/bin/bridges`` by its path, with the venv
        nowhere on PATH, as a user who did not activate it would.
        """
        argv, env = self.run_command(venv_on_path=venv_on_path)
        assert argv[:2] == ["bridges", "run"], argv
        argv[0] = str(BIN / "bridges")
        process = await trio.lowlevel.open_process(
            argv, cwd=self.cwd, env=env, stderr=subprocess.PIPE
        )
        bridge = Bridge(process)
        try:
            assert process.stderr is not None
            with trio.fail_after(60):
                await read_until(process.stderr, bridge.output, ready)
            yield bridge
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


@attrs.define
class Bridge:
    """A running ``bridges run`` and its stderr so far."""

    process: trio.Process
    output: bytearray = attrs.Factory(bytearray)

    async def stop(self, *, within: float = 20) -> tuple[int, str]:
        """Ctrl-C (SIGINT); its exit status and last line."""
        self.process.send_signal(signal.SIGINT)
        stream = self.process.stderr
        assert stream is not None
        with trio.fail_after(within):
            while chunk := await stream.receive_some(65536):
                self.output += chunk
            status = await self.process.wait()
        return status, last_line(self.output)
