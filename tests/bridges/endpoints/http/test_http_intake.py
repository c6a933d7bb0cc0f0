"""The webhook intake's per-request path: a burst is taken and acked as a group, a body
that is all here needs no timer, and the timers that replaced per-request scopes
(head, accept and answer timeouts) still fire."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
from test_http_flood import address

from bridges import BulkReceiver, Context
from bridges.endpoints.http import HttpSource, HttpSourceConfig, ListenAddress, open_listener
from bridges.endpoints.http import listener as listener_module
from bridges.endpoints.http.server import DEFER, READY_BODY
from bridges.testing import wait_until

CTX = Context(route="h")


def source(**settings: Any) -> HttpSource:
    return HttpSource(HttpSourceConfig(listen="127.0.0.1:0", path="/hooks", **settings), CTX)


async def post_all(url: str, count: int, statuses: list[int]) -> None:
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:

        async def one(number: int) -> None:
            answer = await client.post(url, content=b"m%d" % number)
            statuses.append(answer.status_code)

        async with trio.open_nursery() as nursery:
            for number in range(count):
                nursery.start_soon(one, number)


@pytest.mark.deadline(30)
async def test_a_burst_is_taken_in_one_call_and_answered_by_one_ack_all() -> None:
    hooks = source()
    statuses: list[int] = []
    async with hooks.open() as receiver, trio.open_nursery() as nursery:
        assert isinstance(receiver, BulkReceiver)
        assert hooks.listener is not None
        nursery.start_soon(post_all, f"{hooks.listener.url}/hooks", 8, statuses)
        await wait_until(lambda: receiver.waiting == 8)
        envelopes = await receiver.receive_some(100)
        assert len(envelopes) == 8
        assert receiver.waiting == 0
        assert sorted(e.message.body for e in envelopes) == sorted(b"m%d" % n for n in range(8))
        assert len({e.settle_key for e in envelopes}) == 1  # (one run: one ack_all)
        await envelopes[1].nack(None)
        await envelopes[0].ack_all(envelopes)
    assert sorted(statuses) == [204] * 7 + [503]


@pytest.mark.deadline(30)
async def test_receive_some_takes_at_most_what_it_is_asked_oldest_first() -> None:
    hooks = source()
    statuses: list[int] = []
    async with hooks.open() as receiver, trio.open_nursery() as nursery:
        assert hooks.listener is not None
        nursery.start_soon(post_all, f"{hooks.listener.url}/hooks", 5, statuses)
        await wait_until(lambda: receiver.waiting == 5)
        first = await receiver.receive_some(2)
        rest = await receiver.receive_some(10)
        assert (len(first), len(rest)) == (2, 3)
        for envelope in [*first, *rest]:
            await envelope.ack()
    assert statuses == [204] * 5


@pytest.mark.deadline(30)
async def test_a_webhook_the_route_never_takes_gets_503_and_is_never_handed_out() -> None:
    hooks = source(accept_timeout=0.3)
    async with hooks.open() as receiver:
        assert hooks.listener is not None
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            started = trio.current_time()
            answer = await client.post(f"{hooks.listener.url}/hooks", content=b"late")
            took = trio.current_time() - started
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "5"
        assert 0.25 <= took < 2.0
        assert receiver.waiting == 0
        with trio.move_on_after(0.2) as waited:
            await receiver.receive_some(10)
        assert waited.cancelled_caught  # nothing was left queued


@pytest.mark.deadline(30)
async def test_a_taken_webhook_not_settled_in_time_gets_503_and_a_late_ack_is_harmless() -> None:
    hooks = source(answer_timeout=0.3)
    statuses: list[int] = []
    async with hooks.open() as receiver, trio.open_nursery() as nursery:
        assert hooks.listener is not None
        nursery.start_soon(post_all, f"{hooks.listener.url}/hooks", 1, statuses)
        (envelope,) = await receiver.receive_some(10)
        await wait_until(lambda: statuses == [503])
        await envelope.ack()  # stored after all: the sender's retry is a duplicate, no loss
    assert statuses == [503]


@pytest.mark.deadline(30)
async def test_closing_answers_what_is_queued_and_unsettled_with_503() -> None:
    hooks = source()
    statuses: list[int] = []
    async with trio.open_nursery() as nursery:
        async with hooks.open() as receiver:
            assert hooks.listener is not None
            nursery.start_soon(post_all, f"{hooks.listener.url}/hooks", 3, statuses)
            await wait_until(lambda: receiver.waiting == 3)
            await receiver.receive_some(1)  # taken, never settled
        await wait_until(lambda: len(statuses) == 3)
    assert statuses == [503] * 3


async def test_a_body_that_is_all_here_is_handed_over_whole_and_one_still_arriving_is_not() -> None:
    seen: list[tuple[bytes | None, bytes]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        ready = scope["extensions"][READY_BODY]()
        rest = b""
        if ready is None:
            while True:
                event = await receive()
                rest += event.get("body", b"")
                if not event.get("more_body"):
                    break
        seen.append((ready, rest))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with open_listener(ListenAddress("127.0.0.1", 0)) as listener:
        with listener.mount("/in", app):
            async with await trio.open_tcp_stream(*address(listener.url)) as stream:
                whole = b"POST /in HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello"
                await stream.send_all(whole + whole)  # two, pipelined, keep-alive
                await stream.send_all(whole.replace(b"5\r\n\r\nhello", b"6\r\n\r\nab"))
                await wait_until(lambda: len(seen) == 2)
                await trio.sleep(0.05)
                await stream.send_all(b"cdef")
                await wait_until(lambda: len(seen) == 3)
                answers = b""
                while answers.count(b"HTTP/1.1 204") < 3:
                    answers += await stream.receive_some(4096)
    assert seen == [(b"hello", b""), (b"hello", b""), (None, b"abcdef")]
    assert b"connection: close" not in answers.lower()


@pytest.mark.deadline(30)
async def test_idle_and_slow_head_connections_close_at_head_timeout_busy_ones_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listener_module, "HEAD_TIMEOUT", 0.5)
    hooks = source()
    async with hooks.open() as receiver, trio.open_nursery() as nursery:

        async def settle_all() -> None:
            while True:
                for envelope in await receiver.receive_some(100):
                    await envelope.ack()

        nursery.start_soon(settle_all)
        assert hooks.listener is not None
        host, port = address(hooks.listener.url)
        request = b"POST /hooks HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nok"
        idle = await trio.open_tcp_stream(host, port)
        partial = await trio.open_tcp_stream(host, port)
        busy = await trio.open_tcp_stream(host, port)
        await idle.send_all(request)
        await partial.send_all(request[:20])
        started = trio.current_time()
        answers = 0
        while trio.current_time() - started < 1.2:  # busy: a request every 0.1 s
            await busy.send_all(request)
            got = b""
            while b"\r\n\r\n" not in got:
                got += await busy.receive_some(4096)
            answers += got.startswith(b"HTTP/1.1 204")
            await trio.sleep(0.1)
        for stream, answered in ((idle, True), (partial, False)):
            data = b""
            with trio.fail_after(2):
                while chunk := await stream.receive_some(4096):
                    data += chunk
            assert data.startswith(b"HTTP/1.1 204") == answered  # then closed (b"")
        assert answers >= 5
        await busy.send_all(request)
        assert (await busy.receive_some(4096)).startswith(b"HTTP/1.1 204")
        for stream in (idle, partial, busy):
            await stream.aclose()
        nursery.cancel_scope.cancel()


class Deferring:
    """An app that defers every answer; the test gives them (in ``answers``)."""

    def __init__(self) -> None:
        self.answers: list[Any] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["extensions"][READY_BODY]() is not None
        self.answers.append(scope["extensions"][DEFER]())


async def read_answers(stream: trio.SocketStream, count: int) -> bytes:
    data = b""
    with trio.fail_after(5):
        while data.count(b"HTTP/1.1 ") < count:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
    return data


@pytest.mark.deadline(30)
async def test_deferred_answers_go_out_in_order_and_the_next_app_waits_for_its_turn() -> None:
    app = Deferring()
    async with open_listener(ListenAddress("127.0.0.1", 0)) as listener:
        with listener.mount("/in", app):
            async with await trio.open_tcp_stream(*address(listener.url)) as stream:
                one = b"POST /in HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\na"
                await stream.send_all(one + one)  # pipelined
                await wait_until(lambda: len(app.answers) == 1)
                await trio.sleep(0.1)
                assert len(app.answers) == 1  # the second waits for the first's answer
                app.answers[0](201, [], b"first")
                await wait_until(lambda: len(app.answers) == 2)
                app.answers[1](202, [], b"second")
                app.answers[1](500, [], b"again")  # (a second call does nothing)
                data = await read_answers(stream, 2)
    assert data.index(b"201 Created") < data.index(b"first") < data.index(b"202 Accepted")
    assert b"again" not in data


@pytest.mark.deadline(30)
async def test_a_deferred_answer_reaches_a_peer_that_half_closed_and_outlives_head_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listener_module, "HEAD_TIMEOUT", 0.3)
    app = Deferring()
    async with open_listener(ListenAddress("127.0.0.1", 0)) as listener:
        with listener.mount("/in", app):
            async with await trio.open_tcp_stream(*address(listener.url)) as stream:
                await stream.send_all(b"POST /in HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\na")
                await stream.send_eof()
                await wait_until(lambda: len(app.answers) == 1)
                await trio.sleep(0.6)  # longer than head_timeout: the answer is still owed
                app.answers[0](204, [], b"")
                data = await read_answers(stream, 1)
                assert data.startswith(b"HTTP/1.1 204")
                assert await stream.receive_some(100) == b""  # then closed


@pytest.mark.deadline(30)
async def test_a_stop_waits_for_a_deferred_answer_then_closes() -> None:
    app = Deferring()
    async with trio.open_nursery() as nursery:
        async with open_listener(ListenAddress("127.0.0.1", 0)) as listener:
            with listener.mount("/in", app):
                stream = await trio.open_tcp_stream(*address(listener.url))
                await stream.send_all(b"POST /in HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\na")
                await wait_until(lambda: len(app.answers) == 1)

                async def answer_soon() -> None:
                    await trio.sleep(0.3)
                    app.answers[0](204, [], b"")

                nursery.start_soon(answer_soon)
        data = await read_answers(stream, 1)  # (the listener has stopped by now)
        assert data.startswith(b"HTTP/1.1 204")
        assert b"connection: close" in data.lower()
        await stream.aclose()
