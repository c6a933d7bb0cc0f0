"""``trio-stomp send``, ``listen`` and ``bench``, run for real as subprocesses.

The embedded broker runs in the test's own Trio loop (so a test can look at
``queue_depth``); the command line runs in a child process, exactly as a user
runs it, with its exit status, stdout and stderr captured.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import attrs
import pytest
import trio
import trustme

import trio_stomp
from trio_stomp.broker import Broker, open_broker
from trio_stomp.cli import main
from trio_stomp.util import printable

from conftest import REAL_BROKERS, require_real_broker


def _command() -> list[str]:
    script = Path(sys.executable).with_name("trio-stomp")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trio_stomp.cli"]


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


#: Control sequences a terminal obeys: OSC 52 (clipboard), clear, OSC 0 (title),
#: 8-bit CSI, DEL, CR, a newline, a bidi override.
_ATTACKS = ("\x1b]52;c;ZXZpbA==\x07", "\x1b[2J", "\x1b]0;owned\x07", "\x9b2J", "\x7f", "\rx",
            "\nforged", "\u202e")  # fmt: skip


async def test_listen_verbose_escapes_header_names_values_and_the_destination(
    broker: Broker,
) -> None:
    destination = "/queue/v" + "".join(_ATTACKS)
    headers = {f"x-{i}{attack}": f"v{attack}" for i, attack in enumerate(_ATTACKS)}
    await put(broker.url, destination, b"body", b"body", **headers)
    result = await cli("listen", "-u", broker.url, destination, "-n", "1", "-v")
    assert result.status == 0, result.err
    header, body = result.out.decode().splitlines()
    for raw in ("\x1b", "\x07", "\x9b", "\x7f", "\r", "\u202e"):
        assert raw not in header, (raw, header)
    assert header.startswith("-- /queue/v\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J")
    assert "x-0\\x1b]52;c;ZXZpbA==\\x07:" in header
    assert body == "body"
    # --json escapes them all too (C1 and bidi included), and decodes to what was sent.
    as_json = await cli("listen", "-u", broker.url, destination, "-n", "1", "--json")
    line = as_json.out.decode()
    for raw in ("\x1b", "\x07", "\x9b", "\x7f", "\r", "\u202e"):
        assert raw not in line, (raw, line)
    assert json.loads(line)["destination"] == destination


def test_the_broker_command_escapes_what_it_logs() -> None:
    from trio_stomp.cli._common import PrintableFormatter

    destination = "/topic/" + "".join(_ATTACKS)
    record = logging.LogRecord(
        "trio_stomp.broker", logging.WARNING, __file__, 1, "sent to %s: not kept", (destination,),
        None,
    )  # fmt: skip
    line = PrintableFormatter("%(levelname)s %(message)s").format(record)
    assert line == f"WARNING sent to {printable(destination)}: not kept"
    assert "\n" not in line
    assert "\x1b" not in line


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


@pytest.mark.parametrize(
    ("signum", "status", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
async def test_listen_stops_cleanly_on_sigint_and_sigterm(
    broker: Broker, signum: int, status: int, said: str
) -> None:
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
            process.send_signal(signum)
            assert await process.wait() == status
        assert process.stderr is not None
        err = (await process.stderr.receive_some(4096)).decode()
        assert err == f"trio-stomp: listen: {said}\n"
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
    assert process.stdout is not None
    assert process.stderr is not None
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


# -- TLS trust: --cafile, --insecure --------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    """The test CA's certificate as a PEM file, for --cafile."""
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def _server_context(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    return context


@pytest.fixture
async def tls_broker(ca: trustme.CA) -> AsyncIterator[Broker]:
    """Plain and TLS listeners, with a certificate for 127.0.0.1 from the test CA."""
    async with open_broker(tls_port=0, ssl_context=_server_context(ca, "127.0.0.1")) as running:
        yield running


_INSECURE_WARNING = (
    "trio-stomp: {}: warning: --insecure: the broker's TLS certificate and host name "
    "are not verified"
)


async def test_send_and_listen_over_tls_with_cafile(tls_broker: Broker, ca_file: str) -> None:
    url = tls_broker.tls_url
    sent = await cli("send", "-u", url, "--cafile", ca_file, "/queue/tls", "-b", "secret")
    assert (sent.status, sent.err) == (0, "trio-stomp: send: sent 1 message to /queue/tls "
                                          "(each confirmed by a receipt)\n")  # fmt: skip
    assert tls_broker.queue_depth("/queue/tls") == 1
    heard = await cli("listen", "/queue/tls", "-n", "1", "-u", url, "--cafile", ca_file)
    assert (heard.status, heard.out, heard.err) == (0, b"secret\n", "")
    assert tls_broker.queue_depth("/queue/tls") == 0


async def test_bench_over_tls_with_cafile(tls_broker: Broker, ca_file: str) -> None:
    result = await cli(
        "bench", "-u", tls_broker.tls_url, "--cafile", ca_file, "--count", "20", "--size", "5"
    )
    assert result.status == 0, result.err
    assert result.out.decode().splitlines()[2].split()[:2] == ["received", "20"]


@pytest.mark.parametrize("command", [["send", "-b", "x"], ["listen"]])
async def test_tls_without_trust_is_a_certificate_error(
    tls_broker: Broker, command: list[str]
) -> None:
    result = await cli(command[0], "-u", tls_broker.tls_url, "/queue/tls", *command[1:])
    line = result.assert_clean_error(1)
    assert line.startswith(
        f"trio-stomp: {command[0]}: error: TLS certificate verification failed for "
        f"{tls_broker.tls_url}: unable to get local issuer certificate"
    )
    # The hint names the option, not the library's ssl_context= argument.
    assert line.endswith("(give --cafile with the CA that signed the broker's certificate)")
    assert tls_broker.queue_depth("/queue/tls") == 0


async def test_cafile_replaces_the_trusted_cas(tls_broker: Broker, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    result = await cli("send", "-u", tls_broker.tls_url, "--cafile", str(other), "/q/a", "-b", "x")
    assert "TLS certificate verification failed" in result.assert_clean_error(1)


async def test_cafile_still_checks_the_host_name(ca: trustme.CA, ca_file: str) -> None:
    context = _server_context(ca, "stomp.example.test")
    async with open_broker(tls_port=0, ssl_context=context) as broker:
        result = await cli("send", "-u", broker.tls_url, "--cafile", ca_file, "/q/a", "-b", "x")
        line = result.assert_clean_error(1)
        assert "TLS certificate verification failed" in line
        assert "the certificate does not name '127.0.0.1'" in line
        # --insecure does not check it either.
        insecure = await cli("send", "-u", broker.tls_url, "--insecure", "-q", "/q/a", "-b", "x")
        assert (insecure.status, insecure.err) == (0, _INSECURE_WARNING.format("send") + "\n")
        assert broker.queue_depth("/q/a") == 1


async def test_insecure_connects_without_verifying_and_warns(tls_broker: Broker) -> None:
    url = tls_broker.tls_url
    sent = await cli("send", "-u", url, "--insecure", "-q", "/queue/tls", "-b", "unchecked")
    assert (sent.status, sent.err) == (0, _INSECURE_WARNING.format("send") + "\n")
    heard = await cli("listen", "-u", url, "--insecure", "/queue/tls", "-n", "1")
    assert heard.status == 0, heard.err
    assert heard.out == b"unchecked\n"
    assert heard.err.splitlines() == [_INSECURE_WARNING.format("listen")]


async def test_tls_options_with_a_plain_url_are_harmless(tls_broker: Broker, ca_file: str) -> None:
    url = tls_broker.url
    assert url.startswith("stomp://")
    with_ca = await cli("send", "-u", url, "--cafile", ca_file, "-q", "/queue/p", "-b", "one")
    assert (with_ca.status, with_ca.err) == (0, "")
    insecure = await cli("send", "-u", url, "--insecure", "-q", "/queue/p", "-b", "two")
    assert (insecure.status, insecure.err) == (0, _INSECURE_WARNING.format("send") + "\n")
    assert [m.body for m in await receive(url, "/queue/p", 2)] == [b"one", b"two"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "No such file or directory"),
        (b"not a certificate\n", "not a PEM CA bundle (NO_CERTIFICATE_OR_CRL_FOUND)"),
    ],
    ids=["missing", "not-pem"],
)
@pytest.mark.parametrize("command", [["send", "-b", "x"], ["listen"], ["bench"]])
async def test_bad_cafile_is_a_usage_error(
    tls_broker: Broker, tmp_path: Path, command: list[str], content: bytes | None, expected: str
) -> None:
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_bytes(content)
    url = tls_broker.tls_url
    args = [command[0], "-u", url, "--cafile", str(path)]
    if command[0] != "bench":
        args += ["/queue/a", *command[1:]]
    line = (await cli(*args)).assert_clean_error(2)
    assert line == f"trio-stomp: {command[0]}: error: cannot load --cafile {path}: {expected}"
    assert tls_broker.connection_count == 0


