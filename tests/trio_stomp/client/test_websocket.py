"""STOMP over WebSocket: the frame splitter, the stream adapter, the broker's
listener, and interop with trio-websocket and RabbitMQ Web-STOMP."""

from __future__ import annotations

import functools
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Literal

import pytest
import trio
import trio.lowlevel
import trio.testing
import trio_websocket

import trio_stomp
from trio_stomp._transport import open_stream
from trio_stomp._url import Endpoint
from trio_stomp._websocket import (
    WebSocketStream,
    accept_websocket,
    connect_websocket,
)
from trio_stomp.broker import Broker, Limits, open_broker, serve_broker
from trio_stomp.frame import Frame, FrameParser, encode

from conftest import REAL_BROKERS, all_tasks, require_real_broker

# -- the stream adapter over memory streams ------------------------------------------

StreamPair = tuple[trio.abc.Stream, trio.abc.Stream]


async def _upgrade(
    client_side: trio.abc.Stream, server_side: trio.abc.Stream, close_timeout: float = 1.0
) -> tuple[WebSocketStream, WebSocketStream]:
    done: dict[str, WebSocketStream] = {}

    async def client() -> None:
        done["client"] = await connect_websocket(
            client_side, host="test", port=80, resource="/ws", close_timeout=close_timeout
        )

    async def server() -> None:
        done["server"] = await accept_websocket(server_side, close_timeout=close_timeout)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client)
        nursery.start_soon(server)
    return done["client"], done["server"]


async def _memory_pair() -> tuple[WebSocketStream, WebSocketStream]:
    return await _upgrade(*trio.testing.memory_stream_pair(), close_timeout=0.2)


async def _lockstep_pair() -> tuple[WebSocketStream, WebSocketStream]:
    return await _upgrade(*trio.testing.lockstep_stream_pair(), close_timeout=0.2)


@pytest.mark.deadline(60)
async def test_stream_passes_trios_two_way_stream_checks() -> None:
    await trio.testing.check_two_way_stream(_memory_pair, _lockstep_pair)


async def test_stream_negotiates_the_best_stomp_subprotocol() -> None:
    client, server = await _memory_pair()
    assert client.subprotocol == server.subprotocol == "v12.stomp"
    await trio.aclose_forcefully(client)
    await trio.aclose_forcefully(server)


async def test_send_eof_sends_close_and_the_peer_reads_the_end() -> None:
    client, server = await _memory_pair()
    async with client, server:
        await server.send_all(b"ERROR\nmessage:bye\n\n\0")
        await server.send_eof()
        with pytest.raises(trio.ClosedResourceError):
            await server.send_all(b"more")
        assert await client.receive_some() == b"ERROR\nmessage:bye\n\n\0"
        assert await client.receive_some() == b""
        assert client.close_code == 1000
        # The client answered the Close: the server reads the end too.
        assert await server.receive_some() == b""
        with pytest.raises(trio.BrokenResourceError, match="closed the WebSocket"):
            await client.send_all(b"SEND\n\n\0")


async def test_text_messages_and_pings_from_the_peer() -> None:
    import wsproto.events as ev

    client, server = await _memory_pair()
    async with client, server:
        # Speak through the server's wsproto directly: a text message, a ping.
        data = server._ws.send(ev.Ping(b"p1")) + server._ws.send(ev.TextMessage("CONNECTED\n\n\0é"))
        await server.transport.send_all(data)
        assert await client.receive_some() == "CONNECTED\n\n\0é".encode()
        # The pong was answered by the client's receive_some.
        await server.transport.send_all(server._ws.send(ev.Ping(b"p2")))

        async def read_client() -> None:
            await client.receive_some()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_client)
            await trio.testing.wait_all_tasks_blocked()
            raw = await server.transport.receive_some()
            server._ws.receive_data(bytes(raw))
            pongs = [e for e in server._ws.events() if isinstance(e, ev.Pong)]
            assert [p.payload for p in pongs] == [b"p1", b"p2"]
            nursery.cancel_scope.cancel()


