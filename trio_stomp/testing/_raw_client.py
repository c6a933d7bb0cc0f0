"""A STOMP peer with no client logic, for testing servers (and the client's codec) on the wire.

The client library is not used here on purpose: a test that speaks STOMP
through the codec alone cannot have a broker bug hidden by a client bug (or
the reverse).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Protocol

import trio

from ..frame import Frame, FrameParser, Heartbeat, encode


class RawClient:
    """Encoded frames out, parsed events in; every wait is bounded by ``within`` seconds.

    Args:
        stream: a connected byte stream to the server (TCP, TLS, memory).
        version: the STOMP version to encode and parse with until CONNECTED names another.
    """

    def __init__(self, stream: trio.abc.Stream, version: str = "1.2") -> None:
        self.stream = stream
        self.version = version
        self.parser = FrameParser(version)
        #: Events parsed but not read yet.
        self.events: deque[Frame | Heartbeat] = deque()
        #: True once the server closed its side.
        self.closed = False

    async def send(
        self, command: str, headers: Mapping[str, str] | None = None, body: bytes = b""
    ) -> None:
        """Encode and send one frame, unchecked beyond what the encoder refuses."""
        await self.send_raw(encode(Frame(command, headers or {}, body), self.version))

    async def send_raw(self, data: bytes) -> None:
        """Send bytes as they are: for malformed input."""
        await self.stream.send_all(data)

    async def _fill(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            self.closed = True
            raise EOFError("the server closed the connection")
        self.events.extend(self.parser.feed(data))

    async def event(self, within: float = 2.0) -> Frame | Heartbeat:
        """The next frame or heart-beat.

        Raises:
            trio.TooSlowError: nothing arrived within ``within`` seconds.
            EOFError: the server closed the connection.
        """
        with trio.fail_after(within):
            while not self.events:
                await self._fill()
        return self.events.popleft()

    async def frame(self, within: float = 2.0) -> Frame:
        """The next frame, skipping heart-beats."""
        while True:
            event = await self.event(within)
            if isinstance(event, Frame):
                return event

    async def expect(self, command: str, within: float = 2.0) -> Frame:
        """The next frame, asserted to be a ``command``."""
        frame = await self.frame(within)
        assert frame.command == command, frame
        return frame

    async def drain(self) -> list[Frame]:
        """Wait until the server has processed everything sent so far (:meth:`sync`), then
        return the frames that arrived before its receipt, and forget them.

        A server answers in order on a connection, so once the receipt is here,
        every frame it sent because of what we sent before is here too: ``assert
        await client.drain() == []`` says "nothing was delivered", exactly, with
        no sleep. (Frames caused by *other* connections need their own
        :meth:`sync` first.)
        """
        await self.sync()
        frames = [event for event in self.events if isinstance(event, Frame)]
        self.events.clear()
        return frames

    async def expect_closed(self, within: float = 2.0) -> list[Frame]:
        """Read until the server closes; return the frames seen before."""
        frames: list[Frame] = []
        with trio.fail_after(within):
            while True:
                while self.events:
                    event = self.events.popleft()
                    if isinstance(event, Frame):
                        frames.append(event)
                try:
                    await self._fill()
                except (EOFError, trio.BrokenResourceError):
                    return frames

    async def connect(self, within: float = 2.0, **headers: str) -> Frame:
        """CONNECT (``host:/``, this version; ``passcode_x="y"`` sends ``passcode-x:y``) and
        expect CONNECTED; later frames parse under the version it names."""
        connect_headers = {"accept-version": self.version, "host": "/"}
        connect_headers.update({k.replace("_", "-"): v for k, v in headers.items()})
        await self.send("CONNECT", connect_headers)
        connected = await self.expect("CONNECTED", within)
        self.parser.version = connected.headers.get("version", "1.0")
        return connected

    async def subscribe(
        self, destination: str, sub_id: str = "0", within: float = 2.0, **headers: str
    ) -> None:
        """SUBSCRIBE and wait for its RECEIPT, so that later sends find the subscription."""
        extra = {k.replace("_", "-"): v for k, v in headers.items()}
        await self.send(
            "SUBSCRIBE", {"destination": destination, "id": sub_id, **extra, "receipt": "sub"}
        )
        await self.receipt("sub", within)

    async def receipt(self, receipt_id: str, within: float = 2.0) -> None:
        """Wait for the RECEIPT ``receipt_id``; other frames stay to be read next."""
        others: list[Frame] = []
        while True:
            frame = await self.frame(within)
            if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt_id:
                self.events.extendleft(reversed(others))
                return
            assert frame.command != "ERROR", frame
            others.append(frame)

    async def publish(self, destination: str, body: bytes, **headers: str) -> None:
        """SEND ``body`` to ``destination``."""
        await self.send("SEND", {"destination": destination, **headers}, body)

    async def sync(self) -> None:
        """Wait until the server has processed everything sent so far (a receipted
        BEGIN/ABORT pair: receipts are answered in order)."""
        await self.send("BEGIN", {"transaction": ".sync", "receipt": "sync"})
        await self.send("ABORT", {"transaction": ".sync"})
        await self.receipt("sync")

    async def aclose(self) -> None:
        """Close the stream (no DISCONNECT: send it first if the test wants one)."""
        await self.stream.aclose()


class Listening(Protocol):
    """Anything with a loopback address, such as :class:`trio_stomp.broker.Broker`."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


@asynccontextmanager
async def open_raw_client(
    server: Listening | int,
    version: str = "1.2",
    *,
    connect: bool = True,
    within: float = 2.0,
    **headers: str,
) -> AsyncIterator[RawClient]:
    """A :class:`RawClient` over TCP to ``server`` (an object with ``host`` and ``port``,
    or a port on 127.0.0.1), CONNECTed unless ``connect=False``; closed on exit."""
    host, port = ("127.0.0.1", server) if isinstance(server, int) else (server.host, server.port)
    stream = await trio.open_tcp_stream(host, port)
    client = RawClient(stream, version)
    try:
        if connect:
            await client.connect(within=within, **headers)
        yield client
    finally:
        await client.aclose()
