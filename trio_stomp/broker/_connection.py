"""The Trio edge of one client connection: reader, writer and timers.

Three tasks per connection, in one nursery that lives as long as the
connection:

- the reader feeds every chunk the socket gives to the session. It never
  waits for anything but the socket: frames for other connections are only
  queued (see the writer), so a slow consumer never stalls a producer, its
  heart-beats or its receipts. A chunk's frames are acted on a turn at a
  time (:data:`FRAMES_PER_TURN`, :data:`WORK_PER_TURN`; see
  :mod:`._intake`) with a checkpoint between turns, so a client that
  pipelines thousands of small frames cannot starve the other connections;
- the writer takes everything the session has queued and writes it with one
  ``send_all``, so a burst of MESSAGE frames costs one system call, and one
  task switch per burst rather than per frame;
- the timers task enforces the CONNECT timeout, sends heart-beats when the
  connection is idle and ends it when the client falls silent.

Once the session closes (ERROR sent, DISCONNECT, broker shutdown), the
connection gets ``close_timeout`` seconds to flush and say goodbye, then it
is cancelled whatever the client does. On a broker shutdown the goodbye is
the ERROR "broker shutting down", then, on a WebSocket, a Close 1001 that the
client answers; a TCP or TLS socket is closed right after the ERROR (a client
that has not closed its side would otherwise hold the shutdown for
``close_timeout``).
"""

from __future__ import annotations

import math
from contextlib import suppress
from typing import Final

import trio

from ._config import Limits
from ._listeners import Goodbye
from ._session import Session

RECEIVE_SIZE: Final = 256 * 1024
#: The most frames of one read the reader acts on before it lets every other
#: task run (a checkpoint): some 0.3 to 0.8 ms of small SENDs.
FRAMES_PER_TURN: Final = 64
#: Nor any more frame, before the checkpoint, once their selectors spent this
#: many work units (about 1 ms at the dearest weight, 1.2 ns per unit;
#: ``bench/speed/selector_work.py``). One frame may still spend up to a
#: dispatch's budget, ``Limits.max_selector_dispatch_work``.
WORK_PER_TURN: Final = 1_000_000

_STREAM_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError)


class Connection:
    """Runs one :class:`Session` over one stream (it is the session's events).

    Args:
      stream: the client's byte stream; the connection closes it.
      limits: timeouts come from here.
      goodbye: sent after the shutdown ERROR when the broker stops, before
        waiting for the client to close (a WebSocket Close 1001); None to
        close the stream right after the ERROR.
    """

    session: Session

    def __init__(
        self,
        stream: trio.abc.HalfCloseableStream,
        limits: Limits,
        *,
        goodbye: Goodbye | None = None,
    ) -> None:
        self.stream = stream
        self.limits = limits
        self._goodbye = goodbye
        self._scope: trio.CancelScope | None = None
        self._wakeup = trio.Event()
        self._connected = trio.Event()
        self._client_eof = trio.Event()
        self._shutting_down = False
        self._aborted = False
        now = trio.current_time()
        self._last_sent = now
        self._last_received = now

    # -- SessionEvents ---------------------------------------------------------

    def wake(self) -> None:
        """The session has output, or is closing: wake the writer."""
        self._wakeup.set()
        if self.session.closing:
            self._start_close_deadline()

    def abort(self) -> None:
        """The session must go now: cancel every task of the connection."""
        self._aborted = True
        if self._scope is not None:
            self._scope.cancel()

    # -- lifecycle -------------------------------------------------------------

    def shutdown(self) -> None:
        """The broker stops: tell the client (ERROR, and the goodbye), flush, close.

        Everything is over ``close_timeout`` seconds from now at the latest.
        """
        self._shutting_down = True
        self.session.shutdown()
        self._start_close_deadline()

    async def run(self) -> None:
        """Serve the connection until it ends; always closes the stream.

        Raises only on a bug: a broken socket or a misbehaving client ends
        the connection quietly.
        """
        session = self.session
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                if self._aborted or session.closing:
                    self._start_close_deadline()
                    if self._aborted:
                        nursery.cancel_scope.cancel()
                nursery.start_soon(self._read_loop)
                nursery.start_soon(self._timers)
                if await self._write_loop():
                    if not self._shutting_down:
                        # Half-close and let the client read our last frame before
                        # it sees the connection end: closing with unread input
                        # would reset the connection and could destroy that frame.
                        with suppress(*_STREAM_ERRORS):
                            await self.stream.send_eof()
                        await self._client_eof.wait()
                    elif self._goodbye is not None:
                        # The broker stops: a WebSocket's closing handshake. The
                        # client answers at once; the close deadline bounds a
                        # client that does not.
                        with suppress(*_STREAM_ERRORS):
                            await self._goodbye()
                        await self._client_eof.wait()
                nursery.cancel_scope.cancel()
        finally:
            session.connection_lost()
            await trio.aclose_forcefully(self.stream)

    def _start_close_deadline(self) -> None:
        scope = self._scope
        if scope is not None:
            scope.deadline = min(scope.deadline, trio.current_time() + self.limits.close_timeout)

    # -- tasks -----------------------------------------------------------------

    async def _read_loop(self) -> None:
        session = self.session
        stream = self.stream
        connected = self._connected
        while True:
            try:
                data = await stream.receive_some(RECEIVE_SIZE)
            except _STREAM_ERRORS:
                self.abort()
                return
            if not data:
                self._client_eof.set()
                session.receive_eof()
                return
            self._last_received = trio.current_time()
            # Once closing, input is read and dropped until the client leaves.
            if session.closing:
                continue
            # A turn at a time, every other connection served between two
            # (see the module docs); the next read once this one is done.
            more = session.receive_data(data, max_frames=FRAMES_PER_TURN, max_work=WORK_PER_TURN)
            while True:
                if not connected.is_set() and session.connected:
                    connected.set()
                if not more:
                    break
                await trio.lowlevel.checkpoint()
                more = session.receive_more(max_frames=FRAMES_PER_TURN, max_work=WORK_PER_TURN)

    async def _write_loop(self) -> bool:
        """Write until the session closes; True when everything was flushed."""
        session = self.session
        stream = self.stream
        try:
            while True:
                data = session.take_output()
                if data:
                    await stream.send_all(data)
                    self._last_sent = trio.current_time()
                    session.output_sent(len(data))
                elif session.closing:
                    return True
                else:
                    self._wakeup = trio.Event()
                    await self._wakeup.wait()
        except _STREAM_ERRORS:
            return False

    async def _timers(self) -> None:
        session = self.session
        timeout = self.limits.connect_timeout
        with trio.move_on_after(timeout if timeout > 0 else math.inf):
            await self._connected.wait()
        if not self._connected.is_set():
            session.connect_timeout()
            return
        send = session.heartbeat_send_ms / 1000
        # The spec asks receivers to be tolerant: allow twice the interval.
        receive = 2 * session.heartbeat_receive_ms / 1000
        if not send and not receive:
            return
        while not session.closing:
            now = trio.current_time()
            wake_at = math.inf
            if send:
                due = self._last_sent + send
                if now >= due:
                    session.send_heartbeat()
                    self._last_sent = now
                    due = now + send
                wake_at = due
            if receive:
                due = self._last_received + receive
                if now >= due:
                    session.heartbeat_timeout()
                    return
                wake_at = min(wake_at, due)
            await trio.sleep_until(wake_at)
