"""A connection's input, acted on a turn at a time, sans-IO.

One read of the socket can hold thousands of frames: 256 KiB of small
SENDs is some 5,000 of them. The broker serves every connection from one
thread, so acting on all of them in one go would hold every other
connection (its deliveries, receipts and heart-beats) for as long as they
take, and a client that pipelines read after read would starve the others.
The work of each frame is bounded (a selector's evaluation and dispatch
have budgets: :mod:`._selector_work`); the sum of one read's is bounded here.

The frames of a read are acted on a *turn* at a time: at most
``max_frames`` frames, and no more frame once the turn's selector
evaluations have spent ``max_work`` units (the broker's own measure of
work; see :mod:`._selector_work`). Between turns the Trio edge
(:mod:`._connection`) checkpoints, so that every other connection gets its
turn; it reads the socket again only once every frame of the last read was
acted on, so what waits is one read's frames at most, and the client's
backpressure is the socket's.

Frames are parsed ahead of acting on them (the whole read at once: parsing
is cheap beside acting), except before CONNECT, when the parser stops after
each frame, since CONNECT's version decides how the bytes after it parse.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Protocol

from ..frame import HEARTBEAT, Frame, FrameParser, RemoteProtocolError, Version
from ._selector_work import SelectorMeter

__all__ = ["UNBOUNDED", "Intake"]

#: No bound on a turn (``max_frames``, ``max_work``).
UNBOUNDED = sys.maxsize


class Acting(Protocol):
    """What an :class:`Intake` needs of the session it feeds."""

    @property
    def parser(self) -> FrameParser: ...
    @property
    def meter(self) -> SelectorMeter: ...
    @property
    def closing(self) -> bool: ...
    @property
    def version(self) -> Version | None: ...
    def handle_frame(self, frame: Frame) -> None: ...
    def malformed(self, detail: str) -> None: ...


class Intake:
    """The frames of one read not yet acted on, and the protocol error after them."""

    __slots__ = ("_at", "_bad", "_events", "_paused")

    def __init__(self) -> None:
        self._events: Sequence[object] = ()
        self._at = 0
        #: The bytes after the events did not parse: said once they are acted on.
        self._bad: RemoteProtocolError | None = None
        #: The parser stopped after a frame (before CONNECT) and holds the rest.
        self._paused = False

    @property
    def pending(self) -> bool:
        """True while frames of the last read wait for a turn."""
        return self._at < len(self._events) or self._bad is not None or self._paused

    def act(
        self,
        session: Acting,
        data: bytes | None,
        max_frames: int = UNBOUNDED,
        max_work: int = UNBOUNDED,
    ) -> bool:
        """Parse ``data`` (None: nothing new) and act on frames for one turn.

        Returns:
          True when frames wait for the next turn (call again with None).

        Raises:
          RuntimeError: ``data`` came while frames of the last read still wait.
        """
        if data is not None and self.pending:
            raise RuntimeError("new data while frames of the last read wait for their turn")
        meter, handle, heartbeat = session.meter, session.handle_frame, HEARTBEAT
        until = meter.spent + max_work if max_work < UNBOUNDED else UNBOUNDED
        left = max_frames
        while not session.closing:
            events, at = self._events, self._at
            while at < len(events):
                if left <= 0 or meter.spent >= until:
                    self._at = at
                    return True
                event = events[at]
                at += 1
                if event is not heartbeat:
                    assert isinstance(event, Frame)
                    left -= 1
                    handle(event)
                    if session.closing:
                        break
            self._events, self._at = (), 0
            if session.closing:
                break
            if self._bad is not None:
                bad, self._bad = self._bad, None
                self._paused = False
                session.malformed(str(bad))
                break
            if data is None and not self._paused:
                break
            # Until CONNECT negotiates a version, parse one frame at a time:
            # what follows it parses under the rules of that version.
            pause = session.version is None
            parser = session.parser
            try:
                if data is not None:
                    events = parser.feed(data, pause_after_frame=pause)
                    data = None
                else:
                    events = parser.resume(pause_after_frame=pause)
            except RemoteProtocolError as exc:
                # The frames before the bad bytes are valid: act on them first.
                events, self._bad = exc.events, exc
            self._events = events
            self._paused = pause and bool(events)
        self._events, self._at, self._bad, self._paused = (), 0, None, False
        return False