async def test_error_close_code_and_protocol_errors_are_broken_resource() -> None:
    import wsproto.events as ev

    client, server = await _memory_pair()
    async with client, server:
        await server.transport.send_all(server._ws.send(ev.CloseConnection(1011, "oops")))
        with pytest.raises(trio.BrokenResourceError, match=r"code 1011 \(oops\)"):
            await client.receive_some()

    client, server = await _memory_pair()
    async with client, server:
        await server.transport.send_all(b"\x8f\x00")  # opcode 0xF does not exist
        with pytest.raises(trio.BrokenResourceError, match="protocol error"):
            await client.receive_some()


async def test_large_messages_are_streamed_in_bounded_chunks() -> None:
    client, server = await _memory_pair()
    async with client, server:
        body = bytes(range(256)) * 8192  # 2 MiB
        frame = b"SEND\ncontent-length:%d\n\n" % len(body) + body + b"\0"
        got = bytearray()

        async def read() -> None:
            while len(got) < len(frame):
                chunk = await server.receive_some(1 << 20)
                assert len(chunk) <= 1 << 20
                got.extend(chunk)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await client.send_all(frame)
        assert got == frame


# -- the embedded broker's WebSocket listener -------------------------------------


@pytest.fixture
async def ws_broker() -> AsyncIterator[trio_stomp.broker.Broker]:
    async with open_broker(ws_port=0) as broker:
        yield broker


async def _round_trip(client: trio_stomp.Client, dest: str, bodies: list[bytes]) -> None:
    async with client.subscribe(dest, receipt=True) as sub:
        for body in bodies:
            await client.send(dest, body)
        await client.send(dest, b"last", receipt=True)
        got = []
        async for message in sub:
            got.append(message.body)
            if message.body == b"last":
                break
    assert got == [*bodies, b"last"]


async def test_round_trip_over_websocket(ws_broker: trio_stomp.broker.Broker) -> None:
    assert ws_broker.ws_url.startswith("ws://127.0.0.1:")
    assert ws_broker.ws_url.endswith("/ws")
    async with trio_stomp.connect(ws_broker.ws_url) as client:
        assert client.version == "1.2"
        bodies = [b"text", b"\0binary\0with\0NULs\0", bytes(range(256)), b"x" * (1 << 20)]
        await _round_trip(client, "/queue/ws", bodies)


async def test_websocket_and_tcp_clients_share_destinations(
    ws_broker: trio_stomp.broker.Broker,
) -> None:
    async with (
        trio_stomp.connect(ws_broker.ws_url) as ws_client,
        trio_stomp.connect(ws_broker.url) as tcp_client,
    ):
        async with ws_client.subscribe("/topic/t", receipt=True) as sub:
            await tcp_client.send("/topic/t", b"\0from tcp\0", receipt=True)
            async for message in sub:
                assert message.body == b"\0from tcp\0"
                break


async def test_heartbeats_flow_over_websocket(ws_broker: trio_stomp.broker.Broker) -> None:
    async with trio_stomp.connect(ws_broker.ws_url, heartbeat=(100, 100)) as client:
        assert client.heartbeat == (0.1, 0.1)
        await trio.sleep(0.6)  # several beats each way, none missed
        await client.send("/queue/hb", b"still here", receipt=True)


async def test_no_task_outlives_a_websocket_client(ws_broker: trio_stomp.broker.Broker) -> None:
    before = all_tasks()
    async with trio_stomp.connect(ws_broker.ws_url, heartbeat=(100, 100)) as client:
        async with client.subscribe("/queue/x"):
            assert len(all_tasks()) > len(before)
    assert all_tasks() == before


async def test_open_stream_gives_a_websocket_stream(ws_broker: trio_stomp.broker.Broker) -> None:
    stream = await open_stream(Endpoint.from_url(ws_broker.ws_url))
    async with stream:
        assert isinstance(stream, WebSocketStream)
        assert stream.subprotocol == "v12.stomp"


