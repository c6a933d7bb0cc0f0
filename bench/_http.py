"""A server process the http benches start, with its log, and the wait until it answers.

Used by ``bench/speed/http_throughput.py`` and ``bench/crash/http_flood.py``
(through their harnesses, which re-export it). httpx and trio are imported
where they are used: a measurement child that imports the harness starts clean.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from _base import BenchError

#: How long a started server may take to answer, s.
START_LIMIT: Final = 30.0


@contextmanager
def child(command: list[str], work: Path, name: str) -> Iterator[subprocess.Popen[bytes]]:
    """COMMAND run in WORK for the block, its output in WORK/NAME.log; then SIGTERM (SIGKILL)."""
    log = (work / f"{name}.log").open("wb")
    process = subprocess.Popen(command, cwd=work, stdout=log, stderr=log)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


async def wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    """Until URL answers 200, 204 or 404; BenchError if PROCESS ends or START_LIMIT passes first."""
    import httpx
    import trio

    deadline = trio.current_time() + START_LIMIT
    async with httpx.AsyncClient(trust_env=False) as client:
        while True:
            try:
                response = await client.get(url)
                if response.status_code in (200, 204, 404):
                    return
            except httpx.TransportError:
                pass
            if process.poll() is not None or trio.current_time() > deadline:
                raise BenchError(f"{url} did not come up")
            await trio.sleep(0.05)
