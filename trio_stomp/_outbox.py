"""The write side of a connection: a bounded outbox drained by one writer task.

Why a writer task rather than a lock around ``send_all``: a caller cancelled
while *its* bytes are half written would leave a torn frame on the wire and
the connection unusable. Here callers only append whole frames to the outbox;
only the writer task touches the stream, and it is cancelled only when the
whole connection goes. A caller cancelled while waiting for room has queued
nothing.

Why batches: frames queued while a write is in flight go out together in the
next ``send_all``, so a burst of sends costs a few syscalls, not one each.
For the same reason :meth:`Outbox.put` yields to the scheduler only when the
writer is idle (so a lone frame goes out at once) or every ``yield_every``
frames; it is always a cancellation point.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import trio

from ._errors import ClientClosed, ConnectionLost, StompError

#: What the caller attaches to a frame it may want to send again elsewhere.
R = TypeVar("R")


class Outbox(Generic[R]):
    """Frames waiting to be written, and the task that writes them.

    A frame may be queued with a ``replay`` token: if the connection fails
    before the frame was written whole, :meth:`unwritten` gives the tokens
    back, in order, so the caller can send those frames on a new connection.
    "Written" means that the ``send_all`` carrying the frame returned: the
    frames of a write that failed or was cancelled part way count as
    unwritten (a prefix of them may have reached the peer, so a replay can
    repeat one: at least once).
    """

    def __init__(
        self,
        stream: trio.abc.SendStream,
        *,
        high_water: int = 1024 * 1024,
        yield_every: int = 256,
    ) -> None:
        self._stream = stream
        self._queue: list[bytes] = []
        self._replays: list[R] = []
        #: The replay tokens of the write in flight (given back by unwritten()
        #: until its send_all returns).
        self._in_flight: list[R] = []
        self._queued_bytes = 0
        self._high_water = high_water
        self._yield_every = yield_every
        self._since_yield = 0
        self._writer_idle = True
        self._writer_lot = trio.lowlevel.ParkingLot()
        self._room_lot = trio.lowlevel.ParkingLot()
        self._error: StompError | None = None
        #: trio.current_time() of the last write, for heart-beats.
        self.last_write = trio.current_time()

    @property
    def closed(self) -> bool:
        """True once the outbox refuses frames."""
        return self._error is not None

    def unwritten(self) -> list[R]:
        """The replay tokens of frames not written whole, in queue order: those of
        the write in flight (if its ``send_all`` has not returned), then those
        still queued."""
        return [*self._in_flight, *self._replays]

    @property
    def empty(self) -> bool:
        """True when nothing is queued or being written."""
        return not self._queue and self._writer_idle

    async def put(self, data: bytes, replay: R | None = None, *, urgent: bool = True) -> None:
        """Queue ``data`` (one or more whole frames) for writing.

        Waits while more than ``high_water`` bytes are queued (backpressure).
        Returns once the bytes are queued, not once they are written: a
        receipt tells when the broker has them.

        ``urgent=False`` wakes an idle writer without yielding to it: the frame
        goes out at the caller's next scheduling point (or after
        ``yield_every`` frames), with whatever else was queued by then. For
        ACKs: a consumer acking a buffered burst of messages one by one then
        sends them in one write instead of one write (and two task switches)
        each; the window the broker waits on opens as soon as it next waits.

        Raises:
          StompError: the connection has failed or is closed; nothing was queued.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._error is not None:
                raise self._error
            if self._queued_bytes < self._high_water:
                break
            await self._room_lot.park()
        self._queue.append(data)
        self._queued_bytes += len(data)
        if replay is not None:
            self._replays.append(replay)
        self._since_yield += 1
        if self._writer_idle:
            self._writer_lot.unpark()
            self._writer_idle = False  # woken: the next put need not wake it again
            if urgent:
                self._since_yield = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
        elif self._since_yield >= self._yield_every:
            self._since_yield = 0
            await trio.lowlevel.cancel_shielded_checkpoint()

    def put_nowait(self, data: bytes) -> None:
        """Queue ``data`` without waiting for room (for heart-beats and shutdown frames)."""
        if self._error is not None:
            raise self._error
        self._queue.append(data)
        self._queued_bytes += len(data)
        if self._writer_idle:
            self._writer_lot.unpark()

    def close(self, error: StompError) -> None:
        """Refuse further frames with ``error`` and wake everyone waiting."""
        if self._error is None:
            self._error = error
        self._room_lot.unpark_all()

    async def run(self) -> None:
        """The writer task: send what is queued, in batches, until cancelled.

        Raises:
          ConnectionLost: the stream broke.
        """
        while True:
            while not self._queue:
                self._writer_idle = True
                await self._writer_lot.park()
            self._writer_idle = False
            queue = self._queue
            chunk = queue[0] if len(queue) == 1 else b"".join(queue)
            self._queue = []
            if self._replays:
                self._in_flight = self._replays
                self._replays = []
            self._queued_bytes = 0
            self._room_lot.unpark_all()
            self.last_write = trio.current_time()
            try:
                await self._stream.send_all(chunk)
            except (trio.BrokenResourceError, OSError) as exc:
                raise ConnectionLost(f"writing to the broker failed: {exc!r}") from exc
            except trio.ClosedResourceError as exc:
                raise ClientClosed("the connection was closed") from exc
            if self._in_flight:
                self._in_flight = []
