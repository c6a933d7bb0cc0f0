"""Durable topic subscriptions, sans-IO: ActiveMQ's ``client-id`` + ``activemq.subscriptionName``.

A plain topic subscription keeps nothing while its client is away. A
*durable* one does: it is named, as ActiveMQ names it, by the ``client-id``
header of the connection's CONNECT and the ``activemq.subscriptionName``
header of a SUBSCRIBE to a ``/topic/``. From then on every message sent to
that topic is kept for it, whether a consumer is attached or not, until it
is consumed there (acknowledged, or delivered to an ``auto`` subscription).

- The next SUBSCRIBE with the same client-id and name (any subscription id,
  any ack mode) consumes what it kept, in order; what was delivered and not
  acknowledged when its consumer went comes back first, ``redelivered:true``.
  A SUBSCRIBE naming it with another topic replaces it (what it held is
  dropped), as JMS does.
- A plain UNSUBSCRIBE (by ``id``) ends the consumer, not the subscription.
  UNSUBSCRIBE with ``activemq.subscriptionName``, from a connection with
  that client-id, removes it and what it holds (ActiveMQ's way); a current
  subscription of the connection named by the frame's ``id`` ends first.
  Removing one that does not exist, or that another subscription of the
  connection consumes, is an ERROR.
- A client-id is held by one connection at a time: a CONNECT naming a
  client-id that another open connection holds gets an ERROR ("client-id in
  use") and is closed, as on ActiveMQ.
- With a durable store (``data_dir``) the subscription and its messages are
  written in the store's commits, like queue messages (checksums, tally,
  mark file, the RECEIPT held until the commit is on disk), and are back
  after a restart. Without one they live in memory while the broker runs.
- Bounds (:class:`~trio_stomp.broker.Limits`): at most
  ``max_durable_subscriptions`` in the broker (one more is an ERROR to its
  SUBSCRIBE), each holding at most ``max_durable_messages`` messages and
  ``max_durable_bytes`` bytes (one message larger than that is still kept
  while it holds nothing), and all of them together at most
  ``max_durable_total_bytes``. A message that would pass a bound is not
  kept for that subscription (the others, and the topic's plain
  subscribers, still get it); the subscription counts it in
  :attr:`Durable.dropped` and the broker logs a warning when it starts
  dropping.

Differences from ActiveMQ: a durable SUBSCRIBE without a ``client-id`` is an
ERROR (ActiveMQ makes one up for the connection, and the subscription can
never be consumed again); under STOMP 1.0 the client-id is the
connection's too (ActiveMQ 1.0 removes by name alone); an UNSUBSCRIBE naming
both the subscription and its consumer's ``id`` ends the consumer and removes
the subscription (ActiveMQ refuses to remove one whose consumer is active).
Which messages a subscription took is not written (as for queues): a restart
delivers what it holds again, ``redelivered:true``; how many it dropped
(:attr:`Durable.dropped`) is counted from the start of the broker.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

import attrs

from ..frame import Headers
from ._config import Limits
from ._destinations import TOPIC_PREFIX, Queue, Subscription
from ._message import DestinationDepth, Message
from ._transactions import ClientError

if TYPE_CHECKING:
    from ._store import Store
    from ._store_durable import RestoredDurable

__all__ = ["CLIENT_ID_HEADER", "NAME_HEADER", "Durable", "DurableSubscriptions", "durable_name"]

log = logging.getLogger("trio_stomp.broker")

#: The CONNECT header that names the client (ActiveMQ's).
CLIENT_ID_HEADER: Final = "client-id"
#: The SUBSCRIBE and UNSUBSCRIBE header that names a durable subscription.
NAME_HEADER: Final = "activemq.subscriptionName"

DurableKey = tuple[str, str]


@attrs.define(slots=True, eq=False)
class Durable:
    """One durable subscription and what it holds.

    Attributes:
      client_id: the client-id that names it.
      name: its ``activemq.subscriptionName``.
      destination: the topic it keeps messages of.
      queue: its messages; its consumer, while one is attached.
      count: messages held: waiting, or delivered and not acknowledged.
      size: their bytes (estimated, as the broker counts messages).
      dropped: messages not kept because it was full, since the broker started.
      full: True from a message not kept until the next one is consumed (the
        broker logs a warning each time this turns True).
    """

    client_id: str
    name: str
    destination: str
    queue: Queue
    count: int = 0
    size: int = 0
    dropped: int = 0
    full: bool = False

    @property
    def key(self) -> DurableKey:
        """``(client_id, name)``."""
        return (self.client_id, self.name)

    @property
    def active(self) -> bool:
        """True while a subscription consumes it."""
        return bool(self.queue.consumers)


def durable_name(headers: Headers, destination: str) -> str | None:
    """The durable subscription a SUBSCRIBE names; None for a plain one (no name,
    or not a topic: ActiveMQ ignores the name on a queue).

    Raises:
      ClientError: the name is empty.
    """
    name = headers.get(NAME_HEADER)
    if name is None or not destination.startswith(TOPIC_PREFIX):
        return None
    if not name:
        raise ClientError(f"invalid {NAME_HEADER} header", "a durable subscription needs a name")
    return name


class DurableSubscriptions:
    """Every durable subscription of one broker, and the client-ids in use.

    Args:
      limits: the broker's limits (``max_durable_*``).
      store: the durable store; None keeps everything in memory. What it
        restored is set up at once.
    """

    def __init__(self, limits: Limits, store: Store | None = None) -> None:
        self._limits = limits
        self._store = store
        self.by_key: dict[DurableKey, Durable] = {}
        self._by_topic: dict[str, list[Durable]] = {}
        #: Message key -> the subscription holding it, and its size.
        self._held: dict[int, tuple[Durable, int]] = {}
        #: Bytes held by every durable subscription together.
        self.size = 0
        self._volatile_keys = itertools.count(-1, -1)  # (keys of messages not stored)
        #: client-id -> the session that holds it.
        self._clients: dict[str, object] = {}
        if store is not None:
            for restored in store.restored_durables:
                self._restore(restored)

    def __iter__(self) -> Iterator[Durable]:
        return iter(self.by_key.values())

    def __len__(self) -> int:
        return len(self.by_key)

    # -- client-ids --------------------------------------------------------------

    def claim(self, client_id: str, session: object) -> bool:
        """Give ``client_id`` to ``session``; False when another session holds it."""
        holder = self._clients.setdefault(client_id, session)
        return holder is session

    def release(self, client_id: str, session: object) -> None:
        """``session`` ends: its client-id is free again."""
        if self._clients.get(client_id) is session:
            del self._clients[client_id]

    # -- messages ------------------------------------------------------------------

    def publish(self, message: Message) -> int:
        """Keep ``message`` (sent to a topic) for each durable subscription of it.

        Returns:
          The store's commit number that makes it durable; 0 when nothing is stored.
        """
        ticket = 0
        durables = self._by_topic.get(message.destination)
        if not durables:
            return 0
        limits = self._limits
        store = self._store
        for durable in durables:
            # (One message is always kept: a frame the broker accepted, up to
            # max_frame_size, fits an empty subscription whatever its bound.)
            if durable.count and (
                durable.count >= limits.max_durable_messages
                or durable.size + message.size > limits.max_durable_bytes
                or self.size + message.size > limits.max_durable_total_bytes
            ):
                if not durable.full:
                    durable.full = True
                    log.warning(
                        "durable subscription %r of client-id %r is full (%d message(s), "
                        "%d bytes; all durable subscriptions: %d bytes): messages sent to %s "
                        "are not kept for it until it is read",
                        durable.name,
                        durable.client_id,
                        durable.count,
                        durable.size,
                        self.size,
                        durable.destination,
                    )
                durable.dropped += 1
                continue
            key = store.next_key() if store is not None else next(self._volatile_keys)
            kept = message._replace(key=key)
            self._hold(durable, kept)
            if store is not None:
                ticket = store.add(kept, durable.key)
            durable.queue.put(kept)
        return ticket

    def consumed(self, key: int) -> None:
        """The message of ``key`` was consumed (from a durable subscription or not)."""
        found = self._held.pop(key, None)
        if found is not None:
            durable, size = found
            durable.count -= 1
            durable.size -= size
            self.size -= size
            durable.full = False

    def _hold(self, durable: Durable, message: Message) -> None:
        self._held[message.key] = (durable, message.size)
        durable.count += 1
        durable.size += message.size
        self.size += message.size

    # -- subscribing ---------------------------------------------------------------

    def attach(self, sub: Subscription, client_id: str | None, name: str) -> int:
        """Let ``sub`` consume the durable subscription ``(client_id, name)``, made
        when missing (or replaced, when it named another topic).

        Returns:
          The store's commit number that writes a new subscription; 0 when none.

        Raises:
          ClientError: no client-id, the subscription is in use, or there are
            as many as the limit allows. Nothing changed then.
        """
        if client_id is None:
            raise ClientError(
                "durable subscription without client-id",
                f"a SUBSCRIBE with {NAME_HEADER} needs a {CLIENT_ID_HEADER} header on CONNECT",
            )
        key = (client_id, name)
        durable = self.by_key.get(key)
        if durable is not None and durable.active:
            raise ClientError(
                "durable subscription in use",
                f"durable subscription {name!r} of client-id {client_id!r} already has a "
                "consumer on this connection",
            )
        ticket = 0
        if durable is not None and durable.destination != sub.destination:
            ticket = self._drop(durable)  # (JMS: another topic is another subscription)
            durable = None
        if durable is None:
            limit = self._limits.max_durable_subscriptions
            if len(self.by_key) >= limit:
                raise ClientError("too many durable subscriptions", f"the limit is {limit}")
            durable = self._create(client_id, name, sub.destination)
            if self._store is not None:
                ticket = self._store.save_durable(key, sub.destination)
        durable.queue.add(sub)
        return ticket

    def remove(self, client_id: str | None, name: str) -> int:
        """Remove the durable subscription ``(client_id, name)`` and what it holds.

        Returns:
          The store's commit number that deletes it; 0 when nothing is stored.

        Raises:
          ClientError: no client-id, no such subscription, or it has a consumer.
        """
        if client_id is None:
            raise ClientError(
                "durable subscription without client-id",
                f"an UNSUBSCRIBE with {NAME_HEADER} needs a {CLIENT_ID_HEADER} header on CONNECT",
            )
        durable = self.by_key.get((client_id, name))
        if durable is None:
            raise ClientError(
                "unknown durable subscription",
                f"no durable subscription {name!r} of client-id {client_id!r}",
            )
        if durable.active:
            raise ClientError(
                "durable subscription in use",
                f"durable subscription {name!r} of client-id {client_id!r} has a consumer: "
                "UNSUBSCRIBE it first (or name its id)",
            )
        return self._drop(durable)

    def _create(self, client_id: str, name: str, destination: str) -> Durable:
        durable = Durable(client_id, name, destination, Queue(destination))
        self.by_key[durable.key] = durable
        self._by_topic.setdefault(destination, []).append(durable)
        return durable

    def _drop(self, durable: Durable) -> int:
        del self.by_key[durable.key]
        topic = self._by_topic[durable.destination]
        topic.remove(durable)
        if not topic:
            del self._by_topic[durable.destination]
        store = self._store
        for message in durable.queue.messages:
            if self._held.pop(message.key, None) is not None:
                self.size -= message.size
            if store is not None:
                store.remove(message.key)
        durable.queue.drop_all()
        return store.drop_durable(durable.key) if store is not None else 0

    def _restore(self, restored: RestoredDurable) -> None:
        durable = self._create(restored.client_id, restored.name, restored.destination)
        for message in restored.messages:
            self._hold(durable, message)
            durable.queue.messages.append(message)

    # -- accounting ------------------------------------------------------------------

    def depths(self) -> list[DestinationDepth]:
        """One entry per durable subscription (see :meth:`Router.depths`)."""
        stored = self._store is not None
        return [
            DestinationDepth(
                durable.destination,
                len(durable.queue.messages),
                sum(len(sub.unacked) for sub in durable.queue.consumers),
                len(durable.queue.consumers),
                durable=stored,
                subscription=f"{durable.client_id}:{durable.name}",
            )
            for durable in self.by_key.values()
        ]
