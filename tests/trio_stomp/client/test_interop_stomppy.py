"""Interoperability both ways with stomp.py 9, the client most Python users run,
on the real brokers: what one sends, the other receives intact."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

import pytest
import stomp
import trio

import trio_stomp

from conftest import REAL_BROKERS, require_real_broker

PORTS = {"rabbitmq": 61613, "activemq": 61623}
BODY = bytes(range(256)) + "ünïcödé".encode()
HEADERS = {"x-colon": "a:b", "x-newline": "one\ntwo", "x-utf8": "日本語", "x-backslash": "C:\\t"}


def _stomppy(broker: str) -> Any:
    conn = stomp.Connection12([("127.0.0.1", PORTS[broker])], vhost="/", auto_decode=False)
    conn.connect("guest", "guest", wait=True)
    return conn


class _Collect(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.frames: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)


@pytest.fixture(params=["rabbitmq", "activemq"])
def broker(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require_real_broker(name)
    return name


async def test_stomppy_receives_what_trio_stomp_sends(
    broker: str, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    listener = _Collect()

    def subscribe() -> Any:
        conn = _stomppy(broker)
        conn.set_listener("collect", listener)
        conn.subscribe(dest, id="1", ack="auto", headers={"receipt": "sub"})
        return conn

    conn = await trio.to_thread.run_sync(subscribe)
    try:
        async with trio_stomp.connect(REAL_BROKERS[broker]) as client:
            await trio.sleep(0.2)  # let stomp.py's SUBSCRIBE land
            await client.send(dest, BODY, headers=HEADERS, receipt=True)
        frame = await trio.to_thread.run_sync(lambda: listener.frames.get(timeout=10))
    finally:
        await trio.to_thread.run_sync(conn.disconnect)
    assert frame.body == BODY
    for name, value in HEADERS.items():
        assert frame.headers[name] == value, name


async def test_trio_stomp_receives_what_stomppy_sends(
    broker: str, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")

    def send() -> None:
        conn = _stomppy(broker)
        try:
            conn.send(dest, BODY, headers=dict(HEADERS, receipt="sent"))
        finally:
            conn.disconnect(receipt="bye")

    async with trio_stomp.connect(REAL_BROKERS[broker]) as client:
        async with client.subscribe(dest, ack="client-individual", receipt=True) as sub:
            await trio.to_thread.run_sync(send)
            async for message in sub:
                assert message.body == BODY
                for name, value in HEADERS.items():
                    assert message.headers[name] == value, name
                await message.ack(receipt=True)
                break
