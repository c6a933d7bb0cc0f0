"""The client's outbox: what a failed connection reports as unwritten, so that a
reconnecting client sends it again."""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_stomp import ConnectionLost
from trio_stomp._outbox import Outbox


class _BreakingStream(trio.abc.SendStream):
    """Accepts ``good`` writes, then blocks the next one until :meth:`cut`, which
    breaks it (a peer that stopped reading, then reset the connection)."""

    def __init__(self, good: int) -> None:
        self.good = good
        self.writes: list[bytes] = []
        self.blocked = trio.Event()
        self._cut = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if len(self.writes) < self.good:
            self.writes.append(bytes(data))
            await trio.lowlevel.checkpoint()
            return
        self.blocked.set()
        await self._cut.wait()
        raise trio.BrokenResourceError("connection reset by peer")

    def cut(self) -> None:
        self._cut.set()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def _fail_after_writes(good: int, before: int, after: int) -> tuple[list[int], list[int]]:
    """Queue ``before`` frames, let ``good`` writes succeed and the next one hang,
    queue ``after`` more, then break the stream: (tokens written, tokens unwritten)."""
    stream = _BreakingStream(good)
    outbox: Outbox[int] = Outbox(stream)
    tokens = iter(range(before + after))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outbox.run)
            for _ in range(before):
                token = next(tokens)
                await outbox.put(b"SEND %d\0" % token, token)
            await trio.testing.wait_all_tasks_blocked()
            for _ in range(after):
                token = next(tokens)
                await outbox.put(b"SEND %d\0" % token, token)
            stream.cut()
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()  # no write broke: everything was written
    except BaseExceptionGroup as group:
        if group.split(ConnectionLost)[1] is not None:
            raise  # anything but the broken write is a failure of the test
    written = [int(f.split()[1].rstrip(b"\0")) for w in stream.writes for f in w.split(b"\0")[:-1]]
    return written, outbox.unwritten()


@settings(max_examples=30, deadline=None)
@given(good=st.integers(0, 3), before=st.integers(1, 40), after=st.integers(0, 40))
def test_a_failed_write_reports_its_frames_and_everything_queued_after_it(
    good: int, before: int, after: int
) -> None:
    written, unwritten = trio.run(_fail_after_writes, good, before, after)
    # Nothing is lost and nothing is counted twice: every frame was either
    # written whole (its send_all returned) or is given back for replay, in order.
    assert written + unwritten == list(range(before + after))
    if len(written) < before:  # the write that broke carried frames
        assert unwritten[0] == len(written)


async def test_a_write_cancelled_part_way_counts_as_unwritten() -> None:
    stream = _BreakingStream(0)
    outbox: Outbox[int] = Outbox(stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.run)
        for token in range(3):
            await outbox.put(b"x", token)
        await stream.blocked.wait()
        nursery.cancel_scope.cancel()  # the connection failed another way
    assert outbox.unwritten() == [0, 1, 2]
