"""Spark test kit: one real SparkSession (local[2]) for the whole run, a broker per module.

Starting a session costs about 3 s, so every Spark test shares one. Spark or
Java failing to start fails the tests (never a skip): CI must see it. Test
modules import the fixtures ``spark`` and ``broker`` by their function names:
``from spark_kit import broker_fixture, spark_fixture``.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_stomp


def java_home() -> str:
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not installed: scripts/test installs Debian's JRE 17")
    return str(Path(java).resolve().parent.parent)


@functools.cache
def spark_session() -> Any:
    """The one SparkSession of the test run (local[2]), with ``stomp`` registered.

    Test modules import the :func:`spark` fixture; a session-scoped fixture
    imported into several modules would be set up once per module, so the
    session itself is made once here and stopped at exit.
    """
    os.environ.setdefault("JAVA_HOME", java_home())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import bridges.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("bridges-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    bridges.spark.register(session)
    atexit.register(session.stop)
    return session


@pytest.fixture(name="spark")
def spark_fixture() -> Any:
    return spark_session()


class BrokerProcess:
    """``trio-stomp broker`` in a subprocess, on a free loopback port."""

    def __init__(self, data_dir: Path | None = None) -> None:
        command = [sys.executable, "-m", "trio_stomp.cli", "broker", "--listen", "127.0.0.1:0"]
        if data_dir is not None:
            command += ["--data-dir", str(data_dir)]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE)
        assert self.process.stderr is not None
        seen = b""
        while not (found := re.search(rb"listening on (stomp://[\d.:]+)", seen)):
            line = self.process.stderr.readline()
            if not line:
                raise RuntimeError(f"the broker did not start: {seen.decode(errors='replace')}")
            seen += line
        self.url = found[1].decode()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture(name="broker", scope="module")
def broker_fixture() -> Iterator[BrokerProcess]:
    process = BrokerProcess()
    try:
        yield process
    finally:
        process.stop()


def send(
    url: str,
    destination: str,
    bodies: Sequence[bytes],
    headers: dict[str, str] | None = None,
    bridge_ids: str | None = None,
) -> None:
    """Send ``bodies`` to ``destination``, the last with a receipt; with ``bridge_ids``,
    message i carries ``bridge-id: {bridge_ids}-{i}`` (one id per message: the embedded
    broker drops a repeated bridge-id within its duplicate window)."""

    async def main() -> None:
        async with trio_stomp.connect(url) as client:
            for index, body in enumerate(bodies):
                sent = dict(headers or {})
                if bridge_ids is not None:
                    sent["bridge-id"] = f"{bridge_ids}-{index}"
                await client.send(destination, body, headers=sent, receipt=index == len(bodies) - 1)

    trio.run(main)


def drain(url: str, destination: str, count: int, timeout: float = 60.0) -> list[Any]:
    """Receive (and ack) ``count`` messages from ``destination``; fewer when it times out."""
    received: list[Any] = []

    async def main() -> None:
        async with trio_stomp.connect(url) as client:
            async with client.subscribe(destination, ack="client-individual") as subscription:
                with trio.move_on_after(timeout):
                    async for message in subscription:
                        received.append(message)
                        await message.ack()
                        if len(received) >= count:
                            break

    trio.run(main)
    return received


def wait_for(predicate: Callable[[], bool], timeout: float, poll: float = 0.1) -> None:
    """Wait until ``predicate()`` holds; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s: {predicate}")
        time.sleep(poll)
