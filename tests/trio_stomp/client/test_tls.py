"""STOMP over TLS (and WebSocket over TLS) against the embedded broker's TLS
listeners, with certificates from a throwaway CA (trustme)."""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trustme

import trio_stomp
from trio_stomp.broker import Broker, Limits, open_broker
from trio_stomp.cli import main

from conftest import all_tasks


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _server_context(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    return context


@pytest.fixture
def client_context(ca: trustme.CA) -> ssl.SSLContext:
    """Trusts the test CA only."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.fixture
async def tls_broker(ca: trustme.CA) -> AsyncIterator[Broker]:
    context = _server_context(ca, "127.0.0.1", "localhost")
    async with open_broker(tls_port=0, wss_port=0, ssl_context=context) as broker:
        yield broker


async def _round_trip(client: trio_stomp.Client, dest: str, body: bytes) -> None:
    async with client.subscribe(dest, receipt=True) as sub:
        await client.send(dest, body, receipt=True)
        async for message in sub:
            assert message.body == body
            break


# -- the client against the TLS listeners -------------------------------------------


async def test_round_trip_with_a_trusting_context(
    tls_broker: Broker, client_context: ssl.SSLContext
) -> None:
    assert re.fullmatch(r"stomp\+ssl://127\.0\.0\.1:\d+", tls_broker.tls_url)
    async with trio_stomp.connect(tls_broker.tls_url, ssl_context=client_context) as client:
        assert client.version == "1.2"
        await _round_trip(client, "/queue/tls", b"\0binary\0" + bytes(range(256)) * 4096)


@pytest.mark.parametrize("scheme", ["ssl", "stomps"])
async def test_scheme_aliases(
    tls_broker: Broker, client_context: ssl.SSLContext, scheme: str
) -> None:
    url = tls_broker.tls_url.replace("stomp+ssl", scheme)
    async with trio_stomp.connect(url, ssl_context=client_context) as client:
        await client.send("/queue/alias", b"x", receipt=True)


async def test_round_trip_over_secure_websocket(
    tls_broker: Broker, client_context: ssl.SSLContext
) -> None:
    assert re.fullmatch(r"wss://127\.0\.0\.1:\d+/ws", tls_broker.wss_url)
    async with trio_stomp.connect(tls_broker.wss_url, ssl_context=client_context) as client:
        await _round_trip(client, "/queue/wss", b"\0" * 1024 + b"y" * (1 << 20))


async def test_tls_and_plain_clients_share_destinations(
    tls_broker: Broker, client_context: ssl.SSLContext
) -> None:
    async with (
        trio_stomp.connect(tls_broker.tls_url, ssl_context=client_context) as tls_client,
        trio_stomp.connect(tls_broker.url) as plain_client,
    ):
        async with tls_client.subscribe("/queue/shared", receipt=True) as sub:
            await plain_client.send("/queue/shared", b"across", receipt=True)
            async for message in sub:
                assert message.body == b"across"
                break


async def test_default_context_does_not_trust_an_unknown_ca(tls_broker: Broker) -> None:
    with pytest.raises(trio_stomp.ConnectFailed, match="certificate verification failed") as info:
        async with trio_stomp.connect(tls_broker.tls_url):
            pass
    message = str(info.value)
    assert tls_broker.tls_url in message
    assert "unable to get local issuer certificate" in message
    assert "ssl_context=" in message


async def test_default_context_fails_the_same_way_over_wss(tls_broker: Broker) -> None:
    with pytest.raises(trio_stomp.ConnectFailed, match="certificate verification failed"):
        async with trio_stomp.connect(tls_broker.wss_url):
            pass


async def test_certificate_for_another_host_is_refused(
    ca: trustme.CA, client_context: ssl.SSLContext
) -> None:
    context = _server_context(ca, "stomp.example.test")
    async with open_broker(tls_port=0, ssl_context=context) as broker:
        with pytest.raises(
            trio_stomp.ConnectFailed, match="certificate verification failed"
        ) as info:
            async with trio_stomp.connect(broker.tls_url, ssl_context=client_context):
                pass
    assert "mismatch" in str(info.value)
    assert "does not name '127.0.0.1'" in str(info.value)


async def test_tls_to_a_plain_port_fails_clearly(
    tls_broker: Broker, client_context: ssl.SSLContext
) -> None:
    url = tls_broker.url.replace("stomp://", "stomp+ssl://")
    with pytest.raises(trio_stomp.ConnectFailed, match="TLS handshake"):
        async with trio_stomp.connect(url, ssl_context=client_context, connect_timeout=5):
            pass


async def test_plain_stomp_to_the_tls_port_fails(tls_broker: Broker) -> None:
    url = tls_broker.tls_url.replace("stomp+ssl://", "stomp://")
    with pytest.raises(trio_stomp.ConnectFailed):
        async with trio_stomp.connect(url, connect_timeout=5):
            pass


async def test_ssl_context_for_a_plain_url_is_refused(
    tls_broker: Broker, client_context: ssl.SSLContext
) -> None:
    with pytest.raises(ValueError, match="does not use TLS"):
        async with trio_stomp.connect(tls_broker.url, ssl_context=client_context):
            pass


async def test_no_task_outlives_a_tls_client(
    tls_broker: Broker, client_context: ssl.SSLContext
) -> None:
    before = all_tasks()
    async with trio_stomp.connect(
        tls_broker.tls_url, ssl_context=client_context, heartbeat=(100, 100)
    ) as client:
        async with client.subscribe("/queue/x"):
            assert len(all_tasks()) > len(before)
    assert all_tasks() == before


# -- the broker's TLS listener ---------------------------------------------------------


async def test_failed_handshakes_do_not_disturb_the_broker(
    tls_broker: Broker, client_context: ssl.SSLContext
) -> None:
    for _ in range(3):
        with pytest.raises(trio_stomp.ConnectFailed):
            async with trio_stomp.connect(tls_broker.tls_url):
                pass
    async with trio_stomp.connect(tls_broker.tls_url, ssl_context=client_context) as client:
        await client.send("/queue/after", b"fine", receipt=True)
        assert tls_broker.connection_count == 1


async def test_a_client_that_never_handshakes_is_dropped(ca: trustme.CA) -> None:
    context = _server_context(ca, "127.0.0.1")
    limits = Limits(connect_timeout=0.2)
    async with open_broker(tls_port=0, ssl_context=context, limits=limits) as broker:
        port = int(broker.tls_url.rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            with trio.fail_after(2):
                assert await stream.receive_some() == b""


async def test_listener_addresses_may_name_their_own_host(ca: trustme.CA) -> None:
    context = _server_context(ca, "127.0.0.1")
    async with open_broker(
        tls_port=("127.0.0.1", 0), ws_port=("127.0.0.1", 0), ssl_context=context
    ) as broker:
        assert len(broker.urls) == 3
        assert broker.urls[0] == broker.url


async def test_broker_option_errors(ca: trustme.CA) -> None:
    context = _server_context(ca, "127.0.0.1")
    with pytest.raises(ValueError, match="needs ssl_context"):
        async with open_broker(tls_port=0):
            pass
    with pytest.raises(ValueError, match="no TLS listener"):
        async with open_broker(ssl_context=context):
            pass
    async with open_broker() as broker:
        with pytest.raises(RuntimeError, match="pass tls_port="):
            _ = broker.tls_url
        with pytest.raises(RuntimeError, match="pass ws_port="):
            _ = broker.ws_url
        # A listener that cannot listen says which one it is; no socket stays open.
        with pytest.raises(
            OSError, match=rf"cannot listen on 127\.0\.0\.1:{broker.port} for ws://"
        ):
            async with open_broker(ws_port=broker.port):
                pass


# -- the command line ------------------------------------------------------------------


def _command() -> list[str]:
    script = Path(sys.executable).with_name("trio-stomp")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trio_stomp.cli"]


def _write_cert(ca: trustme.CA, directory: Path) -> tuple[Path, Path]:
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file = directory / "broker.pem", directory / "broker.key"
    for blob in cert.cert_chain_pems:
        blob.write_to_path(str(cert_file), append=True)
    cert.private_key_pem.write_to_path(str(key_file))
    return cert_file, key_file


@pytest.mark.deadline(30)
async def test_cli_broker_serves_tls_and_websocket(
    ca: trustme.CA, client_context: ssl.SSLContext, tmp_path: Path
) -> None:
    cert_file, key_file = _write_cert(ca, tmp_path)
    command = [
        *_command(),
        "broker",
        "--listen",
        "127.0.0.1:0",
        "--tls-listen",
        "127.0.0.1:0",
        "--ws-listen",
        "127.0.0.1:0",
        "--cert",
        str(cert_file),
        "--key",
        str(key_file),
    ]
    process = await trio.lowlevel.open_process(
        command, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    assert process.stderr is not None
    try:
        line = b""
        with trio.fail_after(15):
            # (the first line may be the log line saying the broker is volatile)
            while not re.search(rb"listening on .*\n", line):
                chunk = await process.stderr.receive_some()
                assert chunk, line
                line += chunk
        found = re.search(rb"listening on .*\n", line)
        assert found, line
        line = found.group(0)
        urls = re.findall(rb"(stomp\+ssl://\S+?|ws://\S+?)(?:,|\s|$)", line)
        tls_url, ws_url = (url.decode() for url in urls)
        assert tls_url.startswith("stomp+ssl://127.0.0.1:")
        assert ws_url.startswith("ws://127.0.0.1:")
        assert ws_url.endswith("/ws")
        with trio.fail_after(10):
            async with trio_stomp.connect(tls_url, ssl_context=client_context) as tls_client:
                async with trio_stomp.connect(ws_url) as ws_client:
                    async with ws_client.subscribe("/queue/cli", receipt=True) as sub:
                        await tls_client.send("/queue/cli", b"over TLS", receipt=True)
                        async for message in sub:
                            assert message.body == b"over TLS"
                            break
        process.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-listen", "127.0.0.1:0"], "--tls-listen needs --cert"),
        (["--wss-listen", "127.0.0.1:0"], "--wss-listen needs --cert"),
        (["--cert", "x.pem"], "--cert and --key need --tls-listen or --wss-listen"),
        (["--tls-listen", "127.0.0.1:0", "--cert", "/nonexistent.pem"], "cannot load --cert"),
    ],
)
def test_cli_tls_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["broker", "--listen", "127.0.0.1:0", *args]) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_a_key_that_does_not_match(
    ca: trustme.CA, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert_file, _ = _write_cert(ca, tmp_path)
    (tmp_path / "other").mkdir()
    _, other_key = _write_cert(ca, tmp_path / "other")
    args = ["--tls-listen", "127.0.0.1:0", "--cert", str(cert_file), "--key", str(other_key)]
    assert main(["broker", *args]) == 2
    assert "cannot load --cert/--key" in capsys.readouterr().err
