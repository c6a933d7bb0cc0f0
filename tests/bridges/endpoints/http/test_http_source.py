"""The http source on loopback: real server, real httpx client, embedded STOMP broker."""

from __future__ import annotations

import base64
import datetime
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import standardwebhooks
import trio
import trustme
from http_helpers import running_source
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trio_stomp
from bridges import Context, InvalidSetting, RetryPolicy, open_shared
from bridges.endpoints.http import HttpSource, HttpSourceConfig, listen, respond, signatures
from bridges.endpoints.stomp import StompSink, StompSinkConfig
from bridges.testing import FakeSink, wait_until

from conftest import Target

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
CTX = Context(route="h")


def signed(
    body: bytes, *, msg_id: str = "msg_1", secret: str = SECRET, at: float | None = None
) -> dict[str, str]:
    """Headers as the standardwebhooks package signs them (the independent peer)."""
    when = datetime.datetime.fromtimestamp(time.time() if at is None else at, tz=datetime.UTC)
    signature = standardwebhooks.Webhook(secret).sign(msg_id, when, body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


async def drain(url: str, destination: str, expect: int) -> list[trio_stomp.Message]:
    got: list[trio_stomp.Message] = []
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(destination, ack="client-individual") as sub:
            with trio.move_on_after(5):
                async for message in sub:
                    await message.ack()
                    got.append(message)
                    if len(got) == expect:
                        break
            with trio.move_on_after(0.2):
                async for message in sub:
                    got.append(message)
    return got


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=10) as c:
        yield c


async def test_a_signed_webhook_lands_in_the_queue_with_its_id_and_headers(
    embedded: Target, unique: Callable[[str], str], client: httpx.AsyncClient
) -> None:
    destination = unique("queue")
    sink = StompSink(StompSinkConfig(url=embedded.url, destination=destination), CTX)
    body = b'{"order": 17, "bytes": "\xc3\xa9"}'
    async with running_source(
        sink, signature="standard-webhooks", secret=SECRET, keep_headers=["X-Shop"]
    ) as (url, _, _):
        headers = {**signed(body, msg_id="msg_abc"), "x-shop": "north", "x-other": "no"}
        response = await client.post(f"{url}/hooks?a=1&b=2", content=body, headers=headers)
        assert response.status_code == 204
        # 204 came after the RECEIPT: the message is in the broker now.
        got = await drain(embedded.url, destination, 1)
    assert len(got) == 1
    message = got[0]
    assert message.body == body
    assert message.headers["bridge-id"] == "h/msg_abc"  # ROUTE/webhook-id
    assert message.headers["content-type"] == "application/json"
    assert message.headers["http-method"] == "POST"
    assert message.headers["http-path"] == "/hooks"
    assert message.headers["http-query"] == "a=1&b=2"
    assert message.headers["http-x-shop"] == "north"
    assert "http-x-other" not in message.headers


