"""The http sink against a real HTTP server on loopback (the family's own), with real retries."""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import standardwebhooks
import trio
import trustme
from http_helpers import Recorder, receiver

from bridges import Context, InvalidSetting, Message, RetryPolicy, Route
from bridges.endpoints.http import (
    HttpSink,
    HttpSinkConfig,
    HttpTransient,
    ListenAddress,
    open_listener,
)
from bridges.testing import FakeSink, FakeSource, messages, wait_until

SECRET = "whsec_" + base64.b64encode(b"fedcba9876543210fedcba9876543210").decode()
CTX = Context(route="o", role="sink")
FAST = RetryPolicy(attempts=5, initial=0.02, max=0.1, jitter=0)


def sink_for(url: str, **settings: Any) -> HttpSink:
    return HttpSink(HttpSinkConfig(url=url, **settings), CTX)


async def test_each_message_is_one_signed_request_a_receiver_can_verify() -> None:
    recorder = Recorder()
    items = [
        Message(b'{"n": %d}' % i, {"n": str(i), "content-type": "application/json"}, f"id-{i}")
        for i in range(5)
    ]
    async with receiver(recorder) as server:
        sink = sink_for(
            server.url + "/in?n={header:n}",
            signature="standard-webhooks",
            secret=SECRET,
            headers={"x-customer": "c-{header:n}"},
        )
        source = FakeSource(items)
        await Route("o", source, sink, batch_count=5, batch_time=0.05).run()
    assert source.acked == [f"id-{i}" for i in range(5)]
    assert sorted(recorder.ids()) == [f"id-{i}" for i in range(5)]
    verifier = standardwebhooks.Webhook(SECRET)
    for method, path, headers, body in recorder.requests:
        assert (method, path) == ("POST", "/in")
        assert headers["content-type"] == "application/json"
        n = int(body[6:-1])
        assert headers["x-customer"] == f"c-{n}"
        assert verifier.verify(body, headers) == {"n": n}  # the PyPI package agrees
        with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
            verifier.verify(body + b" ", headers)


async def test_github_signature_and_bearer_token_on_the_way_out() -> None:
    recorder = Recorder()
    async with receiver(recorder) as server:
        sink = sink_for(
            server.url + "/in", method="PUT", signature="github", secret="gh", bearer_token="t0k"
        )
        await Route("o", FakeSource(messages(2)), sink).run()
    for method, _, headers, body in recorder.requests:
        assert method == "PUT"
        digest = hmac.new(b"gh", body, hashlib.sha256).hexdigest()
        assert headers["x-hub-signature-256"] == f"sha256={digest}"
        assert headers["authorization"] == "Bearer t0k"
        assert headers["content-type"] == "application/octet-stream"


async def test_500_then_200_is_retried_and_delivered_once_more() -> None:
    recorder = Recorder(script=[(500, {}, b"boom")])
    async with receiver(recorder) as server:
        source = FakeSource(messages(1))
        route = Route("o", source, sink_for(server.url + "/in"), retry=FAST)
        await route.run()
    assert source.acked == ["m0"]
    assert recorder.ids() == ["m0", "m0"]  # the same webhook-id: the receiver can dedupe
    assert route.stats.retries == 1


async def test_a_receiver_that_is_down_is_retried_until_it_is_up() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    recorder = Recorder()
    source = FakeSource(messages(3))
    retry = RetryPolicy(attempts=50, initial=0.05, max=0.1, jitter=0)
    route = Route("o", source, sink_for(f"http://127.0.0.1:{port}/in"), retry=retry)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route.run)
        await wait_until(lambda: route.stats.retries >= 2)
        assert source.acked == []
        async with receiver(recorder, port=port):
            await route.finished.wait()
    assert source.acked == ["m0", "m1", "m2"]
    assert sorted(recorder.ids()) == ["m0", "m1", "m2"]


async def test_a_4xx_is_dead_lettered_with_the_status_and_the_rest_is_sent_once() -> None:
    recorder = Recorder(script=[(200, {}, b""), (400, {}, b"invalid order " + b"x" * 500)])
    dead = FakeSink()
    async with receiver(recorder) as server:
        source = FakeSource(messages(4))
        sink = sink_for(server.url + "/in", concurrency=1)
        await Route("o", source, sink, dead_letter=dead, batch_count=4, batch_time=0.05).run()
    assert sorted(source.acked) == ["m0", "m1", "m2", "m3"]
    letters = [m for b in dead.batches for m in b]
    assert [m.id for m in letters] == ["m1"]
    error = letters[0].headers["bridge-error"]
    assert "HTTP 400" in error
    assert "invalid order" in error
    assert len(error) < 400  # the first 200 bytes of the answer, not all of it
    assert recorder.ids() == ["m0", "m1", "m2", "m3"]  # nothing sent twice


async def test_only_the_requests_that_failed_are_sent_again() -> None:
    recorder = Recorder(script=[(200, {}, b""), (503, {}, b""), (200, {}, b"")])
    async with receiver(recorder) as server:
        source = FakeSource(messages(4))
        sink = sink_for(server.url + "/in", concurrency=1)
        await Route("o", source, sink, retry=FAST, batch_count=4, batch_time=0.05).run()
    assert source.acked == ["m0", "m1", "m2", "m3"]
    assert recorder.ids() == ["m0", "m1", "m2", "m3", "m1"]


