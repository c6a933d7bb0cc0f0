"""Who may hold one of a webhook path's ``max_pending`` places, and what was refused.

A place bounds memory (at most ``max_pending`` bodies of ``max_body``), so
it is taken before the body is read. But the signature can only be checked
once the whole body is in, so a place held by a body that is still arriving
is held by someone who has proven nothing. Three rules keep those places
from being taken over by senders that send slowly (slowloris):

- **Per peer**: at most ``max_per_peer`` places belong to one address (an
  IPv4 address, or the /64 of an IPv6 one: one host usually has a whole
  /64). Connections from one address cannot fill the path. When an
  address's places are all taken, a newcomer from it takes the place of
  that address's own body that has been arriving the longest, as below:
  behind a reverse proxy every sender has the proxy's address, so a signed
  sender shares it with any attacker and must not be starved by one.
- **Rate**: a body must arrive at ``min_body_rate`` bytes/s on average,
  after ``body_grace`` s (the way Kestrel's ``MinRequestBodyDataRate``
  works), and whole within ``body_timeout``; else 408 (:func:`body_limit`).
- **Eviction**: when every place is taken and some are held by bodies still
  arriving, a newcomer takes the place of the one that has been arriving
  the longest (answered 503 with ``Retry-After``). A body that has arrived
  (and waits for the route) is never evicted. A legitimate sender's body
  arrives in milliseconds, so it would take thousands of new connections a
  second to push it out, while an attacker's bodies, by being slow, are
  always the oldest.

Connections that have not sent a whole request head hold no place: the
server gives the head ``HEAD_TIMEOUT`` s and ``MAX_HEAD`` bytes (see
:mod:`.listener` and :mod:`.server`).

:class:`Refusals` counts every refusal by reason (for ``/metrics``) and logs
them at a bounded rate: the first at once, then at most one line per
:data:`LOG_INTERVAL` s with the counts, whatever the rate of requests.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from typing import Final

import trio

log = logging.getLogger("bridges.http")

#: Reasons a request is refused, with the status it gets (the metric's ``reason`` label).
REASONS: Final = {
    "max_pending": 503,
    "max_per_peer": 503,
    "evicted": 503,
    "min_body_rate": 408,
    "body_timeout": 408,
    "max_body": 413,
    "unauthorized": 401,
}
#: At most one refusal log line per path per this many seconds (the first one at once).
LOG_INTERVAL: Final = 10.0


def peer_key(client: object) -> str:
    """The address a place is counted against: IPv4, or an IPv6 /64; ``"?"`` when unknown."""
    if not isinstance(client, (tuple, list)) or not client:
        return "?"
    return _peer_of(str(client[0]))


@functools.lru_cache(maxsize=4096)  # (parsing an address costs more than the rest of a place)
def _peer_of(host: str) -> str:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class Place:
    """One request's place; its body is still arriving until :meth:`arrived`."""

    __slots__ = ("_scope", "evicted", "peer", "released", "started")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.started = trio.current_time()
        self._scope: trio.CancelScope | None = None
        self.evicted = False
        self.released = False

    @property
    def scope(self) -> trio.CancelScope:
        """Cancelled to evict the request while its body is arriving (made when first
        needed: a body that came with its head never waits in it)."""
        if self._scope is None:
            self._scope = trio.CancelScope()
        return self._scope


def body_limit(received: int, rate: float, grace: float, timeout: float) -> tuple[float, str]:
    """How long (s, from the head) a body may take having ``received`` bytes, and which limit.

    The reason is ``"min_body_rate"`` while the rate's bound (``grace +
    received / rate``) is the nearer one, else ``"body_timeout"``; a
    ``rate`` of 0 checks no rate.
    """
    if rate > 0 and grace + received / rate < timeout:
        return grace + received / rate, "min_body_rate"
    return timeout, "body_timeout"


class Places:
    """The ``max_pending`` places of one path, per peer, oldest arriving body first."""

    def __init__(self, total: int, per_peer: int) -> None:
        self.total = total
        self.per_peer = per_peer
        self.held = 0
        self._peers: dict[str, int] = {}
        self._arriving: dict[Place, None] = {}  # insertion order: the oldest first
        self._arriving_from: dict[str, dict[Place, None]] = {}  # the same, per peer

    def take(self, peer: str) -> Place | str:
        """A place for a request from ``peer``, or the reason (a key of :data:`REASONS`)."""
        if self._peers.get(peer, 0) >= self.per_peer:
            own = self._arriving_from.get(peer)
            if not own:
                return "max_per_peer"
            self._evict(next(iter(own)))
        if self.held >= self.total:
            if not self._arriving:
                return "max_pending"
            self._evict(next(iter(self._arriving)))
        place = Place(peer)
        self.held += 1
        self._peers[peer] = self._peers.get(peer, 0) + 1
        self._arriving[place] = None
        self._arriving_from.setdefault(peer, {})[place] = None
        return place

    def _evict(self, place: Place) -> None:
        place.evicted = True
        place.scope.cancel()
        self.release(place)

    def arrived(self, place: Place) -> None:
        """Its body is in: it can no longer be evicted."""
        if self._arriving.pop(place, 0) is None:
            self._forget(place)

    def _forget(self, place: Place) -> None:
        own = self._arriving_from[place.peer]
        del own[place]
        if not own:
            del self._arriving_from[place.peer]

    def release(self, place: Place) -> None:
        """Give the place back (once; an evicted place was given back when evicted)."""
        if place.released:
            return
        place.released = True
        if self._arriving.pop(place, 0) is None:
            self._forget(place)
        self.held -= 1
        left = self._peers[place.peer] - 1
        if left:
            self._peers[place.peer] = left
        else:
            del self._peers[place.peer]


class Refusals:
    """Counts of refused requests by reason, and their log lines, at a bounded rate.

    Attributes:
      counts: every refusal since the source was created, by reason (all of
        :data:`REASONS`, zero included): what ``/metrics`` shows.
    """

    def __init__(self, origin: str, counts: dict[str, int]) -> None:
        self.origin = origin
        self.counts = counts
        self._recent: dict[str, int] = {}
        self._last: dict[str, str] = {}
        self._noted = trio.Event()

    def note(self, reason: str, peer: str, detail: str = "") -> None:
        """Count a refusal; the line saying so is logged by :meth:`run`."""
        self.counts[reason] = self.counts.get(reason, 0) + 1
        self._recent[reason] = self._recent.get(reason, 0) + 1
        self._last[reason] = f"{peer}: {detail}" if detail else peer
        self._noted.set()

    async def run(self) -> None:
        """Log what was refused: the first at once, then one line per :data:`LOG_INTERVAL` s."""
        try:
            while True:
                await self._noted.wait()
                self._noted = trio.Event()
                self.flush()
                await trio.sleep(LOG_INTERVAL)
        finally:
            self.flush()

    def flush(self) -> None:
        """Log the refusals not logged yet, if any, in one line."""
        if not self._recent:
            return
        parts = [
            f"{count} x {REASONS[reason]} {reason} (last: {self._last[reason]})"
            for reason, count in sorted(self._recent.items(), key=lambda item: -item[1])
        ]
        total = sum(self._recent.values())
        log.warning("%s: refused %d request(s): %s", self.origin, total, ", ".join(parts))
        self._recent.clear()
        self._last.clear()