async def test_the_answer_waits_until_the_sink_holds_the_message(
    client: httpx.AsyncClient,
) -> None:
    sink = FakeSink()
    sink.gate = trio.Event()
    answers: list[int] = []
    async with running_source(sink) as (url, _, _):

        async def post() -> None:
            answers.append((await client.post(f"{url}/hooks", content=b"x")).status_code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(post)
            await wait_until(lambda: sink.calls == 1)
            await trio.sleep(0.2)
            assert answers == []  # not durable, not answered
            assert sink.batches == []
            sink.gate.set()
    assert answers == [204]
    assert [m.body for batch in sink.batches for m in batch] == [b"x"]


async def test_a_sink_that_keeps_failing_answers_503_and_stores_nothing(
    client: httpx.AsyncClient,
) -> None:
    sink = FakeSink(always=OSError("disk on fire"))
    options = {"retry": RetryPolicy(attempts=2, initial=0.01, jitter=0)}
    async with running_source(sink, route_options=options, retry_after=7) as (url, route, _):
        response = await client.post(f"{url}/hooks", content=b"x")
        assert response.status_code == 503
        assert response.headers["retry-after"] == "7"
        assert sink.batches == []
        assert route.stats.nacked == 1


async def test_a_dead_lettered_webhook_was_stored_so_it_gets_a_2xx(
    client: httpx.AsyncClient,
) -> None:
    from bridges import MessageRejected

    sink = FakeSink(always=MessageRejected("no destination"))
    dead = FakeSink()
    options = {"dead_letter": dead}
    async with running_source(sink, route_options=options, status=202) as (url, _, _):
        response = await client.post(f"{url}/hooks", content=b"x")
    assert response.status_code == 202
    assert [m.headers["bridge-error"] for b in dead.batches for m in b] == ["no destination"]


async def test_a_full_window_answers_503_after_accept_timeout(
    client: httpx.AsyncClient,
) -> None:
    sink = FakeSink()
    sink.gate = trio.Event()
    options = {"in_flight": 1}
    async with running_source(sink, route_options=options, accept_timeout=0.3) as (url, _, _):
        answers: list[int] = []

        async def post(body: bytes) -> None:
            answers.append((await client.post(f"{url}/hooks", content=body)).status_code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(post, b"first")
            await wait_until(lambda: sink.calls == 1)
            started = trio.current_time()
            await post(b"second")
            assert answers == [503]
            assert 0.25 <= trio.current_time() - started < 3
            sink.gate.set()
    assert sorted(answers) == [204, 503]
    assert [m.body for b in sink.batches for m in b] == [b"first"]


async def test_several_routes_share_one_server_and_a_stopped_route_answers_503(
    client: httpx.AsyncClient,
) -> None:
    a, b = FakeSink(), FakeSink()
    async with open_shared() as shared:
        context = Context(route="h", shared=shared)
        async with running_source(a, context=context, path="/a") as (url, _, _):
            async with running_source(b, context=context, path="/b") as (url_b, _, _):
                assert url_b == url  # one server
                assert (await client.post(f"{url}/a", content=b"1")).status_code == 204
                assert (await client.post(f"{url}/b", content=b"2")).status_code == 204
                health = await client.get(f"{url}/healthz")
                assert (health.status_code, health.text) == (200, "ok\n")
            # Route b stopped; the server (and route a) go on.
            gone = await client.post(f"{url}/b", content=b"3")
            assert gone.status_code == 503
            assert gone.headers["retry-after"] == "5"
            health = await client.get(f"{url}/healthz")
            assert health.status_code == 503
            assert "/b" in health.text
            assert (await client.post(f"{url}/a", content=b"4")).status_code == 204
            assert (await client.post(f"{url}/nowhere", content=b"5")).status_code == 404
    assert [m.body for x in a.batches for m in x] == [b"1", b"4"]
    assert [m.body for x in b.batches for m in x] == [b"2"]


REJECTIONS: list[tuple[str, Callable[[bytes], tuple[str, str, bytes, dict[str, str]]], int]] = [
    ("tampered body", lambda body: ("POST", "/hooks", body + b" ", signed(body)), 401),
    (
        "wrong secret",
        lambda body: ("POST", "/hooks", body, signed(body, secret="whsec_" + "QUJD" * 8)),
        401,
    ),
    (
        "stale timestamp",
        lambda body: ("POST", "/hooks", body, signed(body, at=time.time() - 301)),
        401,
    ),
    (
        "future timestamp",
        lambda body: ("POST", "/hooks", body, signed(body, at=time.time() + 400)),
        401,
    ),
    (
        "missing signature",
        lambda body: (
            "POST",
            "/hooks",
            body,
            {k: v for k, v in signed(body).items() if k != "webhook-signature"},
        ),
        401,
    ),
    ("no headers", lambda body: ("POST", "/hooks", body, {}), 401),
    (
        "garbage signature",
        lambda body: ("POST", "/hooks", body, {**signed(body), "webhook-signature": "v1,@@@ v2"}),
        401,
    ),
    ("wrong path", lambda body: ("POST", "/other", body, signed(body)), 404),
    ("wrong method", lambda body: ("PUT", "/hooks", body, signed(body)), 405),
    ("oversized body", lambda body: ("POST", "/hooks", body * 200, signed(body * 200)), 413),
]


@pytest.mark.parametrize(("case", "build", "status"), REJECTIONS, ids=[r[0] for r in REJECTIONS])
async def test_bad_requests_get_the_right_status_and_nothing_is_queued(
    client: httpx.AsyncClient,
    case: str,
    build: Callable[[bytes], tuple[str, str, bytes, dict[str, str]]],
    status: int,
) -> None:
    sink = FakeSink()
    async with running_source(
        sink, signature="standard-webhooks", secret=SECRET, max_body=1000
    ) as (url, route, _):
        method, path, body, headers = build(b'{"n": 12345}')
        response = await client.request(method, f"{url}{path}", content=body, headers=headers)
        assert response.status_code == status, case
        good = await client.post(f"{url}/hooks", content=b"{}", headers=signed(b"{}"))
        assert good.status_code == 204  # the listener is fine after it
        assert route.stats.received == 1
    assert [m.body for b in sink.batches for m in b] == [b"{}"]


async def test_a_streamed_body_over_max_body_is_refused_before_it_is_all_sent(
    client: httpx.AsyncClient,
) -> None:
    sink = FakeSink()
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        while sent < 64 * 1024 * 1024:
            sent += 65536
            yield b"x" * 65536

    async with running_source(sink, max_body=100_000) as (url, route, _):
        try:
            response = await client.post(f"{url}/hooks", content=endless())
            status = response.status_code
        except httpx.TransportError:
            status = 0  # the server closed on us mid-upload; acceptable, nothing stored
        assert status in (413, 0)
        assert sent < 16 * 1024 * 1024  # the server did not read the rest
        assert route.stats.received == 0
        assert (await client.post(f"{url}/hooks", content=b"ok")).status_code == 204
    assert [m.body for b in sink.batches for m in b] == [b"ok"]


async def test_github_signatures_and_bearer_tokens(client: httpx.AsyncClient) -> None:
    sink = FakeSink()
    body = b'{"action": "opened"}'
    good = signatures.github_signature(b"gh-secret", body)
    async with running_source(
        sink,
        signature="github",
        secret=["old-secret", "gh-secret"],
        bearer_token="tok",
        id_header="X-GitHub-Delivery",
    ) as (url, _, _):
        auth = {"authorization": "Bearer tok", "x-github-delivery": "d-1"}
        ok = await client.post(
            f"{url}/hooks", content=body, headers={**auth, "x-hub-signature-256": good}
        )
        assert ok.status_code == 204
        for headers in (
            {**auth, "x-hub-signature-256": good.replace("a", "b").replace("1", "2")},
            {**auth},
            {"authorization": "Bearer nope", "x-hub-signature-256": good},
            {"x-hub-signature-256": good},
        ):
            bad = await client.post(f"{url}/hooks", content=body, headers=headers)
            assert bad.status_code == 401
    written = [m for b in sink.batches for m in b]
    assert [(m.id, m.body) for m in written] == [("h/d-1", body)]


async def test_without_a_sender_id_each_message_gets_a_fresh_one(
    client: httpx.AsyncClient,
) -> None:
    sink = FakeSink()
    async with running_source(sink) as (url, _, _):
        for _ in range(3):
            assert (await client.post(f"{url}/hooks", content=b"x")).status_code == 204
    ids = [m.id for b in sink.batches for m in b]
    assert len(set(ids)) == 3
    assert all(ids)


def test_settings_that_cannot_work_are_refused() -> None:
    def build(**settings: object) -> HttpSource:
        settings.setdefault("listen", "127.0.0.1:8080")
        settings.setdefault("path", "/hooks")
        return HttpSource(HttpSourceConfig(**settings), CTX)  # type: ignore[arg-type]  # the test passes loose settings

    with pytest.raises(InvalidSetting, match="choose") as info:
        build(listen="0.0.0.0:8080")
    assert info.value.key == "signature"
    assert build(listen="0.0.0.0:8080", bearer_token="t").scheme == "none"
    assert build(listen="0.0.0.0:8080", signature="none").scheme == "none"
    assert build(listen="[::1]:8080").scheme == "none"
    with pytest.raises(InvalidSetting) as info:
        build(signature="standard-webhooks")
    assert info.value.key == "secret"
    with pytest.raises(InvalidSetting) as info:
        build(signature="standard-webhooks", secret="whsec_!!!")
    assert info.value.key == "secret"
    with pytest.raises(InvalidSetting) as info:
        build(listen="8080")
    assert info.value.key == "listen"
    with pytest.raises(InvalidSetting) as info:
        build(path="hooks")
    assert info.value.key == "path"
    with pytest.raises(InvalidSetting) as info:
        build(certfile="cert.pem")
    assert info.value.key == "certfile"
    assert "s3cr3t" not in repr(HttpSourceConfig("127.0.0.1:1", "/", secret="s3cr3t"))


async def test_a_body_that_trickles_in_is_cut_off_with_408() -> None:
    sink = FakeSink()
    async with running_source(sink, body_timeout=0.3) as (url, route, _):
        host, port = url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(
                b"POST /hooks HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123456789"
            )
            started = trio.current_time()
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert trio.current_time() - started < 3
        assert route.stats.received == 0
    assert sink.batches == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_a_port_in_use_is_one_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        source = HttpSource(HttpSourceConfig(listen=f"127.0.0.1:{port}", path="/x"), CTX)
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}: Address already"):
            async with source.open():
                pass  # pragma: no cover


def tls_files(tmp_path: Path) -> tuple[str, str, str]:
    """certfile, keyfile and the CA that signed them, for 127.0.0.1."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    paths = [tmp_path / name for name in ("cert.pem", "key.pem", "ca.pem")]
    cert.private_key_and_cert_chain_pem.write_to_path(paths[0])
    cert.private_key_pem.write_to_path(paths[1])
    ca.cert_pem.write_to_path(paths[2])
    return str(paths[0]), str(paths[1]), str(paths[2])


async def test_https_webhooks_and_one_tls_setting_per_address(tmp_path: Path) -> None:
    certfile, keyfile, cafile = tls_files(tmp_path)
    port = free_port()
    sink = FakeSink()
    async with open_shared() as shared:
        context = Context(route="h", shared=shared)
        listen_at = f"127.0.0.1:{port}"
        async with running_source(
            sink, context=context, listen=listen_at, certfile=certfile, keyfile=keyfile
        ) as (url, _, source):
            assert url.startswith("https://")
            assert source.describe().startswith("http https://127.0.0.1:")
            verify = ssl.create_default_context(cafile=cafile)
            async with httpx.AsyncClient(verify=verify, trust_env=False) as client:
                assert (await client.post(f"{url}/hooks", content=b"s")).status_code == 204
            # Another route on the same address without TLS cannot share the server.
            plain = HttpSource(HttpSourceConfig(listen=f"127.0.0.1:{port}", path="/p"), context)
            with pytest.raises(ValueError, match="other TLS files"):
                async with plain.open():
                    pass  # pragma: no cover
    assert [m.body for b in sink.batches for m in b] == [b"s"]


async def test_other_code_mounts_paths_and_may_replace_healthz(
    client: httpx.AsyncClient,
) -> None:
    async def metrics(scope: Any, receive: Any, send: Any) -> None:
        await respond(send, 200, b"metrics 1\n")

    async with open_shared() as shared:
        context = Context(route="service", shared=shared)
        address = f"127.0.0.1:{free_port()}"
        async with running_source(FakeSink(), context=context, listen=address) as (url, _, source):
            async with listen(context, address) as listener:
                assert listener is source.listener  # the same server
                with listener.mount("/metrics", metrics), listener.mount("/healthz", metrics):
                    assert (await client.get(f"{url}/metrics")).text == "metrics 1\n"
                    assert (await client.get(f"{url}/healthz")).text == "metrics 1\n"
                    with pytest.raises(ValueError, match="already served"):
                        with listener.mount("/metrics", metrics):
                            pass  # pragma: no cover
                assert (await client.get(f"{url}/healthz")).text == "not running: /metrics\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage=st.binary(min_size=1, max_size=300))
def test_whatever_bytes_arrive_the_listener_keeps_serving(garbage: bytes) -> None:
    async def main() -> None:
        with trio.fail_after(20):
            await exchange()

    async def exchange() -> None:
        sink = FakeSink()
        async with running_source(sink, max_body=100) as (url, route, _):
            host, port = url.removeprefix("http://").split(":")
            for prefix in (b"", b"POST /hooks HTTP/1.1\r\nhost: x\r\n"):
                stream = await trio.open_tcp_stream(host, int(port))
                async with stream:
                    with trio.move_on_after(0.5):
                        await stream.send_all(prefix + garbage)
                        await stream.send_eof()
                        while await stream.receive_some(4096):
                            pass
            async with httpx.AsyncClient(trust_env=False) as client:
                assert (await client.post(f"{url}/hooks", content=b"ok")).status_code == 204
            assert route.stats.received <= 3  # at most the good one and two lucky requests

    trio.run(main)


async def test_requests_past_max_pending_get_503_before_their_body_is_read(
    client: httpx.AsyncClient,
) -> None:
    sink = FakeSink()
    sink.gate = trio.Event()
    async with running_source(sink, max_pending=2) as (url, route, _):
        answers: list[int] = []

        async def post(body: bytes) -> None:
            answers.append((await client.post(f"{url}/hooks", content=body)).status_code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(post, b"1")
            nursery.start_soon(post, b"2")
            await wait_until(lambda: route.stats.received == 2)
            refused = await client.post(f"{url}/hooks", content=b"3")
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "5"
            sink.gate.set()
        assert answers == [204, 204]
        assert (await client.post(f"{url}/hooks", content=b"4")).status_code == 204
    assert sorted(m.body for b in sink.batches for m in b) == [b"1", b"2", b"4"]


async def test_a_webhook_not_stored_within_answer_timeout_gets_503_and_stays_in_flight(
    client: httpx.AsyncClient,
) -> None:
    sink = FakeSink()
    sink.gate = trio.Event()
    async with running_source(sink, answer_timeout=0.3) as (url, route, _):
        response = await client.post(f"{url}/hooks", content=b"slow")
        assert response.status_code == 503
        assert route.in_flight == 1  # not dropped: the sink may still store it
        sink.gate.set()
        await wait_until(lambda: route.stats.written == 1)
    assert [m.body for b in sink.batches for m in b] == [b"slow"]
