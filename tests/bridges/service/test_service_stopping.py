"""Secrets are never printed, and a bridge stops on time whatever its broker does (issue 11 §5).

The stopping tests run ``bridges run`` as a process against a *frozen*
broker: a loopback server that answers CONNECT, then reads every frame and
answers nothing (no RECEIPT, no heart-beat), as a broker that hangs would.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio
from family_kit import bridges_command, read_until

from bridges import Context, Message, default_registry, load_config, run_bridge
from bridges._cli import main
from bridges.service import STOP_NOW_WITHIN, Stopped
from bridges.testing import wait_until

SECRET = "s3cr/et:@%2F?#pw"  # characters a URL parser and a regex both trip on
SECRET_QUOTED = "s3cr%2Fet%3A%40%252F%3F%23pw"


def secret_parts() -> list[str]:
    return ["s3cr", "%2Fet", "123456789", SECRET, SECRET_QUOTED]


def assert_no_secret(text: str) -> None:
    for part in secret_parts():
        assert part not in text, text


# -- secrets -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sink",
    [
        'url = "stomp://127.0.0.1:1", login = "u", passcode = 123456789',
        'url = "stomp://127.0.0.1:1", login = "u", passcode = ["s3cr/et:@%2F?#pw"]',
        'url = "stomp://127.0.0.1:1", login = "u", passcode = { value = "s3cr/et:@%2F?#pw" }',
        f'url = "stomp://u:{SECRET_QUOTED}@127.0.0.1:1"',
        f'url = "stomp://u:{SECRET_QUOTED}@127.0.0.1:notaport"',
        f'url = "stomp://u:{SECRET}@127.0.0.1:1"',
        f'url = ["stomp://127.0.0.1:1", "stomp://u:{SECRET_QUOTED}@[::1"]',
    ],
)
def test_bridges_check_never_prints_a_passcode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sink: str
) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(
        "[routes.r]\n"
        'source = { type = "file", path = "in" }\n'
        f'sink = {{ type = "stomp", destination = "/queue/x", {sink} }}\n'
    )
    status = main(["check", str(config)])
    out = capsys.readouterr()
    assert_no_secret(out.out + out.err)
    if "passcode =" in sink:
        assert status == 2
        assert "passcode" in out.err  # the key is named, its value is not


@pytest.mark.parametrize(
    "sink",
    [
        'type = "redis", stream = "s", url = "redis://u:PASS@127.0.0.1:PORT/0"',
        'type = "amqp", exchange = "", routing_key = "q", url = "amqp://u:PASS@127.0.0.1:PORT/"',
        'type = "nats", subject = "s", url = "nats://u:PASS@127.0.0.1:PORT"',
        'type = "mqtt", topic = "t", url = "mqtt://u:PASS@127.0.0.1:PORT"',
        'type = "http", url = "https://u:PASS@example.com:PORT/hook"',
    ],
)
@pytest.mark.parametrize("port", ["1234", "notaport"])
def test_bridges_check_never_prints_a_password_of_any_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sink: str, port: str
) -> None:
    config = tmp_path / "bridge.toml"
    sink = sink.replace("PASS", SECRET_QUOTED).replace("PORT", port)
    config.write_text(
        f'[routes.r]\nsource = {{ type = "file", path = "in" }}\nsink = {{ {sink} }}\n'
    )
    status = main(["check", str(config)])
    out = capsys.readouterr()
    assert_no_secret(out.out + out.err)
    assert status == (0 if port == "1234" else 2), out.err


@pytest.mark.deadline(20)
async def test_logs_of_a_running_bridge_never_print_a_passcode(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there: connecting fails, and is logged
    path = tmp_path / "bridge.toml"
    path.write_text(
        "[routes.r]\n"
        f'source = {{ type = "stomp", url = "stomp://u:{SECRET_QUOTED}@127.0.0.1:{port}", '
        'destination = "/queue/in" }\n'
        f'sink = {{ type = "stomp", url = "stomp://127.0.0.1:{port}", login = "u", '
        f'passcode = "{SECRET}", destination = "/queue/x" }}\n'
        'dead_letter = { type = "file", path = "dead" }\n'
    )
    config = load_config(path, default_registry(plugins=False))
    said: list[str] = []
    with caplog.at_level(logging.DEBUG):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(run_bridge, config, default_registry(plugins=False), say=said.append)
            )
            await trio.sleep(1.5)
            nursery.cancel_scope.cancel()
    assert "route 'r' failed" in caplog.text  # it did try, and said so
    assert_no_secret(caplog.text + "\n".join(said))


# -- stopping with a frozen broker ------------------------------------------------------------


@asynccontextmanager
async def frozen_broker() -> AsyncIterator[tuple[int, trio.Event]]:
    """A broker that answers CONNECT and then nothing; the event is set at the first SEND."""
    sent = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        data = b""
        while b"\0" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        await stream.send_all(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\0")
        data = data.partition(b"\0")[2]
        while True:
            if b"SEND" in data:
                sent.set()
            data = await stream.receive_some(65536)
            if not data:
                await trio.sleep_forever()  # frozen: not even a close

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1], sent
        nursery.cancel_scope.cancel()


def write_config(tmp_path: Path, port: int, shutdown_timeout: float) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(
        f"[bridge]\nshutdown_timeout = {shutdown_timeout}\n\n"
        "[routes.r]\n"
        'source = { type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }\n'
        f'sink = {{ type = "stomp", url = "stomp://127.0.0.1:{port}", login = "u", '
        f'passcode = "{SECRET}", destination = "/queue/x", heartbeat = [0, 0] }}\n'
    )
    (tmp_path / "inbox").mkdir()
    for i in range(3):
        (tmp_path / "inbox" / f"f{i}").write_text(str(i))
    return path


async def run_until_frozen(
    tmp_path: Path, shutdown_timeout: float, signals: list[tuple[float, signal.Signals]]
) -> tuple[int, float, str]:
    """Start ``bridges run``, wait for the broker to freeze it, send ``signals``.

    Returns the exit status, the seconds from the last signal to the exit,
    and everything it printed.
    """
    async with frozen_broker() as (port, sent):
        config = write_config(tmp_path, port, shutdown_timeout)
        process = await trio.lowlevel.open_process(
            [*bridges_command(), "run", str(config)], cwd=tmp_path, stderr=subprocess.PIPE
        )
        output = bytearray()
        try:
            assert process.stderr is not None
            with trio.fail_after(10):
                await read_until(process.stderr, output, b"running 1 route(s)")
                await sent.wait()
            await trio.sleep(0.2)  # the whole batch is written and waits for its receipt
            last = 0.0
            for delay, signum in signals:
                await trio.sleep(delay)
                process.send_signal(signum)
                last = time.monotonic()
            with trio.fail_after(shutdown_timeout + 10):
                while chunk := await process.stderr.receive_some(65536):
                    output += chunk
                status = await process.wait()
            return status, time.monotonic() - last, output.decode()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


@pytest.mark.deadline(30)
async def test_sigterm_with_a_frozen_broker_stops_within_shutdown_timeout_plus_1s(
    tmp_path: Path,
) -> None:
    status, took, output = await run_until_frozen(tmp_path, 1.0, [(0, signal.SIGTERM)])
    assert took < 1.0 + 1.0, output
    assert status == 3, output
    last = output.strip().splitlines()[-1]
    assert "3 message(s)" in last, output
    assert "handed back to their sources" in last, output
    assert_no_secret(output)
    assert sorted(p.name for p in (tmp_path / "inbox").iterdir()) == ["done", "f0", "f1", "f2"]


@pytest.mark.deadline(30)
async def test_a_second_signal_stops_within_1s(tmp_path: Path) -> None:
    status, took, output = await run_until_frozen(
        tmp_path, 60.0, [(0, signal.SIGTERM), (0.3, signal.SIGTERM)]
    )
    assert took < 1.0, output
    assert status == 3, output
    assert "3 message(s)" in output.strip().splitlines()[-1], output


# -- the last resort ------------------------------------------------------------------------------


@attrs.frozen
class HangingSinkConfig:
    cleanup_seconds: float = 3.0


class HangingSink:
    """A sink whose writes never finish and whose cleanup ignores cancellation."""

    def __init__(self, config: HangingSinkConfig, context: Context) -> None:
        self.seconds = config.cleanup_seconds

    @classmethod
    def build(cls, config: HangingSinkConfig, context: Context) -> HangingSink:
        return cls(config, context)

    def describe(self) -> str:
        return "hanging sink"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[HangingSink]:
        try:
            yield self
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(self.seconds)

    async def write(self, batch: Sequence[Message]) -> None:
        await trio.sleep_forever()


@pytest.mark.deadline(20)
async def test_a_cleanup_that_hangs_gets_the_hard_stop_after_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    registry = default_registry(plugins=False)
    registry.register("sink", "hang", HangingSinkConfig, HangingSink.build)
    (tmp_path / "inbox").mkdir()
    (tmp_path / "inbox" / "a").write_text("a")
    path = tmp_path / "bridge.toml"
    path.write_text(
        "[routes.r]\n"
        'source = { type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }\n'
        'sink = { type = "hang" }\n'
    )
    said: list[str] = []
    stops: list[tuple[float, Stopped]] = []
    async with trio.open_nursery() as nursery:
        routes = await nursery.start(
            partial(
                run_bridge,
                load_config(path, registry),
                registry,
                say=said.append,
                hard_stop=lambda stopped: stops.append((trio.current_time(), stopped)),
            )
        )
        await wait_until(lambda: routes[0].in_flight == 1)
        os.kill(os.getpid(), signal.SIGTERM)
        await wait_until(lambda: any("stopping (" in line for line in said))
        signalled = trio.current_time()
        os.kill(os.getpid(), signal.SIGTERM)
        await wait_until(lambda: bool(stops))
    [(when, stopped)] = stops
    assert STOP_NOW_WITHIN <= when - signalled < STOP_NOW_WITHIN + 0.5
    assert stopped == Stopped(handed_back=1)
    assert any("exiting now" in line for line in said)
    assert said[-1] == stopped.summary()
    assert (tmp_path / "inbox" / "a").exists()  # never acknowledged, never moved
