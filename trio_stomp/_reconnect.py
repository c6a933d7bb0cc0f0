"""Reconnect policy and connection events (no I/O: the client does the waiting)."""

from __future__ import annotations

import random
from typing import Literal

import attrs

from ._backoff import backoff_delay


@attrs.frozen
class Reconnect:
    """How the client reconnects after the connection drops.

    Delays grow exponentially from ``initial_delay`` by ``multiplier`` up to
    ``max_delay``, with full jitter (each delay is drawn uniformly between 0
    and that bound: :func:`trio_stomp.util.backoff_delay` with ``jitter=1``), so that many clients cut off at once do not come back in
    step. URLs are tried in turn, starting with the next one after the one
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
