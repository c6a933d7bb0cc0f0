"""What the endpoint families' tests share: servers, ``bridges run`` and the crash bench.

Every family (mqtt, redis, nats, amqp, ...) keeps only what is its own in
``<family>_servers.py``: the URL of the shared server, how to probe it, and how
to start a private one. The rest is here, once:

- :func:`unavailable`: skip (locally) or fail (CI, ``STOMP_REQUIRE_BROKERS=1``);
  CI never silently skips.
- :func:`require_server`: the shared server's URL, or :func:`unavailable`.
- :class:`PrivateServer` and :func:`private_server`: a server process of the
  test's own on a free port, that a test may stop and restart.
- :func:`bridges_command`, :func:`bridges_run`, :func:`stop_bridge`,
  :func:`stomp_round_trip` and :func:`check_round_trip`: an ``examples/*.toml``
  through ``bridges run``.
- :func:`crash_run`: a small run of a ``bench/crash/`` crash script, with the
  assertions every crash test makes.
- :data:`POISON_MIXES`, :data:`POISON_SETTINGS` and :func:`poison_run`: the
  Sink contract's poison rule over batches Hypothesis draws, for every sink.

It lives beside ``tests/conftest.py`` so that every test folder imports it as
``family_kit``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import trio_stomp
from bridges import Message
from bridges._cli import main as cli_main
from bridges.testing import FakeSink, PoisonOutcome, SinkFactory, check_poison

REQUIRE = os.environ.get("STOMP_REQUIRE_BROKERS") == "1"
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
BENCH = ROOT / "bench" / "crash"

#: A probe answers None when a server speaks its protocol at (host, port), or why not.
Probe = Callable[[str, int], "str | None"]


def unavailable(reason: str) -> NoReturn:
    """Skip (locally) or fail (CI) for REASON."""
    if REQUIRE:
        pytest.fail(f"STOMP_REQUIRE_BROKERS=1 but {reason}")
    pytest.skip(reason)


def host_port(url: str) -> str:
    """``host:port`` of URL (credentials and path dropped)."""
    return url.split("//", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]


def require_server(url: str, default_port: int, probe: Probe) -> str:
    """URL, once PROBE says its server is up; skip (locally) or fail (CI) when it is not."""
    host, _, port = host_port(url).partition(":")
    reason = probe(host, int(port or default_port))
    if reason is not None:
        unavailable(reason)
    return url


def require_programs(*paths: str) -> None:
    """Skip (locally) or fail (CI) when one of the server programs is not installed."""
    for path in paths:
        if not os.access(path, os.X_OK):
            name = Path(path).name
            unavailable(f"{name} is not installed (scripts/brokers up installs it)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateServer:
    """A server process of the test's own on ``self.port``, that a test may restart.

    A family's subclass says how to start it (:meth:`command`, which may write
    a configuration into ``self.directory``) and how to tell it is up
    (:meth:`probe`). :meth:`stop` sends SIGTERM (the servers save their state
    and exit), then SIGKILL after 10 s.
    """

    #: The programs :func:`private_server` requires (skip or fail without them).
    programs: tuple[str, ...] = ()

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self._process: trio.Process | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def probe(self, host: str, port: int) -> str | None:
        raise NotImplementedError

    async def start(self) -> None:
        self._process = await trio.lowlevel.open_process(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        with trio.fail_after(10):
            while self.probe("127.0.0.1", self.port) is not None:  # noqa: ASYNC110 (a process)
                await trio.sleep(0.02)

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.terminate()
            with trio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()

    async def restart(self, down: float = 0.3) -> None:
        await self.stop()
        await trio.sleep(down)
        await self.start()


ServerT = TypeVar("ServerT", bound=PrivateServer)


@asynccontextmanager
async def private_server(kind: type[ServerT], directory: Path) -> AsyncIterator[ServerT]:
    """A private server for one test, stopped (and reaped) when the block ends."""
    require_programs(*kind.programs)
    server = kind(directory)
    try:
        await server.start()
        yield server
    finally:
        with trio.CancelScope(shield=True):
            await server.stop()


# --- an example through `bridges run` ---------------------------------------------------------

#: Binary bodies (NUL, 0xff, CR, LF) that a round trip must carry unchanged.
BODIES = [bytes([i, 0, 255, 10, 13]) * (i + 1) for i in range(20)]


def bridges_command() -> list[str]:
    script = Path(sys.executable).with_name("bridges")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bridges._cli"]


async def read_until(stream: Any, buffer: bytearray, needle: bytes) -> None:
    while needle not in buffer:
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise AssertionError(f"bridges ended before saying {needle!r}: {bytes(buffer)!r}")
        buffer += chunk


@asynccontextmanager
async def bridges_run(
    config: Path, ready: bytes = b"", **options: Any
) -> AsyncIterator[tuple[trio.Process, bytearray]]:
    """``bridges run CONFIG`` in CONFIG's folder, once its stderr has said READY.

    Yields the process and its stderr so far; the process is killed (and
    reaped) when the block ends if it is still running.
    """
    process = await trio.lowlevel.open_process(
        [*bridges_command(), "run", str(config)],
        cwd=config.parent,
        stderr=subprocess.PIPE,
        **options,
    )
    output = bytearray()
    try:
        assert process.stderr is not None
        if ready:
            await read_until(process.stderr, output, ready)
        yield process, output
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def stop_bridge(process: trio.Process, output: bytearray) -> None:
    """Ctrl-C: ``bridges run`` must stop cleanly (status 0) within 15 s."""
    process.send_signal(signal.SIGINT)
    with trio.fail_after(15):
        status = await process.wait()
    assert status == 0, bytes(output)


async def stomp_round_trip(
    port: int,
    family: str,
    headers: Callable[[int], Mapping[str, str]],
    *,
    receipt_each: bool = False,
    extra: Sequence[tuple[bytes, Mapping[str, str]]] = (),
) -> list[trio_stomp.Message]:
    """:data:`BODIES` to ``/queue/to-FAMILY`` on PORT, and as many back from ``/queue/from-FAMILY``.

    HEADERS gives message I's headers; EXTRA messages are sent after them
    (each with a receipt) and not waited for.
    """
    got: list[trio_stomp.Message] = []
    async with trio_stomp.connect(f"stomp://127.0.0.1:{port}") as client:
        for i, body in enumerate(BODIES):
            receipt = receipt_each or i == len(BODIES) - 1
            await client.send(f"/queue/to-{family}", body, headers=headers(i), receipt=receipt)
        for body, more in extra:
            await client.send(f"/queue/to-{family}", body, headers=more, receipt=True)
        async with client.subscribe(f"/queue/from-{family}", ack="client-individual") as sub:
            async for message in sub:
                await message.ack()
                got.append(message)
                if len(got) == len(BODIES):
                    break
    return got


def check_round_trip(got: Sequence[trio_stomp.Message]) -> dict[int, trio_stomp.Message]:
    """Every body of :data:`BODIES` came back once, unchanged, each with its own bridge-id.

    Returns the messages by their ``n`` header.
    """
    by_n = {int(m.headers["n"]): m for m in got}
    assert sorted(by_n) == list(range(len(BODIES)))
    for i, body in enumerate(BODIES):
        assert by_n[i].body == body
        assert by_n[i].headers["note"] == "caf\u00e9"
    assert len({m.headers["bridge-id"] for m in got}) == len(BODIES)  # the STOMP id, carried round
    assert all(m.headers["bridge-id"] for m in got)
    return by_n


async def example_round_trip(
    tmp_path: Path,
    example: str,
    replacements: Sequence[tuple[str, str]],
    port: int,
    family: str,
    headers: Callable[[int], Mapping[str, str]],
    *,
    before_stop: Callable[[], Awaitable[None]] | None = None,
    **options: Any,
) -> dict[int, trio_stomp.Message]:
    """``examples/EXAMPLE`` (with REPLACEMENTS made in order) through ``bridges run``.

    The example's STOMP side listens on PORT: :func:`stomp_round_trip` sends
    :data:`BODIES` to ``/queue/to-FAMILY`` and takes them back (OPTIONS go to
    it); BEFORE_STOP runs while the bridge still does; then the bridge must
    stop cleanly, and :func:`check_round_trip` checks what came back (and
    returns it).
    """
    text = (EXAMPLES / example).read_text()
    for old, new in replacements:
        text = text.replace(old, new)
    config = tmp_path / "bridge.toml"
    config.write_text(text)
    ready = f"it comes back on /queue/from-{family}".encode()
    async with bridges_run(config, ready) as (process, output):
        got = await stomp_round_trip(port, family, headers, **options)
        if before_stop is not None:
            await before_stop()
        await stop_bridge(process, output)
    return check_round_trip(got)


# --- endpoint tests in process ---------------------------------------------------------------


def written(sink: FakeSink) -> list[Message]:
    """Every message a :class:`bridges.testing.FakeSink` was given, in order."""
    return [message for batch in sink.batches for message in batch]


def check_says(
    capsys: pytest.CaptureFixture[str],
    config: Path,
    says: str,
    secret: str,
    bad: tuple[str, str],
    bad_says: str,
) -> None:
    """``bridges check CONFIG`` passes and SAYS so; with BAD (old, new) made, it fails (2)
    and BAD_SAYS; neither says SECRET."""
    assert cli_main(["check", str(config)]) == 0
    err = capsys.readouterr().err
    assert says in err
    assert secret not in err
    config.write_text(config.read_text().replace(*bad))
    assert cli_main(["check", str(config)]) == 2
    err = capsys.readouterr().err
    assert bad_says in err
    assert secret not in err


# --- a small run of a crash bench -------------------------------------------------------------


def run_script(command: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """COMMAND (a bench script) to its end, its output captured; at most TIMEOUT s.

    A run that stalls fails the test with what it said so far: its last
    ``phase:`` line (``bench/crash/_crash.py`` says each step on stderr),
    its stdout (one JSON line per scenario done) and the tail of its
    stderr. The script runs in its own process group, killed whole on the
    timeout, so no ``bridges`` or private server it started outlives it.
    Output goes to files, not pipes: nothing blocks on a full pipe.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        said = []
        for file in (out, err):
            file.seek(0)
            said.append(file.read().decode(errors="replace"))
    stdout, stderr = said
    if process.returncode == -signal.SIGKILL:
        phases = [line for line in stderr.splitlines() if line.startswith("phase: ")]
        last = phases[-1].removeprefix("phase: ") if phases else "none said"
        pytest.fail(
            f"{Path(command[1]).name} stalled: not done within {timeout:g} s; "
            f"the last phase: {last}\n--- stdout so far:\n{stdout}"
            f"--- stderr so far (its tail):\n{stderr[-4000:]}",
            pytrace=False,
        )
    return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)


