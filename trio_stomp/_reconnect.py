"""Reconnecting: the policy, the events it reports, and the supervisor's bookkeeping.

:class:`Reconnect` says how long to wait between attempts (the one backoff
curve, :func:`trio_stomp.util.backoff_delay`). A :class:`Supervisor` is what a
reconnecting client keeps between connections: the SENDs to send again (those
the dead connection never wrote, and those whose receipt had not come), when
the outage began, and how to open the next connection. The client's
supervisor task (in :mod:`._client`) drives it: on a failure it calls
:meth:`Supervisor.lost`, then :meth:`Supervisor.next_connection`, then, once
every subscription is back, :meth:`Supervisor.replay_on` and
:meth:`Supervisor.restored`.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

import attrs
import trio

from ._backoff import backoff_delay
from .frame import Frame, encode

if TYPE_CHECKING:
    from ._connection import Connection


@attrs.frozen
class Reconnect:
    """How the client reconnects after the connection drops.

    Delays grow exponentially from ``initial_delay`` by ``multiplier`` up to
    ``max_delay``, with full jitter (each delay is drawn uniformly between 0
    and that bound: :func:`trio_stomp.util.backoff_delay` with ``jitter=1``),
    so that many clients cut off at once do not come back in step. URLs are
    tried in turn, starting with the next one after the one
    that failed; ``shuffle`` randomises their order for each round instead.

    Args:
      initial_delay: the bound on the first delay, in seconds.
      max_delay: the cap on any delay, in seconds.
      multiplier: growth of the bound per attempt.
      max_attempts: give up after this many failed attempts in one outage
        (None: never give up). Giving up raises :class:`ConnectionLost` at the
        ``async with``.
      shuffle: try the URLs in a random order.
    """

    initial_delay: float = attrs.field(default=0.1, validator=attrs.validators.gt(0))
    max_delay: float = attrs.field(default=30.0, validator=attrs.validators.gt(0))
    multiplier: float = attrs.field(default=2.0, validator=attrs.validators.ge(1))
    max_attempts: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    shuffle: bool = False

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay before retry number ``attempt`` (1 for the first retry)."""
        return backoff_delay(
            attempt,
            initial=self.initial_delay,
            maximum=self.max_delay,
            multiplier=self.multiplier,
            jitter=1.0,
            rand=(rng or random).random,
        )


@attrs.frozen
class ConnectionEvent:
    """What the ``on_event`` callback of :func:`trio_stomp.connect` is told.

    Attributes:
      kind: "lost" when the connection dropped, "restored" when a new one is
        up with every subscription re-established.
      url: the broker URL concerned.
      error: why the connection dropped (for "lost").
      attempts: connection attempts it took (for "restored").
      downtime: seconds from "lost" to "restored" (for "restored").
    """

    kind: Literal["lost", "restored"]
    url: str
    error: str | None = None
    attempts: int = 0
    downtime: float = 0.0


EventCallback = Callable[[ConnectionEvent], object]
#: Opens the next connection after the one to the given URL failed; returns it and
#: the attempts it took (``_connect.open_any`` bound to the client's targets).
Reopen = Callable[[str], Awaitable[tuple["Connection", int]]]


@attrs.frozen
class Replay:
    """A SEND that goes out again on the next connection if this one fails first."""

    seq: int
    frame: Frame


class Supervisor:
    """A reconnecting client's state between connections (see the module docs).

    Attributes:
      replays: receipt id -> the SEND awaiting that receipt: sent again if the
        connection drops before it comes.
      queue: what goes out again on the next connection, in the order first sent.
      lost_conn: the connection whose loss is being handled (each is handled once).
    """

    def __init__(self, policy: Reconnect, reopen: Reopen, on_event: EventCallback | None) -> None:
        self.policy = policy
        self._reopen = reopen
        self._on_event = on_event
        self._seq = itertools.count()
        self.replays: dict[str, Replay] = {}
        self.queue: list[Replay] = []
        self.lost_conn: Connection | None = None
        self._lost_at = 0.0
        self._attempts = 0

    def replay(self, frame: Frame) -> Replay:
        """Mark ``frame`` (a plain SEND) to be sent again if its connection fails first."""
        return Replay(next(self._seq), frame)

    def event(self, event: ConnectionEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)

    def lost(self, old: Connection, error: object) -> None:
        """``old`` dropped: collect what must go out again (once each, in order)."""
        self.lost_conn = old
        self._lost_at = trio.current_time()
        # What the dead connection never wrote, what still awaits a receipt,
        # and what a failed restore had not replayed yet.
        pending: list[Replay] = [*self.queue, *self.replays.values(), *old.outbox.unwritten()]
        self.queue = sorted({r.seq: r for r in pending}.values(), key=lambda r: r.seq)
        self.event(ConnectionEvent("lost", old.url, error=str(error)))

    async def next_connection(self, failed: Connection) -> Connection:
        """Open the next connection (the next URL first), with the policy's backoff.

        Raises:
          ConnectFailed: the policy's ``max_attempts`` ran out.
        """
        conn, attempts = await self._reopen(failed.url)
        self._attempts = attempts
        return conn

    async def replay_on(self, conn: Connection) -> None:
        """Send the queued SENDs on ``conn`` (after every subscription is back)."""
        for replay in self.queue:
            await conn.outbox.put(encode(replay.frame, conn.version), replay)
        self.queue = []

    def restored(self, conn: Connection) -> None:
        """``conn`` serves everything again (subscriptions back, SENDs replayed): report
        it, with the downtime from the loss until now."""
        downtime = trio.current_time() - self._lost_at
        self.event(
            ConnectionEvent("restored", conn.url, attempts=self._attempts, downtime=downtime)
        )
