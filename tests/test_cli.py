"""``trio-stomp send``, ``listen`` and ``bench``, run for real as subprocesses.

The embedded broker runs in the test's own Trio loop (so a test can look at
``queue_depth``); the command line runs in a child process, exactly as a user
runs it, with its exit status, stdout and stderr captured.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import attrs
import pytest
import trio

import trio_stomp
from trio_stomp.broker import Broker, open_broker

from conftest import REAL_BROKERS, require_real_broker


def _command() -> list[str]:
    script = Path(sys.executable).with_name("trio-stomp")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trio_stomp._cli"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "STOMP_URL"}


@attrs.frozen
class Result:
    status: int
    out: bytes
    err: str

    def assert_clean_error(self, status: int) -> str:
        """The status is ``status`` and stderr is one line without a traceback."""
        assert self.status == status, (self.status, self.err)
        assert "Traceback" not in self.err
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


async def cli(*args: str, stdin: bytes = b"") -> Result:
    """Run ``trio-stomp ARGS`` to the end."""
    done = await trio.run_process(
        [*_command(), *args],
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=_env(),
    )
    return Result(done.returncode, done.stdout, done.stderr.decode())


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with open_broker() as running:
        yield running


async def receive(url: str, destination: str, count: int) -> list[trio_stomp.Message]:
    messages = []
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(destination) as subscription:
            async for message in subscription:
                messages.append(message)
                if len(messages) == count:
                    break
    return messages


async def put(url: str, destination: str, *bodies: bytes, **headers: str) -> None:
    async with trio_stomp.connect(url) as client:
        for body in bodies:
            await client.send(destination, body, headers=headers, receipt=True)


# -- send ---------------------------------------------------------------------


async def test_send_sends_each_file_as_one_message_with_headers(
    broker: Broker, tmp_path: Path
) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.bin"
    first.write_bytes(b'{"a": 1}\n')
    second.write_bytes(b"\x00\xff binary")
    result = await cli(
        "send", "-u", broker.url, "/queue/files", str(first), str(second),
        "-H", "x-trace:abc", "-H", "persistent: true", "--content-type", "application/json",
    )  # fmt: skip
    assert result.status == 0, result.err
    assert result.err.strip() == (
        "trio-stomp: send: sent 2 messages to /queue/files (each confirmed by a receipt)"
    )
    messages = await receive(broker.url, "/queue/files", 2)
    assert [m.body for m in messages] == [b'{"a": 1}\n', b"\x00\xff binary"]
    for message in messages:
        assert message.headers["x-trace"] == "abc"
        assert message.headers["persistent"] == "true"  # like curl, "NAME: VALUE" works
        assert message.headers["content-type"] == "application/json"


async def test_send_lines_from_stdin_sends_each_non_empty_line(broker: Broker) -> None:
    result = await cli(
        "send", "-u", broker.url, "--lines", "--no-receipt", "-q", "/queue/lines",
        stdin=b"first\nsecond\r\n\nlast without newline",
    )  # fmt: skip
    assert (result.status, result.err) == (0, "")
    messages = await receive(broker.url, "/queue/lines", 3)
    assert [m.body for m in messages] == [b"first", b"second", b"last without newline"]
    assert broker.queue_depth("/queue/lines") == 0


async def test_send_whole_stdin_and_body_options(broker: Broker) -> None:
    assert (await cli("send", "-u", broker.url, "/queue/a", stdin=b"all\nof it\n")).status == 0
    assert (await cli("send", "-u", broker.url, "/queue/a", "-b", "héllo", "-b", "x")).status == 0
    messages = await receive(broker.url, "/queue/a", 3)
    assert [m.body for m in messages] == [b"all\nof it\n", "héllo".encode(), b"x"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-H", "receipt:yes", "-b", "x"], "-H receipt: not allowed here"),
        (["/no/such/file"], "cannot read /no/such/file"),
        (["-b", "x", "-"], "not both"),
        (["-b", "x", "--lines"], "not --body"),
    ],
)
async def test_send_bad_input_is_a_usage_error(
    broker: Broker, args: list[str], expected: str
) -> None:
    result = await cli("send", "-u", broker.url, "/queue/a", *args)
    assert expected in result.assert_clean_error(2)
    assert broker.queue_depth("/queue/a") == 0


# -- listen -------------------------------------------------------------------


async def test_listen_json_prints_one_object_per_line(broker: Broker) -> None:
    await put(broker.url, "/queue/j", b"text \xc3\xa9", b"\xff\xfe binary", **{"x-k": "v"})
    result = await cli("listen", "-u", broker.url, "/queue/j", "--count", "2", "--json")
    assert (result.status, result.err) == (0, "")
    lines = result.out.decode().splitlines()
    assert len(lines) == 2
    text, binary = (json.loads(line) for line in lines)
    assert text["destination"] == "/queue/j"
    assert text["message_id"] == text["headers"]["message-id"]
    assert text["headers"]["x-k"] == "v"
    assert (text["body"], text["base64"]) == ("text é", False)
    assert binary["base64"] is True
    assert base64.b64decode(binary["body"]) == b"\xff\xfe binary"


async def test_listen_prints_bodies_and_header_lines(broker: Broker) -> None:
    await put(broker.url, "/queue/p", b"one", b"two\n", **{"x-k": "a b"})
    plain = await cli("listen", "-u", broker.url, "/queue/p", "-n", "2", "--ack", "client")
    assert plain.out == b"one\ntwo\n"  # a line break only where the body has none
    await put(broker.url, "/queue/p", b"three", **{"x-k": "a b"})
    verbose = await cli("listen", "-u", broker.url, "/queue/p", "-n", "1", "-v")
    header, body = verbose.out.decode().splitlines()
    assert header.startswith("-- /queue/p message-id:")
    assert header.endswith(' x-k:"a b"')
    assert body == "three"


async def test_listen_acks_what_it_printed_and_leaves_the_rest(broker: Broker) -> None:
    await put(broker.url, "/queue/acks", b"1", b"2", b"3")
    result = await cli(
        "listen", "-u", broker.url, "/queue/acks", "-n", "2", "--ack", "client-individual"
    )
    assert result.out == b"1\n2\n"
    # Acked messages are gone; --count 2 asked for a window of 2, so the third
    # was never delivered and still waits.
    assert broker.queue_depth("/queue/acks") == 1
    result = await cli("listen", "-u", broker.url, "/queue/acks", "-n", "1")
    assert result.out == b"3\n"
    assert broker.queue_depth("/queue/acks") == 0


async def test_listen_reserved_subscribe_header_is_a_usage_error(broker: Broker) -> None:
    result = await cli("listen", "-u", broker.url, "/queue/a", "-H", "ack:auto")
    assert "-H ack: not allowed here (use --ack)" in result.assert_clean_error(2)


async def _wait_for(condition: Callable[[], bool]) -> None:
    # Polling: the state belongs to the broker and another process; no event to wait on.
    while not condition():  # noqa: ASYNC110
        await trio.sleep(0.01)


async def test_listen_stops_on_sigint_with_status_130(broker: Broker) -> None:
    process = await trio.lowlevel.open_process(
        [*_command(), "listen", "-u", broker.url, "/queue/sig"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        with trio.fail_after(10):
            await _wait_for(lambda: broker.connection_count == 1)
            await put(broker.url, "/queue/sig", b"x")  # it is subscribed once this is taken
            await _wait_for(lambda: broker.queue_depth("/queue/sig") == 0)
            process.send_signal(signal.SIGINT)
            assert await process.wait() == 130
        assert process.stderr is not None
        err = (await process.stderr.receive_some(4096)).decode()
        assert err == "trio-stomp: listen: interrupted\n"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_listen_ends_quietly_when_stdout_closes(broker: Broker) -> None:
    """``trio-stomp listen | head -1``: status 0, nothing on stderr."""
    await put(broker.url, "/queue/pipe", b"first")
    process = await trio.lowlevel.open_process(
        [*_command(), "listen", "-u", broker.url, "/queue/pipe"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        with trio.fail_after(10):
            assert await process.stdout.receive_some(4096) == b"first\n"
            await process.stdout.aclose()
            # The next write finds the pipe closed. It is not acked, so it stays.
            await put(broker.url, "/queue/pipe", b"second")
            assert await process.wait() == 0
            err = b""
            while chunk := await process.stderr.receive_some(4096):
                err += chunk
        assert err == b""
        await _wait_for(lambda: broker.queue_depth("/queue/pipe") == 1)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


# -- failures -----------------------------------------------------------------


@pytest.mark.parametrize("command", [["send", "-b", "x"], ["listen"]])
@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:61613", "bad URL: unsupported URL scheme 'http'"),
        ("stomp://127.0.0.1:notaport", "bad URL: bad port"),
    ],
)
async def test_bad_url_is_a_usage_error(command: list[str], url: str, expected: str) -> None:
    result = await cli(command[0], "-u", url, "/queue/a", *command[1:])
    line = result.assert_clean_error(2)
    assert line.startswith(f"trio-stomp: {command[0]}: error: {expected}")


async def test_refused_connection_is_one_line_and_status_1() -> None:
    with trio.socket.socket() as unused:
        await unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        result = await cli("send", "-u", f"stomp://127.0.0.1:{port}", "/queue/a", "-b", "x")
    line = result.assert_clean_error(1)
    assert line.startswith("trio-stomp: send: error: cannot connect to ")
    assert str(port) in line


async def test_bad_credentials_are_refused_with_status_1() -> None:
    async with open_broker(users={"u": "p"}) as broker:
        url = broker.url.replace("stomp://", "stomp://u:wrong@")
        result = await cli("listen", "-u", url, "/queue/a")
        assert "refused" in result.assert_clean_error(1)
        good = broker.url.replace("stomp://", "stomp://u:p@")
        assert (await cli("send", "-u", good, "/queue/a", "-b", "x", "-q")).status == 0


# -- bench --------------------------------------------------------------------


async def test_bench_prints_the_table(broker: Broker) -> None:
    result = await cli("bench", "-u", broker.url, "--count", "200", "--size", "10")
    assert result.status == 0, result.err
    header, sent, received = result.out.decode().splitlines()
    assert header.split() == ["messages", "elapsed", "s", "msgs/s", "MB/s"]
    assert sent.split()[:2] == ["sent", "200"]
    assert received.split()[:2] == ["received", "200"]
    assert "200 messages of 10 bytes" in result.err
    assert "Traceback" not in result.err


# -- a real broker ------------------------------------------------------------


async def test_send_and_listen_on_rabbitmq(unique: Callable[[str], str]) -> None:
    require_real_broker("rabbitmq")
    url = REAL_BROKERS["rabbitmq"]
    queue = unique("queue")
    # auto-delete (declared alike on both sides): the queue goes once listen leaves.
    sent = await cli(
        "send", "-u", url, queue, "--lines", "-H", "auto-delete:true", "-H", "x-k:v",
        stdin=b"one\ntwo\n",
    )  # fmt: skip
    assert sent.status == 0, sent.err
    heard = await cli("listen", "-u", url, queue, "-n", "2", "--json", "-H", "auto-delete:true")
    assert heard.status == 0, heard.err
    records = [json.loads(line) for line in heard.out.decode().splitlines()]
    assert [r["body"] for r in records] == ["one", "two"]
    assert all(r["headers"]["x-k"] == "v" for r in records)
