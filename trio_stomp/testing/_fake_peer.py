"""A scripted STOMP peer over an in-memory stream, for client tests that need
exact control of what the broker says and when (heart-beats, ERROR, silence).

Pair it with :func:`trio.testing.memory_stream_pair`: the client gets one end
(:func:`trio_stomp.wrap_stream`), the peer the other.
"""

from __future__ import annotations

from collections.abc import Mapping

import trio

from ..frame import HEARTBEAT, Frame, FrameParser, encode


class FakePeer:
    """The server end of a memory stream pair, speaking raw frames."""

    def __init__(self, stream: trio.abc.Stream, version: str = "1.2") -> None:
        self.stream = stream
        self.parser = FrameParser(version)
        self.version = version
        self.pending: list[Frame] = []
        #: trio.current_time() of every heart-beat EOL received.
        self.heartbeats: list[float] = []
        self.closed = False

    async def receive(self) -> Frame:
        """The next frame from the client (heart-beats are recorded, not returned)."""
        while not self.pending:
            data = await self.stream.receive_some(65536)
            if not data:
                self.closed = True
                raise EOFError("client closed the stream")
            for event in self.parser.feed(data):
                if event is HEARTBEAT:
                    self.heartbeats.append(trio.current_time())
                else:
                    assert isinstance(event, Frame)
                    self.pending.append(event)
        return self.pending.pop(0)

    async def send(
        self, command: str, headers: Mapping[str, str] | None = None, body: bytes = b""
    ) -> None:
        await self.stream.send_all(encode(Frame(command, headers or {}, body), self.version))

    async def accept(self, headers: Mapping[str, str] | None = None) -> Frame:
        """Read CONNECT and answer CONNECTED with ``headers`` (version 1.2 by default)."""
        connect = await self.receive()
        assert connect.command == "CONNECT"
        reply = {"version": self.version, **(headers or {})}
        await self.send("CONNECTED", reply)
        self.parser.version = self.version
        return connect

    async def drain(self) -> None:
        """Read until the client closes, answering receipts (e.g. DISCONNECT's)."""
        try:
            while True:
                frame = await self.receive()
                receipt = frame.headers.get("receipt")
                if receipt is not None:
                    await self.send("RECEIPT", {"receipt-id": receipt})
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
