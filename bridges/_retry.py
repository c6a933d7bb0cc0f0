"""Retry policy: how often a failed write is tried again, and how long to wait between."""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs
from attrs.validators import ge, le


@attrs.frozen
class RetryPolicy:
    """Exponential backoff with jitter and a cap.

    A batch is written at most ``attempts`` times. Before try ``n + 1`` the
    engine waits ``delay(n)``: ``initial * multiplier ** (n - 1)``, capped at
    ``max``, then shortened by a random fraction of up to ``jitter`` so that
    routes failing together do not retry together. The same curve spaces out
    a route's restarts and its pauses after a nack.

    Attributes:
      attempts: tries per batch, at least 1 (1: no retry).
      initial: the first delay, s.
      max: the longest delay, s.
      multiplier: growth per attempt, at least 1.
      jitter: 0 (none) to 1 (anything from 0 to the full delay).
    """

    attempts: int = attrs.field(default=5, validator=ge(1))
    initial: float = attrs.field(default=0.1, validator=ge(0.0))
    max: float = attrs.field(default=30.0, validator=ge(0.0))
    multiplier: float = attrs.field(default=2.0, validator=ge(1.0))
    jitter: float = attrs.field(default=0.2, validator=[ge(0.0), le(1.0)])

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based).

        Never more than :attr:`max`, never negative; ``rand`` returns a float
        in [0, 1) (tests pass a constant).
        """
        exponent = min(max(attempt - 1, 0), 64)  # 2.0 ** 64 s is already "the cap"
        base = min(self.max, self.initial * self.multiplier**exponent)
        return base * (1.0 - self.jitter * rand())
