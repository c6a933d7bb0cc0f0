"""The http source and sink held to the bridges Source/Sink contract, over real HTTP."""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
from family_kit import POISON_MIXES, POISON_SETTINGS, poison_run
from http_helpers import Recorder
from hypothesis import given

from bridges import Context, Message
from bridges.endpoints.http import (
    HttpSink,
    HttpSinkConfig,
    HttpSource,
    HttpSourceConfig,
    ListenAddress,
    open_listener,
)
from bridges.testing import SinkCase, SourceCase, check_sink, check_source


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def webhook_source() -> AsyncIterator[SourceCase]:
    """An http source on a fixed free port, and a sender that retries until it gets a 2xx
    (as GitHub and Stripe do): what the source refuses (503) or drops comes again."""
    port = free_port()
    source = HttpSource(
        HttpSourceConfig(listen=f"127.0.0.1:{port}", path="/hooks"), Context(route="c")
    )
    url = f"http://127.0.0.1:{port}/hooks"
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:

        async def post_until_stored(message: Message) -> None:
            headers = {**message.headers, "webhook-id": message.id}
            while True:
                try:
                    response = await client.post(url, content=message.body, headers=headers)
                    if 200 <= response.status_code < 300:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.02)

        async def publish(messages: Sequence[Message]) -> None:
            async with trio.open_nursery() as nursery:
                for message in messages:
                    nursery.start_soon(post_until_stored, message)

        yield SourceCase(source, publish)


async def test_the_http_source_keeps_the_source_contract() -> None:
    await check_source(webhook_source)


class ReceiverThread:
    """A real HTTP receiver in a thread of its own (its own Trio run), so that its
    connection tasks are not mistaken for tasks the sink left behind."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.lock = threading.Lock()
        self.url = ""
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._serve,), daemon=True)

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with open_listener(ListenAddress("127.0.0.1", 0)) as server:
            with server.mount("/in", self.recorder):
                self.url = server.url
                self._ready.set()
                await self._stop.wait()

    def __enter__(self) -> ReceiverThread:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the receiver did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        assert self._stop is not None
        self._token.run_sync_soon(self._stop.set)
        self._thread.join(10)

    def bodies(self) -> list[Message]:
        # (the recorder appends from the other thread; a list copy is atomic enough)
        return [Message(body, {}) for _, _, _, body in list(self.recorder.requests)]


@asynccontextmanager
async def webhook_sink() -> AsyncIterator[SinkCase]:
    with ReceiverThread() as receiver:
        sink = HttpSink(
            HttpSinkConfig(url=receiver.url + "/in?i={header:contract-index}"),
            Context(route="c", role="sink"),
        )

        async def read_back() -> list[Message]:
            await trio.lowlevel.checkpoint()
            return receiver.bodies()

        never = Message(b"no contract-index header: the url template cannot be filled", {}, "x")
        yield SinkCase(sink, read_back, reject=never, ordered=False)


@pytest.mark.deadline(60)
async def test_the_http_sink_keeps_the_sink_contract() -> None:
    await check_sink(webhook_sink)


@POISON_SETTINGS
@given(mix=POISON_MIXES)
def test_the_http_sink_sets_each_poison_message_aside_alone(mix: list[int | None]) -> None:
    poison_run(webhook_sink, mix)