@pytest.mark.parametrize("command", [["send", "/q/a", "-b", "x"], ["listen", "/q/a"], ["bench"]])
def test_cafile_and_insecure_are_mutually_exclusive(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--cafile", "ca.pem", "--insecure"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "[--cafile PATH | --insecure]" in err  # the usage line
    assert err.endswith("error: argument --insecure: not allowed with argument --cafile\n")


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


@pytest.mark.parametrize("ack", ["client-individual", "auto"])
async def test_listen_with_a_selector_on_activemq(unique: Callable[[str], str], ack: str) -> None:
    """The STOMP ``priority`` header is JMSPriority to ActiveMQ's selectors (so
    ``priority > 5`` is about a property nobody set, and matches nothing)."""
    require_real_broker("activemq")
    url = REAL_BROKERS["activemq"]
    queue = unique("queue")
    for priority in ("1", "9"):
        sent = await cli(
            "send", "-u", url, queue, "-b", f"p{priority}", "-H", f"priority:{priority}"
        )
        assert sent.status == 0, sent.err
    heard = await cli(
        "listen", "-u", url, queue, "-n", "1", "--ack", ack, "-H", "selector:JMSPriority > 5"
    )
    assert (heard.status, heard.out, heard.err) == (0, b"p9\n", "")
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(
            queue, headers={"selector": "priority > 5"}, receipt=True
        ) as sub:
            with trio.move_on_after(0.3):
                async for message in sub:
                    pytest.fail(f"priority > 5 matched {message.body!r}")
    assert [m.body for m in await receive(url, queue, 1)] == [b"p1"]  # left for others


@pytest.mark.parametrize(
    ("selector", "shown"),
    [
        ("priority >>> 5", "javax.jms.InvalidSelectorException: priority >>> 5"),
        # An empty ERROR message: all there is is the body, a Java stack trace.
        ("", "javax.jms.InvalidSelectorException:"),
    ],
)
async def test_listen_with_a_bad_selector_says_so_on_one_line(
    unique: Callable[[str], str], selector: str, shown: str
) -> None:
    """ActiveMQ refuses the SUBSCRIBE with ERROR (message: the selector alone) and
    keeps the connection; the line shows the exception from the body's first line."""
    require_real_broker("activemq")
    result = await cli(
        "listen", "-u", REAL_BROKERS["activemq"], unique("queue"), "-H", f"selector:{selector}"
    )
    line = result.assert_clean_error(1)
    assert line == f"trio-stomp: listen: error: the broker sent ERROR: {shown}"


# -- secrets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("stomp://guest:Zq/9w@127.0.0.1:{port}/", 2),  # "/" unescaped: refused, not parsed
        ("stomp://guest:Zq@9:w@127.0.0.1:{port}/", 1),  # "@" and ":" in it: parsed
        ("stomp://guest:Zq%2F9w@127.0.0.1:{port}/?nope=1", 2),  # escaped, then a bad parameter
        ("stomp://guest:Zq%9w@127.0.0.1:{port}/", 1),  # a "%" that escapes nothing
    ],
)
async def test_a_passcode_never_shows_in_an_error(url: str, status: int) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    line = (
        await cli("send", "-u", url.format(port=port), "/queue/a", "-b", "x")
    ).assert_clean_error(status)
    assert "Zq" not in line
    assert "9w" not in line