def crash_run(
    script: str, scenarios: Sequence[str], count: int, seed: int, *, timeout: float = 120
) -> list[dict[str, Any]]:
    """``bench/crash/SCRIPT`` for SCENARIOS: COUNT messages, one SIGKILL; the results, as JSON.

    Asserts what every crash test asserts: each scenario ran, no error,
    nothing missing, every message arrived, duplicates within the in-flight
    bound, the last run stopped cleanly, and the script exited 0. A run
    that takes over TIMEOUT s fails saying what it said so far and which
    phase stalled (:func:`run_script`).
    """
    command = [sys.executable, str(BENCH / script), "--count", str(count), "--kills", "1"]
    command += ["--seed", str(seed), "--only", ",".join(scenarios), "--json"]
    done = run_script(command, timeout)
    results = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [r.get("scenario") for r in results] == list(scenarios), done.stdout + done.stderr
    for result in results:
        assert "error" not in result, result
        assert result["missing"] == 0, result
        assert result["arrived"] == count, result
        assert result["duplicates"] <= result["bound"], result
        assert result["exit_status"] == 0, result
    assert done.returncode == 0
    return results


def target_crash_run(
    rows: Sequence[str],
    servers: Sequence[str],
    count: int = 300,
    seed: int = 31,
    *,
    open_loss: bool = False,
) -> list[dict[str, Any]]:
    """``bench/crash/target_crash.py`` for ROWS: COUNT messages, the server SIGKILLed once.

    The server on the other side of the bridge (``scripts/brokers kill NAME``,
    then ``start NAME``, data kept; or the script's own private server) is the
    one killed, not the bridge. Asserts what the script checks for a durable
    row: every message acknowledged upstream, none of them lost, duplicates
    within the bound, a clean stop. The shared SERVERS are started again
    afterwards whatever happens, so the tests after this one find them up.

    ``open_loss``: the target has a documented loss of what it receipted
    just before the kill (RabbitMQ 3.10.8, a queue created by the SEND moments
    before: delivery-guarantees.md, "What RabbitMQ's STOMP plugin does"); every
    lost message must then be one acknowledged before the kill, and anything
    acknowledged after it must be there.
    """
    command = [sys.executable, str(BENCH / "target_crash.py"), "--count", str(count)]
    command += ["--kills", "1", "--rate", "100", "--seed", str(seed)]
    command += ["--only", ",".join(rows), "--json"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    finally:
        brokers = ROOT / "scripts" / "brokers"
        for name in servers:
            status = subprocess.run([brokers, "status", name], capture_output=True, check=False)
            if status.returncode != 0:
                subprocess.run([brokers, "start", name], capture_output=True, check=False)
    results = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [r.get("scenario") for r in results] == list(rows), done.stdout + done.stderr
    for result in results:
        assert "error" not in result, result
        assert result["acked"] == count, result
        if result["direction"] == "target":
            # (what was acked before the kill is known, and none of it is missing)
            assert result["acked_before_kill"] > 0, result
            if not open_loss:
                assert result["lost_acked_before_kill"] == 0, result
        if open_loss:
            assert result["lost"] == result["lost_acked_before_kill"], result
        else:
            assert result["lost"] == 0, result
        assert result["duplicates"] <= result["bound"], result
        assert result["exit_status"] == 0, result
    if not (open_loss and any(result["lost"] for result in results)):
        assert done.returncode == 0
    return results


# --- the poison rule over drawn batches ------------------------------------------------------

#: A batch for :func:`bridges.testing.check_poison`: None a good message, N the Nth
#: hostile one (the sink's own poison, then ``bridges.testing.HOSTILE``, modulo).
POISON_MIXES = st.lists(st.none() | st.integers(0, 99), min_size=1, max_size=16)
#: Few examples: each is a batch through a real route against a real server.
POISON_SETTINGS = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def poison_run(factory: SinkFactory, mix: Sequence[int | None]) -> PoisonOutcome:
    """The poison rule for MIX, in a Trio run of its own (bounded by the rule itself)."""
    return trio.run(check_poison, factory, mix)