async def test_retry_after_is_the_shortest_wait() -> None:
    recorder = Recorder(script=[(429, {"retry-after": "1"}, b"slow down")])
    async with receiver(recorder) as server:
        source = FakeSource(messages(1))
        await Route("o", source, sink_for(server.url + "/in"), retry=FAST).run()
    assert source.acked == ["m0"]
    assert len(recorder.times) == 2
    assert recorder.times[1] - recorder.times[0] >= 0.95  # not FAST's 0.02 s


async def test_a_message_the_templates_cannot_fill_is_rejected_alone() -> None:
    recorder = Recorder()
    dead = FakeSink()
    items = [Message(b"a", {"to": "in"}, "a"), Message(b"b", {}, "b")]
    async with receiver(recorder) as server:
        source = FakeSource(items)
        await Route("o", source, sink_for(server.url + "/{header:to}"), dead_letter=dead).run()
    assert recorder.ids() == ["a"]
    assert [m.id for b in dead.batches for m in b] == ["b"]
    assert "'to'" in dead.batches[0][0].headers["bridge-error"]


@pytest.mark.parametrize("http2", [False, True])
async def test_https_with_a_private_ca_and_http2(tmp_path: Path, http2: bool) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile, cafile = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(certfile)
    cert.private_key_pem.write_to_path(keyfile)
    ca.cert_pem.write_to_path(cafile)
    recorder = Recorder()
    address = ListenAddress("127.0.0.1", 0, str(certfile), str(keyfile))
    async with open_listener(address) as server:
        assert server.url.startswith("https://")
        with server.mount("/in", recorder):
            good = sink_for(server.url + "/in", cafile=str(cafile), http2=http2)
            source = FakeSource(messages(2))
            await Route("o", source, good).run()
            assert source.acked == ["m0", "m1"]
            # Without the CA the certificate is refused (a transient error: retried, then nacked).
            untrusted = FakeSource(messages(1), requeue=False)
            once = RetryPolicy(attempts=1, initial=0.01, jitter=0)
            route = Route("o", untrusted, sink_for(server.url + "/in"), retry=once)
            await route.run()
            assert untrusted.acked == []
            assert [i for i, _ in untrusted.nacked] == ["m0"]
            assert "CERTIFICATE_VERIFY_FAILED" in str(untrusted.nacked[0][1])
            # insecure = true verifies nothing (and says so in the log).
            anyway = FakeSource(messages(1, prefix="i"))
            await Route("o", anyway, sink_for(server.url + "/in", insecure=True)).run()
            assert anyway.acked == ["i0"]
    assert sorted(recorder.ids()) == ["i0", "m0", "m1"]


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"url": "ftp://x/"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": "{header:u}"}, "url"),
        ({"url": "http://x/{nope}"}, "url"),
        ({"url": "http://x/", "headers": {"webhook-id": "1"}}, "headers.webhook-id"),
        ({"url": "http://x/", "signature": "standard-webhooks"}, "secret"),
        ({"url": "http://x/", "signature": "github", "secret": ""}, "secret"),
        ({"url": "http://x/", "secret": "s"}, "secret"),
        ({"url": "http://x/", "cafile": "ca.pem", "insecure": True}, "insecure"),
    ],
)
def test_settings_that_cannot_work_are_refused(settings: dict[str, Any], key: str) -> None:
    with pytest.raises(InvalidSetting) as info:
        HttpSink(HttpSinkConfig(**settings), CTX)
    assert info.value.key == key


def test_secrets_are_not_in_the_description_or_the_repr() -> None:
    config = HttpSinkConfig(
        url="https://user:pw@hooks.example/services/T0K3N?token=abc",
        signature="github",
        secret="s3cr3t",
        bearer_token="b34r3r",
    )
    text = repr(config) + HttpSink(config, CTX).describe()
    for secret in ("s3cr3t", "b34r3r"):
        assert secret not in text
    assert "pw" not in HttpSink(config, CTX).describe()
    assert "abc" not in HttpSink(config, CTX).describe()
    assert "T0K3N" not in HttpSink(config, CTX).describe()
    assert HttpSink(config, CTX).describe() == "http POST https://hooks.example/..."


async def _trickle(stream: trio.SocketStream, answer: bytes) -> None:
    """A target that reads a request, then answers one byte every 50 ms."""
    with trio.move_on_after(30):
        await stream.receive_some()
        for byte in answer:
            await stream.send_all(bytes([byte]))
            await trio.sleep(0.05)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\n" + b"x-padding: " + b"p" * 500, id="headers"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 600\r\n\r\n" + b"b" * 600, id="body"),
    ],
)
async def test_timeout_is_a_deadline_for_the_whole_request(answer: bytes) -> None:
    async with trio.open_nursery() as nursery:
        serve = partial(trio.serve_tcp, partial(_trickle, answer=answer), 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        port = listeners[0].socket.getsockname()[1]
        sink = sink_for(f"http://127.0.0.1:{port}/in", timeout=0.5)
        started = trio.current_time()
        async with sink.open() as writer:
            with pytest.raises(HttpTransient, match=r"no complete answer within timeout = 0.5 s"):
                await writer.write(messages(1))
        # Every byte resets httpx's own read timeout: only a deadline ends it.
        assert trio.current_time() - started < 2.0
        nursery.cancel_scope.cancel()
