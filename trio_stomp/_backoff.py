"""The one backoff curve: exponential growth, a cap, and jitter."""

from __future__ import annotations

import random
from collections.abc import Callable

#: Past this exponent every curve is at its cap; it keeps ``multiplier ** n`` finite.
_MAX_EXPONENT = 64


def backoff_delay(
    attempt: int,
    *,
    initial: float,
    maximum: float,
    multiplier: float = 2.0,
    jitter: float = 1.0,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    The bound is ``initial * multiplier ** (attempt - 1)``, capped at ``maximum``;
    the delay is that bound shortened by a random fraction of up to ``jitter``
    (0: none; 1, "full jitter": anywhere from 0 to the bound), so that many
    clients or routes that failed together do not come back in step. Both the
    client's :class:`~trio_stomp.Reconnect` and the bridges' retry policy use
    this function, so they follow the same curve.

    Args:
      attempt: how many attempts have failed so far (values below 1 count as 1).
      initial: the first bound, s (>= 0).
      maximum: the cap on any delay, s (>= 0).
      multiplier: growth of the bound per attempt (>= 1).
      jitter: 0 to 1, the largest fraction taken off the bound.
      rand: a float in [0, 1) per call (tests pass a constant).

    Returns:
      A delay in ``[bound * (1 - jitter), bound]``, never negative, never above
      ``maximum``, whatever ``attempt`` is (no overflow).
    """
    exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
    bound = min(maximum, initial * multiplier**exponent)
    return bound * (1.0 - jitter * rand())
