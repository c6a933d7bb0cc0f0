"""``trio-stomp broker`` on the command line, and the ``stomp_broker`` pytest fixture."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trio_stomp.broker import Broker
from trio_stomp.cli import main
from trio_stomp.frame import Frame, FrameParser, encode


def _command() -> list[str]:
    script = Path(sys.executable).with_name("trio-stomp")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trio_stomp.cli"]


async def _connect_and_disconnect(port: int, **headers: str) -> list[Frame]:
    """CONNECT, then DISCONNECT with a receipt; return every frame the broker sent."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    parser = FrameParser()
    frames: list[Frame] = []
    async with stream:
        await stream.send_all(
            encode(Frame("CONNECT", {"accept-version": "1.2", **headers}))
            + encode(Frame("DISCONNECT", {"receipt": "bye"}))
        )
        while data := await stream.receive_some(4096):
            frames.extend(e for e in parser.feed(data) if isinstance(e, Frame))
    return frames


async def _read_line(stream: trio.abc.ReceiveStream, buffer: bytearray) -> bytes:
    while b"\n" not in buffer:
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise EOFError(bytes(buffer))
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


@pytest.mark.deadline(30)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_cli_broker_answers_and_stops_on_signal(
    tmp_path: Path, signum: signal.Signals
) -> None:
    users = tmp_path / "users"
    users.write_text("# test users\nguest:guest\n", encoding="utf-8")
    command = [*_command(), "broker", "--listen", "127.0.0.1:0", "--users", str(users)]
    process = await trio.lowlevel.open_process(
        command, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    assert process.stderr is not None
    try:
        buffer = bytearray()
        with trio.fail_after(15):
            line = await _read_line(process.stderr, buffer)
            while b"listening" not in line:  # (the log line saying it is volatile)
                line = await _read_line(process.stderr, buffer)
        found = re.search(rb"listening on stomp://127\.0\.0\.1:(\d+)", line)
        assert found, line
        port = int(found.group(1))
        with trio.fail_after(5):
            frames = await _connect_and_disconnect(port, login="guest", passcode="guest")
        assert [f.command for f in frames] == ["CONNECTED", "RECEIPT"]
        with trio.fail_after(5):
            frames = await _connect_and_disconnect(port, login="guest", passcode="nope")
        assert [f.command for f in frames] == ["ERROR"]
        process.send_signal(signum)
        with trio.fail_after(10):
            status = await process.wait()
            rest = bytes(buffer)
            while chunk := await process.stderr.receive_some(4096):
                rest += chunk
        assert status == 0, rest
        assert b"Traceback" not in rest
        assert b"broker stopped" in rest
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_cli_port_in_use_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status = main(["broker", "--listen", f"127.0.0.1:{port}"])
    assert status == 1
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "expected"),
    [("guest\n", "no colon"), ("a:1\na:2\n", "appears twice"), (None, "cannot read")],
)
def test_cli_bad_users_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    path = tmp_path / "users"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    status = main(["broker", "--listen", "127.0.0.1:0", "--users", str(path)])
    assert status == 2
    err = capsys.readouterr().err
    assert expected in err
    assert "Traceback" not in err


def test_cli_bad_listen_address_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["broker", "--listen", "nowhere"])
    assert exit_info.value.code == 2
    assert "HOST:PORT" in capsys.readouterr().err


async def test_stomp_broker_fixture(stomp_broker: Broker) -> None:
    assert stomp_broker.url == f"stomp://127.0.0.1:{stomp_broker.port}"
    with trio.fail_after(5):
        frames = await _connect_and_disconnect(stomp_broker.port)
    assert [f.command for f in frames] == ["CONNECTED", "RECEIPT"]
    assert frames[0].headers["version"] == "1.2"
