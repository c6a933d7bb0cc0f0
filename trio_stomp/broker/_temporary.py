"""Temporary queues, sans-IO: ``/temp-queue/<name>`` as RabbitMQ and ActiveMQ have it.

The request/reply pattern: a requester sends with ``reply-to:/temp-queue/<name>``
and a responder answers to whatever ``reply-to`` its MESSAGE carries. So that
no two sessions mix their replies, a ``/temp-queue/<name>`` is private to the
session that names it:

- The broker rewrites ``reply-to:/temp-queue/<name>`` on a SEND to the name of
  a queue made for that session and name, ``/reply-queue/<opaque>`` (RabbitMQ's
  form; the opaque part is random, so nobody can guess it). Every SEND of the
  session naming the same ``/temp-queue/<name>`` gets the same reply queue;
  another session naming it gets its own.
- RabbitMQ's way: when the session does not consume that queue yet, the SEND
  subscribes it (``ack:auto``, subscription id ``/temp-queue/<name>``), so
  replies arrive as MESSAGE frames whose ``subscription`` is the temp name.
- ActiveMQ's way: a SUBSCRIBE to ``/temp-queue/<name>`` (any id, any ack
  mode) consumes the session's own queue; a SEND naming it then subscribes
  nothing more. A SEND *to* ``/temp-queue/<name>`` goes to the session's own
  queue too.
- A reply queue lives as long as its session: when the connection ends, the
  queue and what it holds are dropped. A SEND to a ``/reply-queue/`` that does
  not exist (its session ended, or it never did) is dropped, as RabbitMQ drops
  an unroutable message: a reply to a request given up long ago cannot make
  a queue nobody will ever read.
- Nobody SUBSCRIBEs to a ``/reply-queue/`` name (only its session consumes it,
  through the temp name), and replies are never written to the durable store.
- Bounds: what waits in a session's reply queues counts against its outbound
  bound (:attr:`Limits.max_outbound_bytes <trio_stomp.broker.Limits>`), as a
  topic subscription's backlog does, so a flood of replies to a client that
  does not read them disconnects that client instead of growing the broker;
  a session holds at most :attr:`Limits.max_subscriptions` temp queues.
"""

from __future__ import annotations

import secrets
from typing import Final, Protocol

from ..frame import Headers
from ._config import Limits
from ._destinations import REPLY_QUEUE_PREFIX, Consumer, DurableRouting, Queue, Router, Subscription
from ._transactions import ClientError

_Pairs = tuple[tuple[str, str], ...]


class Owner(Consumer, Protocol):
    """The session that owns the temp queues, as they need it."""

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        """Its subscriptions, by id (an implicit one joins them)."""

    @property
    def limits(self) -> Limits:
        """Its broker's limits."""


#: The prefix of a session's own temporary queue names.
TEMP_QUEUE_PREFIX: Final = "/temp-queue/"


class TemporaryQueues:
    """One session's temp queues, by the ``/temp-queue/<name>`` it gave each.

    Args:
      router: the broker's destinations, which route replies to the queues.
      session: the session that owns them (their backlog counts against it).
      limit: the most temp queues the session may have.
    """

    def __init__(self, router: Router[DurableRouting], session: Owner, limit: int) -> None:
        self._router = router
        self._session = session
        self._limit = limit
        #: ``/temp-queue/<name>`` -> its reply queue.
        self._queues: dict[str, Queue] = {}

    def queue(self, temp_name: str) -> Queue:
        """The reply queue of ``temp_name`` (``/temp-queue/...``), made on first use.

        Raises:
          ClientError: the session already has as many temp queues as it may.
        """
        queue = self._queues.get(temp_name)
        if queue is None:
            if len(self._queues) >= self._limit:
                raise ClientError("too many temporary queues", f"the limit is {self._limit}")
            name = f"{REPLY_QUEUE_PREFIX}tmp.{secrets.token_urlsafe(16)}"
            queue = self._queues[temp_name] = self._router.open_temporary(name, self._session)
        return queue

    def rewrite(self, destination: str, headers: Headers) -> tuple[str, _Pairs]:
        """The destination and headers a SEND routes with: a temp name as its
        ``destination`` becomes its reply queue's, and so does one in ``reply-to``
        (see :meth:`rewrite_reply_to`).

        Raises:
          ClientError: as :meth:`rewrite_reply_to`.
        """
        if destination.startswith(TEMP_QUEUE_PREFIX):
            destination = self.queue(destination).name
        items = headers.items()
        reply_to = headers.get("reply-to")
        if reply_to is not None and reply_to.startswith(TEMP_QUEUE_PREFIX):
            items = self.rewrite_reply_to(items, reply_to)
        return destination, items

    def to_subscribe(self, destination: str) -> Queue | None:
        """The reply queue a SUBSCRIBE to ``destination`` consumes (made on first use),
        or None when it is no temp name.

        Raises:
          ClientError: ``destination`` is a ``/reply-queue/`` name, or over the limit.
        """
        if destination.startswith(TEMP_QUEUE_PREFIX):
            return self.queue(destination)
        if destination.startswith(REPLY_QUEUE_PREFIX):
            raise ClientError(
                "invalid destination",
                f"{destination!r} is not a valid destination for SUBSCRIBE; its session "
                "consumes it by the /temp-queue/ name that made it",
            )
        return None

    def rewrite_reply_to(self, headers: _Pairs, reply_to: str) -> _Pairs:
        """``headers`` of a SEND with its (first) ``reply-to:/temp-queue/...`` renamed to
        the reply queue; subscribes the session to that queue unless it consumes it.

        Raises:
          ClientError: over a limit, or the subscription id ``reply_to`` is taken by
            a subscription to something else.
        """
        queue = self.queue(reply_to)
        if not queue.consumers:
            self._subscribe_implicitly(reply_to, queue)
        renamed = list(headers)
        index = next(i for i, (name, _) in enumerate(renamed) if name == "reply-to")
        renamed[index] = ("reply-to", queue.name)
        return tuple(renamed)

    def _subscribe_implicitly(self, temp_name: str, queue: Queue) -> None:
        session = self._session
        subscriptions = session.subscriptions
        if temp_name in subscriptions:
            raise ClientError(
                "duplicate subscription id",
                f"subscription {temp_name!r} exists, so the reply queue of {temp_name} "
                "cannot be subscribed under that id",
            )
        if len(subscriptions) >= session.limits.max_subscriptions:
            raise ClientError(
                "too many subscriptions", f"the limit is {session.limits.max_subscriptions}"
            )
        sub = Subscription(session, temp_name, temp_name, "auto", None)
        subscriptions[temp_name] = sub
        queue.add(sub)

    def release(self) -> None:
        """The session ended: drop its reply queues and what they hold."""
        for queue in self._queues.values():
            self._router.close_temporary(queue)
        self._queues.clear()
