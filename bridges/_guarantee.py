"""What a target keeps across its own restart, as its endpoint found by asking it.

A sink's ack means "durable" only as far as the target keeps what it
acknowledged: a Redis without AOF, a JetStream stream in memory, a STOMP
message sent without ``persistent:true`` are acknowledged and then lost when
that server restarts. Where the target can be asked, its endpoint asks
(``probe()``, with a deadline) and says what it found as a :class:`Guarantee`:
``bridges check --probe`` prints it per route, and a sink logs a WARNING once
at open when the answer is weaker than the guarantee table
(docs/explanation/delivery-guarantees.md) states.
"""

from __future__ import annotations

import logging
from typing import Final, Literal

import attrs

#: The target keeps what it acknowledged across its own SIGKILL and restart.
DURABLE: Final = "durable"
#: The target acknowledges, then loses what it holds when it restarts.
AT_MOST_ONCE: Final = "at most once across a target restart"
#: The target could not be asked (or cannot say): the table's row stands.
NOT_ASKED: Final = "not asked"
#: How long a probe may take, s: it never holds a route or a check longer.
PROBE_TIMEOUT: Final = 5.0

Level = Literal["durable", "at most once across a target restart", "not asked"]


@attrs.frozen
class Guarantee:
    """What one endpoint's target keeps, and why (what it was configured with).

    Attributes:
      level: :data:`DURABLE`, :data:`AT_MOST_ONCE` or :data:`NOT_ASKED`.
      reason: what the target answered, in words (``appendonly no``).
    """

    level: Level
    reason: str

    @property
    def weaker(self) -> bool:
        """True when the target loses acknowledged messages on its restart."""
        return self.level == AT_MOST_ONCE

    def __str__(self) -> str:
        return f"{self.level} ({self.reason})" if self.reason else self.level


def warn_if_weaker(log: logging.Logger, where: str, guarantee: Guarantee) -> bool:
    """Log ``guarantee`` at WARNING when it is weaker than durable; True if it did."""
    if not guarantee.weaker:
        return False
    log.warning(
        "%s acknowledges messages it does not keep: %s. The route is AT MOST ONCE across a "
        "restart of it (see docs/explanation/delivery-guarantees.md, 'What each target must "
        "be configured with')",
        where,
        guarantee,
    )
    return True
