"""The http sink's own HTTP/1.1 client against scripted raw servers: answer framings,
keep-alive reuse per worker, a connection the server closed while idle, URL credentials."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from functools import partial

import pytest
import trio

from bridges import Context, Route
from bridges.endpoints.http import HttpSink, HttpSinkConfig
from bridges.testing import FakeSource, messages

CTX = Context(route="o", role="sink")


class Peer:
    """One connection's reads: whole requests (head and ``content-length`` body)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def request(self) -> bytes | None:
        while b"\r\n\r\n" not in self.buffer:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.buffer += data
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += await self.stream.receive_some(65536)
        self.buffer = rest[length:]
        return head + b"\r\n\r\n" + rest[:length]


Handler = Callable[[Peer], Awaitable[None]]


async def serve(nursery: trio.Nursery, handler: Handler) -> str:
    async def connection(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                await handler(Peer(stream))
            except trio.BrokenResourceError:
                pass

    listeners = await nursery.start(partial(trio.serve_tcp, connection, 0, host="127.0.0.1"))
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n"
        b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.0 200 OK\r\n\r\nthe answer ends when the connection does",
    ],
    ids=["chunked", "100-continue", "103-early-hints", "until-close"],
)
async def test_every_framing_of_a_2xx_answer_is_delivered(answer: bytes) -> None:
    requests: list[bytes] = []

    async def handler(peer: Peer) -> None:
        while (request := await peer.request()) is not None:
            requests.append(request)
            await peer.stream.send_all(answer)
            if b"HTTP/1.0" in answer:
                return

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        source = FakeSource(messages(3))
        await Route("o", source, HttpSink(HttpSinkConfig(url=url + "/in"), CTX)).run()
        nursery.cancel_scope.cancel()
    assert source.acked == ["m0", "m1", "m2"]
    assert len(requests) == 3


async def test_each_worker_keeps_its_connection_across_batches() -> None:
    connections: list[int] = []

    async def handler(peer: Peer) -> None:
        connections.append(1)
        while await peer.request() is not None:
            await peer.stream.send_all(b"HTTP/1.1 204 No Content\r\n\r\n")

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        source = FakeSource(messages(120))
        sink = HttpSink(HttpSinkConfig(url=url + "/in", concurrency=4), CTX)
        await Route("o", source, sink, batch_count=10, batch_time=0.0).run()
        nursery.cancel_scope.cancel()
    assert len(source.acked) == 120
    assert len(connections) <= 4  # 12 batches, each on the same 4 connections


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    """A server that closes each connection after one answer (without saying so): the next
    request goes on a new connection, and every message is sent exactly once."""
    seen: list[bytes] = []

    async def handler(peer: Peer) -> None:
        request = await peer.request()
        if request is not None:
            seen.append(request.rsplit(b"\r\n\r\n", 1)[1])
            await peer.stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        source = FakeSource(messages(6))
        sink = HttpSink(HttpSinkConfig(url=url + "/in", concurrency=1), CTX)
        await Route("o", source, sink, batch_count=1, batch_time=0.0).run()
        nursery.cancel_scope.cancel()
    assert source.acked == [f"m{i}" for i in range(6)]
    assert len(seen) == 6


async def test_the_request_line_host_and_url_credentials() -> None:
    requests: list[bytes] = []

    async def handler(peer: Peer) -> None:
        while (request := await peer.request()) is not None:
            requests.append(request)
            await peer.stream.send_all(b"HTTP/1.1 204 No Content\r\n\r\n")

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        target = url.replace("http://", "http://us%20er:p%40ss@") + "/in/caf%C3%A9?x=1&y=%2F"
        source = FakeSource(messages(1))
        await Route("o", source, HttpSink(HttpSinkConfig(url=target), CTX)).run()
        nursery.cancel_scope.cancel()
    head = requests[0].split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"POST /in/caf%C3%A9?x=1&y=%2F HTTP/1.1"
    assert f"host: {url.removeprefix('http://')}".encode() in head
    basic = base64.b64encode(b"us er:p@ss")
    assert b"authorization: Basic " + basic in head
    assert b"webhook-id: m0" in head
