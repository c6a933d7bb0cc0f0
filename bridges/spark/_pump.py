"""The driver-side pump: a Trio loop in one thread that keeps a source's messages ready.

Spark calls the stream reader's ``latestOffset`` from a plain (non-Trio)
thread of its long-lived planner process on the driver. The pump owns the
one Trio loop of that process, in a thread it starts and joins. Inside, two
tasks: a *feed* (a STOMP subscription, or any bridges source) delivers
messages into a bounded buffer, and a logger that, every few milliseconds,
hands what is buffered to the reader's ``log`` callable (which writes and
fsyncs a write-ahead log segment, in a worker thread of the loop) and then
acks it. So the broker keeps streaming while Spark runs a batch; the
reader's ``room`` callable bounds how far the log may run ahead of what
Spark was offered (never of what it committed: that would deadlock, see
:mod:`._reader`).

Lifetime: the thread starts on the first :meth:`Pump.start` and ends in
:meth:`Pump.close`, which the reader calls from ``stop()`` (Spark calls it
when the query ends and the planner's socket closes) and which an
``atexit`` hook calls at interpreter exit. ``close`` cancels the loop (the
feed's ``async with`` blocks disconnect, shielded and bounded) and joins
the thread within a deadline. Nothing here outlives its :class:`Pump`.

A feed that fails (connection lost, broker down) is opened again after the
reconnect policy's delay; what it had delivered but the reader had not yet
logged is dropped, since it was never acked and the broker delivers it
again. A message the reader logged whose ack fails (the connection dropped in
between) is delivered again too: a duplicate with the same ``id``, never a
loss.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Final

import attrs
import trio
import trio.lowlevel

import trio_stomp

from ._wal import Record

log = logging.getLogger("bridges.spark")

#: How long :meth:`Pump.start` waits for the loop to come up, s.
START_TIMEOUT: Final = 10.0
#: How often a full buffer is looked at again, s.
_FULL_POLL: Final = 0.005
#: How often the buffer is logged (and acked), s.
LOG_INTERVAL: Final = 0.05


@attrs.frozen
class Delivery:
    """A message taken from a feed and the way to settle it.

    Attributes:
      record: the message as the write-ahead log keeps it.
      ack: tells the source it is safe (runs on the pump's loop).
    """

    record: Record
    ack: Callable[[], Awaitable[None]]


#: A feed: entering it connects; the callable waits for the next delivery.
#: It raises ``trio.EndOfChannel`` when a finite source is exhausted.
Feed = Callable[[], AbstractAsyncContextManager[Callable[[], Awaitable[Delivery]]]]


#: Writes records durably (runs in a worker thread); raises if it cannot.
LogFn = Callable[[list[Record]], None]


class Pump:
    """One feed, read on a Trio loop in a thread of its own, logged and acked there.

    Args:
      feed: opens the source (called again after a failure).
      log: makes a batch of records durable; only then are they acked.
      room: how many more records may be logged now (0: wait).
      window: at most this many deliveries wait in the buffer.
      reconnect: the delays between attempts to open the feed again.
      name: for the thread's name and the log.
    """

    def __init__(
        self,
        feed: Feed,
        *,
        log: LogFn,
        room: Callable[[], int],
        window: int,
        reconnect: trio_stomp.Reconnect,
        name: str,
    ) -> None:
        self._feed = feed
        self._log = log
        self._room = room
        self._window = window
        self._reconnect = reconnect
        self._name = name
        self._lock = threading.Lock()
        self._buffer: deque[Delivery] = deque()
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._closed = False
        #: True once a finite feed has delivered everything.
        self.exhausted = False
        #: The last error that made the feed reopen (for status and tests).
        self.last_error: BaseException | None = None
        #: How many times the feed was opened.
        self.opened = 0
        #: Why logging stopped (a full disk...): the reader raises it to Spark.
        self.failure: BaseException | None = None

    def start(self) -> None:
        """Start the thread and its loop (once); return when the loop runs.

        Raises:
          RuntimeError: the pump was closed, or its loop did not start in time.
        """
        if self._closed:
            raise RuntimeError(f"pump for {self._name} is closed")
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name=f"bridges-spark-pump {self._name}", daemon=True
        )
        atexit.register(self.close)
        self._thread.start()
        if not self._started.wait(START_TIMEOUT):
            raise RuntimeError(f"pump for {self._name}: its loop did not start")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def buffered(self) -> int:
        with self._lock:
            return len(self._buffer)

    def take(self, limit: int) -> list[Delivery]:
        """Up to ``limit`` buffered deliveries, oldest first; does not wait."""
        with self._lock:
            count = min(limit, len(self._buffer))
            return [self._buffer.popleft() for _ in range(count)]

    def close(self, timeout: float = 5.0) -> None:
        """Cancel the loop (disconnecting the feed) and join the thread; idempotent."""
        self._closed = True
        atexit.unregister(self.close)
        thread, token, scope = self._thread, self._token, self._scope
        if thread is None:
            return
        if token is not None and scope is not None:
            try:
                trio.from_thread.run_sync(scope.cancel, trio_token=token)
            except trio.RunFinishedError:
                pass
        thread.join(timeout)
        if thread.is_alive():
            log.warning("%s: the pump thread did not stop within %s s", self._name, timeout)
        with self._lock:
            self._buffer.clear()

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # the thread's last word: nobody else would see it
            log.error("%s: the pump stopped: %r", self._name, exc)
            self.last_error = exc
        finally:
            self._started.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            self._started.set()
            if self._closed:
                return
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._log_loop)
                await self._feed_loop()

    async def _feed_loop(self) -> None:
        attempt = 0
        while True:
            opened_before = self.opened
            try:
                await self._drain()
            except trio.EndOfChannel:
                self.exhausted = True
                await trio.sleep_forever()  # until close(): the logger still acks
            except Exception as exc:
                attempt = 1 if self.opened > opened_before else attempt + 1
                self.last_error = exc
                with self._lock:
                    self._buffer.clear()  # never acked: the source has them again
                delay = self._reconnect.delay(attempt)
                log.warning("%s: %s; again in %.1f s", self._name, exc, delay)
                await trio.sleep(delay)

    async def _log_loop(self) -> None:
        """Log what is buffered, then ack it; until a write fails (then nothing more is acked)."""
        while self.failure is None:
            await trio.sleep(LOG_INTERVAL)
            room = self._room()
            if room <= 0:
                continue
            deliveries = self.take(room)
            if not deliveries:
                continue
            records = [d.record for d in deliveries]
            try:
                await trio.to_thread.run_sync(self._log, records)
            except Exception as exc:  # not acked: the source delivers them again
                self.failure = exc
                log.error("%s: cannot log messages: %r", self._name, exc)
                return
            for delivery in deliveries:
                try:
                    await delivery.ack()
                except Exception as exc:  # its connection is gone: redelivered
                    log.debug("%s: ack failed (%r); it comes again", self._name, exc)

    async def _drain(self) -> None:
        async with self._feed() as receive:
            self.opened += 1
            while True:
                # The logger drains the buffer every LOG_INTERVAL: look
                # again shortly (cheap, and no Event to keep in step).
                while self.buffered() >= self._window:  # noqa: ASYNC110
                    await trio.sleep(_FULL_POLL)
                delivery = await receive()
                with self._lock:
                    self._buffer.append(delivery)
