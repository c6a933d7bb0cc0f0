"""A fault-injecting TCP proxy for tests: loopback only, Trio, bounded.

Sits between a client and a broker and can, on command, cut every
connection (with a TCP reset), stall a direction (hold bytes back), delay
each chunk, and split writes into small pieces.

:func:`lossless_run` is the workload that goes with it: numbered messages
through two reconnecting clients while something disrupts them, tallied
(lost, duplicated, reconnect downtimes). The test suite and
``bench/crash/faults.py`` both run it.
"""

from __future__ import annotations

import functools
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import trio

from .._client import Client
from .._connect import connect
from .._errors import ClientClosed
from .._reconnect import ConnectionEvent, Reconnect


@attrs.define
class FaultProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream``; see the module docstring.

    Attributes:
      upstream: the ``(host, port)`` every connection is forwarded to.
      port: the port to listen on (0: a free one); the bound port once
        :meth:`serve` has started.
      stalled: per direction (``"up"`` is client to broker, ``"down"`` the
        other way), True while bytes are held there.
      delay: seconds each chunk waits before it is forwarded.
      split: forward in pieces of at most this many bytes (None: as read).
      cuts: how many times :meth:`cut` was called.
      accepted: connections accepted so far.
    """

    upstream: tuple[str, int]
    port: int = 0
    stalled: dict[str, bool] = attrs.field(factory=lambda: {"up": False, "down": False})
    delay: float = 0.0
    split: int | None = None
    cuts: int = 0
    accepted: int = 0
    _pairs: list[tuple[trio.SocketStream, trio.SocketStream, trio.CancelScope]] = attrs.field(
        factory=list
    )
    _unstalled: trio.Event = attrs.field(factory=trio.Event)

    def url(self, scheme: str = "stomp", userinfo: str = "", query: str = "") -> str:
        """The proxy's URL (``stomp://127.0.0.1:PORT/``) with ``userinfo`` and ``query``."""
        auth = f"{userinfo}@" if userinfo else ""
        return f"{scheme}://{auth}127.0.0.1:{self.port}/{query}"

    def cut(self) -> None:
        """Reset every open connection, both sides, at once."""
        self.cuts += 1
        for client, upstream, scope in self._pairs:
            for stream in (client, upstream):
                _reset_on_close(stream)
            scope.cancel()

    def stall(self, direction: str = "both") -> None:
        """Stop forwarding ("up", "down" or "both") until :meth:`resume`."""
        for key in ("up", "down") if direction == "both" else (direction,):
            self.stalled[key] = True
        self._unstalled = trio.Event()

    def resume(self) -> None:
        """Forward both directions again (what was held goes on)."""
        self.stalled = {"up": False, "down": False}
        self._unstalled.set()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (:attr:`port`, 0 for a free one) until cancelled; reports
        started (for ``nursery.start``) once :attr:`port` is the bound port."""
        async with trio.open_nursery() as nursery:
            serve = functools.partial(trio.serve_tcp, host="127.0.0.1")
            listeners = await nursery.start(serve, self._handle, self.port)
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started()

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream, key: str) -> None:
        while True:
            data = await source.receive_some(65536)
            if not data:
                await sink.send_eof()
                return
            while self.stalled[key]:
                await self._unstalled.wait()
            if self.delay:
                await trio.sleep(self.delay)
            step = self.split or len(data)
            for start in range(0, len(data), step):
                await sink.send_all(data[start : start + step])

    async def _handle(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        try:
            upstream = await trio.open_tcp_stream(*self.upstream)
        except OSError:
            _reset_on_close(client)
            await client.aclose()
            return
        with trio.CancelScope() as scope:
            pair = (client, upstream, scope)
            self._pairs.append(pair)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, upstream, "up")
                    nursery.start_soon(self._pump, upstream, client, "down")
            except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            finally:
                self._pairs.remove(pair)
        for stream in (client, upstream):
            await trio.aclose_forcefully(stream)


def _reset_on_close(stream: trio.SocketStream) -> None:
    """Make the next close send RST (SO_LINGER 0), as a crashed peer or a cut cable would."""
    try:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


@asynccontextmanager
async def fault_proxy(
    upstream_port: int, upstream_host: str = "127.0.0.1"
) -> AsyncIterator[FaultProxy]:
    """Run a :class:`FaultProxy` to ``upstream_host:upstream_port`` for a block."""
    proxy = FaultProxy((upstream_host, upstream_port))
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        try:
            yield proxy
        finally:
            proxy.resume()
            proxy.cut()
            nursery.cancel_scope.cancel()


@attrs.define
class Tally:
    """What a lossless-delivery run saw."""

    sent: int = 0
    received: set[int] = attrs.field(factory=set)
    duplicates: int = 0
    lost_events: int = 0
    restored_events: int = 0
    downtimes: list[float] = attrs.field(factory=list)

    @property
    def missing(self) -> int:
        return self.sent - len(self.received)

    def on_event(self, event: ConnectionEvent) -> None:
        if event.kind == "lost":
            self.lost_events += 1
        else:
            self.restored_events += 1
            self.downtimes.append(event.downtime)


async def lossless_run(
    url: str,
    destination: str,
    count: int,
    *,
    disrupt: Callable[[int], Awaitable[None]],
    every: int,
    prefetch: int = 100,
    senders: int = 8,
    headers: dict[str, str] | None = None,
) -> Tally:
    """Send ``count`` numbered messages with receipts and receive them with
    client-individual acks, over two reconnecting clients, calling
    ``disrupt(n)`` each time ``every`` more messages have arrived.

    Returns the tally: every number must arrive; duplicates are counted.
    """
    tally = Tally()
    policy = Reconnect(initial_delay=0.05, max_delay=0.5)
    numbers = iter(range(count))
    disruptions = 0

    async def produce(client: Client) -> None:
        for number in numbers:
            await client.send(destination, b"%d" % number, headers=headers, receipt=True)
            tally.sent += 1

    async with (
        connect(url, reconnect=policy, on_event=tally.on_event) as consumer,
        connect(url, reconnect=policy, on_event=tally.on_event) as producer,
        consumer.subscribe(
            destination, ack="client-individual", headers={"prefetch-count": str(prefetch)}
        ) as sub,
    ):
        async with trio.open_nursery() as nursery:
            for _ in range(senders):
                nursery.start_soon(produce, producer)
            async for message in sub:
                number = int(message.body)
                if number in tally.received:
                    tally.duplicates += 1
                tally.received.add(number)
                try:
                    await message.ack()
                except ClientClosed:
                    pass  # its connection is gone: the broker redelivers it
                if len(tally.received) == count:
                    break
                if len(tally.received) // every > disruptions:
                    disruptions += 1
                    await disrupt(disruptions)
    return tally