async def test_broker_answers_a_plain_http_request_with_an_error(
    ws_broker: trio_stomp.broker.Broker,
) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", int(ws_broker.ws_url.split(":")[2][:-3]))
    async with stream:
        await stream.send_all(b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while chunk := await stream.receive_some():
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400 ")
    async with trio_stomp.connect(ws_broker.ws_url) as client:  # still serving
        await client.send("/queue/x", b"x", receipt=True)


async def test_ws_url_to_a_plain_stomp_port_fails_clearly(
    ws_broker: trio_stomp.broker.Broker,
) -> None:
    url = ws_broker.url.replace("stomp://", "ws://") + "/ws"
    with pytest.raises(trio_stomp.ConnectFailed, match="WebSocket upgrade"):
        async with trio_stomp.connect(url, connect_timeout=5):
            pass


# -- the broker shutting down ---------------------------------------------------------

Stop = Literal["exit", "cancel"]


def _is_shutdown_error(data: bytes | str) -> bool:
    """Whether ``data`` is one frame, the ERROR of a broker that stops."""
    [frame] = FrameParser().feed(data if isinstance(data, bytes) else data.encode())
    assert isinstance(frame, Frame)
    return frame.command == "ERROR" and frame.headers["message"] == "broker shutting down"


@asynccontextmanager
async def _broker_stopped_by(
    stop: Stop, stopped: list[float], limits: Limits | None = None
) -> AsyncIterator[Broker]:
    """A broker with a WebSocket listener, stopped at the end of the block by leaving
    ``open_broker`` or by cancelling ``serve_broker``; appends how long stopping took."""
    if stop == "exit":
        async with open_broker(ws_port=0, limits=limits) as broker:
            yield broker
            start = trio.current_time()
    else:
        async with trio.open_nursery() as nursery:
            serve = functools.partial(serve_broker, ws_port=0, limits=limits)
            broker = await nursery.start(serve)
            yield broker
            start = trio.current_time()
            nursery.cancel_scope.cancel()
    stopped.append(trio.current_time() - start)


def _ws_port(broker: Broker) -> int:
    return Endpoint.from_url(broker.ws_url).port


@pytest.mark.parametrize("stop", ["exit", "cancel"])
async def test_broker_shutdown_sends_error_then_close_going_away(stop: Stop) -> None:
    """trio-websocket sees the ERROR, then a Close 1001 (1006 if the TCP
    connection were dropped without one)."""
    stopped: list[float] = []
    with trio.fail_after(3):
        async with trio.open_nursery() as nursery:
            async with _broker_stopped_by(stop, stopped) as broker:
                ws = await trio_websocket.connect_websocket_url(
                    nursery, broker.ws_url, subprotocols=["v12.stomp"]
                )
                await ws.send_message(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")
                connected = await ws.get_message()
                assert isinstance(connected, bytes)
                assert connected.startswith(b"CONNECTED\n")
            assert stopped[0] < 1.0  # the client answered the Close at once
            assert _is_shutdown_error(await ws.get_message())
            with pytest.raises(trio_websocket.ConnectionClosed):
                await ws.get_message()
            assert ws.closed is not None
            assert (ws.closed.code, ws.closed.reason) == (1001, "broker shutting down")


@pytest.mark.parametrize("stop", ["exit", "cancel"])
@pytest.mark.parametrize("scheme", ["stomp", "ws"])
async def test_client_sees_the_same_end_over_tcp_and_websocket(stop: Stop, scheme: str) -> None:
    stopped: list[float] = []
    failure: list[BaseException] = []

    async def client(url: str, task_status: trio.TaskStatus[None]) -> None:
        try:
            async with trio_stomp.connect(url, heartbeat=(0, 0)):
                task_status.started()
                await trio.sleep_forever()
        except trio_stomp.StompError as exc:
            failure.append(exc)

    with trio.fail_after(3):
        async with trio.open_nursery() as nursery:
            async with _broker_stopped_by(stop, stopped) as broker:
                url = broker.ws_url if scheme == "ws" else broker.url
                await nursery.start(client, url)
    assert stopped[0] < 1.0
    [exc] = failure
    assert isinstance(exc, trio_stomp.ServerError), exc
    assert exc.message == "broker shutting down"
    assert str(exc) == "broker shutting down: the broker is stopping"


async def _raw_ws_client(broker: Broker, receive_buffer: int | None = None) -> WebSocketStream:
    """A WebSocket client on the broker; ``receive_buffer`` shrinks its socket's."""
    port = _ws_port(broker)
    sock = trio.socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    await sock.connect(("127.0.0.1", port))
    return await connect_websocket(trio.SocketStream(sock), host="127.0.0.1", port=port)


async def _read_until(stream: WebSocketStream, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = await stream.receive_some()
        assert chunk, data
        data += chunk
    return data


@pytest.mark.parametrize("stop", ["exit", "cancel"])
async def test_broker_shutdown_with_an_idle_client_that_never_reads(stop: Stop) -> None:
    """Nobody answers the Close: the broker waits close_timeout at most. The
    ERROR and the Close were sent all the same."""
    stopped: list[float] = []
    with trio.fail_after(3):
        async with _broker_stopped_by(stop, stopped, limits=Limits(close_timeout=0.3)) as broker:
            client = await _raw_ws_client(broker)
            await client.send_all(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")
            await _read_until(client, b"\0")
        assert stopped[0] < 0.3 + 0.6  # fallback: close_timeout + 1 s
        async with client:
            assert _is_shutdown_error(await _read_until(client, b"\0"))
            assert await client.receive_some() == b""
            assert client.close_code == 1001


@pytest.mark.parametrize("stop", ["exit", "cancel"])
async def test_broker_shutdown_with_a_stuck_client_that_never_reads(stop: Stop) -> None:
    """The broker's writes to the client block: stopping still takes close_timeout at most."""
    limits = Limits(close_timeout=0.3, outbound_high_water=64 * 1024)
    stopped: list[float] = []
    with trio.fail_after(3):
        async with _broker_stopped_by(stop, stopped, limits=limits) as broker:
            stuck = await _raw_ws_client(broker, receive_buffer=4096)
            await stuck.send_all(b"CONNECT\naccept-version:1.2\nhost:/\n\n\0")
            await stuck.send_all(b"SUBSCRIBE\nid:0\ndestination:/queue/flood\nreceipt:r\n\n\0")
            await _read_until(stuck, b"RECEIPT")
            async with trio_stomp.connect(broker.url) as producer:
                # Deliveries pause (and messages wait in the queue) while the
                # broker's writer to the stuck client is blocked.
                while True:
                    await producer.send("/queue/flood", b"x" * 65536, receipt=True)
                    if broker.queue_depth("/queue/flood"):
                        await trio.sleep(0.05)  # time to drain, if it could
                        if broker.queue_depth("/queue/flood"):
                            break
        assert stopped[0] < 0.3 + 0.6  # fallback: close_timeout + 1 s
        await trio.aclose_forcefully(stuck)


# -- trio-websocket as the independent peer -----------------------------------------


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["v10.stomp", "v11.stomp", "v12.stomp"], "v12.stomp"),
        (["v10.stomp"], "v10.stomp"),
        (["mqtt"], None),
        ([], None),
    ],
)
async def test_trio_websocket_client_talks_to_the_broker(
    ws_broker: trio_stomp.broker.Broker, offered: list[str], chosen: str | None
) -> None:
    async with trio_websocket.open_websocket_url(ws_broker.ws_url, subprotocols=offered) as ws:
        assert ws.subprotocol == chosen
        # One frame per message, text or binary, as stomp.js sends them.
        await ws.send_message("CONNECT\naccept-version:1.2\nhost:/\n\n\0")
        connected = await ws.get_message()
        await ws.send_message(b"DISCONNECT\nreceipt:bye\n\n\0")
        receipt = await ws.get_message()
    assert isinstance(connected, bytes)
    assert connected.startswith(b"CONNECTED\n")
    assert receipt == b"RECEIPT\nreceipt-id:bye\n\n\0"


FakeHandler = Callable[[trio_websocket.WebSocketConnection, list[bytes]], Awaitable[None]]


@asynccontextmanager
async def _fake_broker(after_connect: FakeHandler) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A trio-websocket server that answers CONNECT and receipts, then runs ``after_connect``.

    Yields its URL and the list of every message it received.
    """
    received: list[bytes] = []

    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept(subprotocol="v12.stomp")
        message = await ws.get_message()
        received.append(message if isinstance(message, bytes) else message.encode())
        await ws.send_message("CONNECTED\nversion:1.2\nheart-beat:0,50\n\n\0")
        await after_connect(ws, received)

    async with trio.open_nursery() as nursery:
        server = await nursery.start(trio_websocket.serve_websocket, handler, "127.0.0.1", 0, None)
        yield f"ws://127.0.0.1:{server.port}/stomp", received
        nursery.cancel_scope.cancel()


async def _answer_receipts(ws: trio_websocket.WebSocketConnection, received: list[bytes]) -> None:
    parser = FrameParser()
    while True:
        message = await ws.get_message()
        data = message if isinstance(message, bytes) else message.encode()
        received.append(data)
        for event in parser.feed(data):
            if isinstance(event, Frame) and "receipt" in event.headers:
                receipt = event.headers["receipt"]
                await ws.send_message(encode(Frame("RECEIPT", [("receipt-id", receipt)])))


async def test_each_frame_and_heartbeat_travels_in_its_own_message() -> None:
    async with _fake_broker(_answer_receipts) as (url, received):
        async with trio_stomp.connect(url, heartbeat=(50, 0)) as client:
            for i in range(50):  # queued together: the writer sends them in batches
                await client.send("/queue/x", b"%d\0" % i)
            await trio.sleep(0.2)  # heart-beats
            await client.send("/queue/x", b"end", receipt=True)
    parser = FrameParser()
    for message in received:
        if message == b"\n":
            continue
        frames = [e for e in parser.feed(message) if isinstance(e, Frame)]
        assert len(frames) == 1, message
    assert b"\n" in received
    commands = [m.split(b"\n", 1)[0] for m in received if m != b"\n"]
    assert commands == [b"CONNECT", *[b"SEND"] * 51, b"DISCONNECT"]


@pytest.mark.parametrize(
    ("code", "match"),
    [(1000, "closed the connection"), (1001, "closed the connection"), (1011, "code 1011")],
)
async def test_server_closing_the_websocket_is_connection_lost(code: int, match: str) -> None:
    async def close(ws: trio_websocket.WebSocketConnection, received: list[bytes]) -> None:
        await ws.aclose(code, "bye")

    async with _fake_broker(close) as (url, _):
        before = all_tasks()
        with pytest.raises(trio_stomp.ConnectionLost, match=match):
            async with trio_stomp.connect(url, heartbeat=(0, 0)):
                await trio.sleep_forever()
        assert all_tasks() == before


async def test_server_dropping_tcp_is_connection_lost() -> None:
    async def drop(ws: trio_websocket.WebSocketConnection, received: list[bytes]) -> None:
        await trio.aclose_forcefully(ws._stream)

    async with _fake_broker(drop) as (url, _):
        with pytest.raises(trio_stomp.ConnectionLost):
            async with trio_stomp.connect(url, heartbeat=(0, 0)):
                await trio.sleep_forever()


async def test_refused_upgrade_is_connect_failed_with_the_status() -> None:
    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        await request.reject(403)

    async with trio.open_nursery() as nursery:
        server = await nursery.start(trio_websocket.serve_websocket, handler, "127.0.0.1", 0, None)
        with pytest.raises(trio_stomp.ConnectFailed, match=r"refused.*HTTP 403"):
            async with trio_stomp.connect(f"ws://127.0.0.1:{server.port}/ws"):
                pass
        nursery.cancel_scope.cancel()


def _without_wsproto(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import wsproto`` fail, and forget that _websocket was imported."""
    monkeypatch.setitem(sys.modules, "wsproto", None)
    monkeypatch.delitem(sys.modules, "trio_stomp._websocket")
    monkeypatch.delattr(trio_stomp, "_websocket")


def test_missing_extra_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from trio_stomp._transport import load_websocket

    _without_wsproto(monkeypatch)
    with pytest.raises(ImportError, match=r"pip install 'trio-stomp\[websocket\]'"):
        load_websocket()


async def test_missing_extra_fails_connect_and_open_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _without_wsproto(monkeypatch)
    with pytest.raises(ImportError, match="websocket extra"):
        async with trio_stomp.connect("ws://127.0.0.1:1/ws"):
            pass
    with pytest.raises(ImportError, match="websocket extra"):
        async with open_broker(ws_port=0):
            pass


# -- RabbitMQ Web-STOMP ----------------------------------------------------------------

RABBITMQ_WS = "ws://guest:guest@127.0.0.1:15674/ws?vhost=/"


@asynccontextmanager
async def _rabbitmq_ws() -> AsyncIterator[trio_stomp.Client]:
    """Connect to RabbitMQ Web-STOMP (skips locally, fails in CI, when it is down)."""
    require_real_broker("rabbitmq")
    async with trio_stomp.connect(RABBITMQ_WS, disconnect_timeout=0.5) as client:
        yield client


async def test_rabbitmq_web_stomp_round_trip(unique: Callable[[str], str]) -> None:
    async with _rabbitmq_ws() as client:
        assert client.server is not None
        assert client.server.startswith("RabbitMQ/")
        # RabbitMQ sends MESSAGE frames in text messages: bodies must be UTF-8
        # (NUL is); see the next test for what happens otherwise.
        bodies = [b"text", b"\0binary\0with\0NULs\0", "\u00e9t\u00e9".encode(), b"y" * (1 << 20)]
        await _round_trip(client, unique("queue"), bodies)


async def test_rabbitmq_web_stomp_text_frames_cannot_carry_non_utf8(
    unique: Callable[[str], str],
) -> None:
    with pytest.raises(trio_stomp.ConnectionLost, match=r"not UTF-8.*ws_frame = binary"):
        async with _rabbitmq_ws() as client:
            await _round_trip(client, unique("queue"), [bytes(range(256))])


async def test_rabbitmq_web_stomp_negotiates_v12() -> None:
    require_real_broker("rabbitmq")
    stream = await open_stream(Endpoint.from_url(RABBITMQ_WS))
    async with stream:
        assert isinstance(stream, WebSocketStream)
        assert stream.subprotocol == "v12.stomp"


async def test_rabbitmq_refuses_an_unknown_path() -> None:
    require_real_broker("rabbitmq")
    with pytest.raises(trio_stomp.ConnectFailed, match="HTTP 404"):
        async with trio_stomp.connect("ws://guest:guest@127.0.0.1:15674/nope"):
            pass


async def test_rabbitmq_web_stomp_close_after_disconnect_counts_as_its_receipt() -> None:
    """RabbitMQ 3.10 Web-STOMP answers DISCONNECT with a WebSocket Close 1000
    ("STOMP died") and never the RECEIPT it asked for (rabbitmq-server#6737).
    A Close 1000 is deliberate, so the client takes it as the receipt: the
    block is left cleanly, and what was sent before did arrive."""
    require_real_broker("rabbitmq")
    dest = "/queue/trio-stomp-ws-clean-exit"
    async with trio_stomp.connect(RABBITMQ_WS, disconnect_timeout=2) as client:
        await client.send(dest, b"x", receipt=True)
    async with trio_stomp.connect(REAL_BROKERS["rabbitmq"]) as client:
        async with client.subscribe(dest, receipt=True) as sub:
            assert (await anext(aiter(sub))).body == b"x"
