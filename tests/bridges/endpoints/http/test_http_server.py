"""The http family's own HTTP/1.1 server, on real sockets: answers a well-behaved client
always reads (a 413 mid-upload), connection storms, and the HTTP/1.1 it speaks."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
from http_helpers import Recorder, receiver, running_source
from test_http_flood import address, slow_body

from bridges.endpoints.http import ListenAddress, open_listener, respond
from bridges.testing import FakeSink


@pytest.mark.deadline(60)
async def test_a_413_mid_upload_is_read_by_the_client_every_time() -> None:
    """The server answers before the body is in and closes: it half-closes and reads on,
    so the client (still sending) reads the 413 instead of a reset."""
    sink = FakeSink()
    body = b"x" * (512 * 1024)
    statuses = []
    async with running_source(sink, max_body=1000) as (url, route, source):
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            for _ in range(40):
                try:
                    statuses.append((await client.post(f"{url}/hooks", content=body)).status_code)
                except httpx.TransportError as exc:
                    statuses.append(repr(exc))  # type: ignore[arg-type]
            assert (await client.post(f"{url}/hooks", content=b"ok")).status_code == 204
        assert route.stats.received == 1
        assert source.refused["max_body"] == 40
    assert statuses == [413] * 40, statuses


@pytest.mark.deadline(60)
async def test_a_storm_of_connections_closing_at_once_leaves_the_listener_serving() -> None:
    """340 slow bodies (300 addresses, 40 from one) closed all at once, five times over:
    the listener never stops, so its route never restarts, and the next webhook is stored."""
    sink = FakeSink()
    locals_ = [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(300)] + ["127.0.0.2"] * 40
    async with running_source(sink) as (url, route, source):
        listener = source.listener
        restarts = route.stats.restarts
        for _ in range(5):
            opened: list[int] = []
            answers: list[bytes] = []
            async with trio.open_nursery() as storm:
                for local in locals_:
                    storm.start_soon(slow_body, url, local, opened, answers)
                while len(opened) < len(locals_):  # noqa: ASYNC110  # (counted by the tasks)
                    await trio.sleep(0.02)
                await trio.sleep(0.2)
                storm.cancel_scope.cancel()  # every connection closes at once
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            assert (await client.post(f"{url}/hooks", content=b"ok")).status_code == 204
        assert source.listener is listener
        assert route.stats.restarts == restarts
    assert [m.body for b in sink.batches for m in b] == [b"ok"]


async def exchange(url: str, data: bytes) -> bytes:
    """Send ``data`` on one connection, half-close, read until the server closes."""
    stream = await trio.open_tcp_stream(*address(url))
    answer = b""
    async with stream:
        await stream.send_all(data)
        with trio.move_on_after(5):
            while chunk := await stream.receive_some(65536):
                answer += chunk
    return answer


async def test_keep_alive_pipelining_head_and_connection_close() -> None:
    recorder = Recorder(default=200)
    request = b"POST /in HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhi"
    async with receiver(recorder) as listener:
        answer = await exchange(
            listener.url,
            request * 3
            + b"HEAD /in HTTP/1.1\r\nhost: x\r\n\r\n"
            + b"GET /nowhere HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
    assert answer.count(b"HTTP/1.1 200 OK\r\n") == 4
    assert answer.endswith(
        b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"connection: close\r\ncontent-length: 10\r\n\r\nnot found\n"
    )
    assert [r[3] for r in recorder.requests] == [b"hi", b"hi", b"hi", b""]
    assert [r[0] for r in recorder.requests] == ["POST", "POST", "POST", "HEAD"]


async def test_chunked_bodies_and_expect_100_continue() -> None:
    recorder = Recorder(default=204)
    async with receiver(recorder) as listener:
        chunked = await exchange(
            listener.url,
            b"POST /in HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n"
            b"\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        stream = await trio.open_tcp_stream(*address(listener.url))
        async with stream:
            await stream.send_all(
                b"POST /in HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 3\r\n\r\n"
            )
            assert await stream.receive_some(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
            await stream.send_all(b"xyz")
            assert (await stream.receive_some(100)).startswith(b"HTTP/1.1 204 No Content\r\n")
    assert chunked.startswith(b"HTTP/1.1 204 No Content\r\n")
    assert [r[3] for r in recorder.requests] == [b"abcde", b"xyz"]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"\x16\x03\x01garbage\r\n\r\n", b"400"),
        (b"POST /in HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * 40_000 + b"\r\n\r\n", b"431"),
        (b"POST /%ff HTTP/1.1\r\nhost: x\r\n\r\n", b"400"),
        (
            b"GET /in HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
            b"400",
        ),
        (
            b"POST /in HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n"
            b"transfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            b"400",
        ),
    ],
    ids=["not-http", "head-too-large", "bad-path", "upgrade", "length-and-chunked"],
)
async def test_what_is_not_plain_http_gets_4xx_and_the_connection_closes(
    data: bytes, status: bytes
) -> None:
    recorder = Recorder()
    async with receiver(recorder) as listener:
        answer = await exchange(listener.url, data)
        assert answer.startswith(b"HTTP/1.1 " + status), answer[:100]
        assert b"connection: close\r\n" in answer
        async with httpx.AsyncClient(trust_env=False) as client:
            assert (await client.post(f"{listener.url}/in", content=b"ok")).status_code == 200
    assert [r[3] for r in recorder.requests] == [b"ok"]


async def test_a_stop_lets_the_request_in_progress_answer_and_closes_idle_connections() -> None:
    release = trio.Event()

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await release.wait()
        await respond(send, 200, b"late\n")

    answers: list[bytes] = []

    async def post(url: str) -> None:
        request = b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
        answers.append(await exchange(url, request))

    async with trio.open_nursery() as nursery:
        async with open_listener(ListenAddress("127.0.0.1", 0)) as listener:
            mounted = listener.mount("/slow", slow)
            with mounted:
                idle = await trio.open_tcp_stream(*address(listener.url))
                nursery.start_soon(post, listener.url)
                await trio.sleep(0.2)
                nursery.start_soon(_release_soon, release)
                stopped = trio.current_time()
        took = trio.current_time() - stopped
        with trio.fail_after(2):
            assert await idle.receive_some(100) == b""  # closed at the stop, not answered
        await idle.aclose()
    assert took < 2.0
    assert answers[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"connection: close\r\n" in answers[0]
    assert answers[0].endswith(b"late\n")


async def _release_soon(release: trio.Event) -> None:
    await trio.sleep(0.3)
    release.set()
