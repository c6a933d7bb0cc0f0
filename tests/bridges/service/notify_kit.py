"""Test helpers: a real ``NOTIFY_SOCKET`` and a real ``bridges run`` process."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from family_kit import bridges_command

from bridges.testing import wait_until


class NotifySocket:
    """A datagram socket in the abstract namespace that records what is sent to it."""

    def __init__(self) -> None:
        self.name = f"@bridges-test-{uuid.uuid4().hex}"
        self.sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.messages: list[tuple[float, dict[str, str]]] = []
        self.changed = trio.Event()

    async def bind(self) -> None:
        await self.sock.bind(b"\0" + self.name[1:].encode())

    async def run(self) -> None:
        while True:
            data = await self.sock.recv(65536)
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.messages.append((trio.current_time(), fields))
            self.changed.set()
            self.changed = trio.Event()

    async def wait_for(
        self, test: Callable[[dict[str, str]], bool], after: int = 0
    ) -> dict[str, str]:
        """The first message from the ``after``-th on (received or coming) that passes ``test``."""
        seen = after
        while True:
            for _, fields in self.messages[seen:]:
                if test(fields):
                    return fields
            seen = len(self.messages)
            await self.changed.wait()

    def statuses(self) -> list[str]:
        return [f["STATUS"] for _, f in self.messages if "STATUS" in f]

    def text(self) -> str:
        return "\n".join(repr(fields) for _, fields in self.messages)


@asynccontextmanager
async def running_bridge(
    config: Path,
    env: Mapping[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> AsyncIterator[tuple[Any, NotifySocket, bytearray]]:
    """``bridges run CONFIG`` with a NOTIFY_SOCKET; yields (process, socket, its stderr so far).

    The process is killed if the block leaves it running.
    """
    notify = NotifySocket()
    await notify.bind()
    output = bytearray()
    environ = {**os.environ, "NOTIFY_SOCKET": notify.name, **(env or {})}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(notify.run)
        process = await trio.lowlevel.open_process(
            [*bridges_command(), "run", *args, str(config)],
            cwd=config.parent,
            env=environ,
            stderr=subprocess.PIPE,
        )

        async def read() -> None:
            assert process.stderr is not None
            while chunk := await process.stderr.receive_some(65536):
                output.extend(chunk)

        nursery.start_soon(read)
        try:
            yield process, notify, output
        finally:
            if process.returncode is None:
                process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
            nursery.cancel_scope.cancel()
            notify.sock.close()


async def http_url(output: bytearray) -> str:
    pattern = re.compile(rb"serving /metrics, /healthz and /readyz on (http://[0-9.:]+)")
    await wait_until(lambda: pattern.search(output) is not None, 0.02)
    found = pattern.search(output)
    assert found is not None
    return found.group(1).decode()


def metric(text: str, name: str, route: str) -> float:
    found = re.search(rf'^{name}{{route="{route}"}} (\S+)$', text, re.MULTILINE)
    assert found is not None, f"{name} for {route} not in:\n{text}"
    return float(found.group(1))


def drop(path: Path, text: str) -> None:
    """Put a file in a watched directory whole, as writers should (a rename).

    A file written in place can be read half written by a source with
    ``settle = 0``, which then reads it again once rewritten: two messages.
    """
    staging = path.parent / f".{path.name}.tmp"
    staging.write_text(text)
    staging.rename(path)
