"""The destination model, sans-IO: messages, queues, topics, subscriptions.

No Trio and no clock: a :class:`Router` is driven by plain method calls from
the sessions (one per connection), and hands messages to them with
:meth:`Consumer.deliver` (a session, one per connection: this layer knows
it only by that :class:`Consumer` protocol, and the durable subscriptions
above it by :class:`DurableRouting`).

Policies:

- ``/topic/...`` fans out: every subscription gets its own copy. Each topic
  subscription owns a private queue, so the prefetch window, NACK and
  redelivery work the same way as on a queue; the private queue disappears
  with the subscription, and a message sent while nobody subscribes is
  dropped (no retention).
- Every other destination (``/queue/...``, and any other prefix or name) is a
  queue: each message goes to exactly one subscription, round-robin among the
  subscriptions that have room (an open prefetch window and a connection that
  keeps up with its writes). Messages wait in the queue while there is none.
- A message that comes back (NACK, or its consumer unsubscribed or went away
  before acknowledging it) goes back to the front of its queue, in order,
  and carries ``redelivered:true`` from then on. On a topic it goes back to
  that subscription's private queue, or is dropped with it.
- A subscription with a selector (see :mod:`._selector`) gets only the
  messages its selector matches. On a topic, the others never enter its
  private queue. On a queue, a message no ready subscription selects stays
  where it is, in order, for another consumer (or a later one). A new
  message is looked at on its own; a consumer that gets room (or a new
  subscription) makes the queue look again from the front, until
  ``selector_scan`` evaluations found no taker: what an event costs is
  bounded, and a queue whose consumers select none of its messages does no
  work until something changes.
- What evaluating selectors costs is bounded per evaluation and per
  dispatch (see :mod:`._selector_work`): an evaluation that runs out is a
  non-match, counted on its subscription and logged once for it. A queue's
  dispatch whose budget ran out stops there; what it did not look at waits
  for the next event.
- Queues keep what is sent to them without a bound: a queue nobody consumes
  grows with what producers send. An empty queue with no subscriptions is
  forgotten.
- With a durable store (a :class:`MessageLog`), every message sent to a
  queue is also added to the store, and removed from it once consumed: acked,
  or delivered to an ``auto`` subscription. Topic messages never are. The
  router starts with what the store restored, in order.
- Durable topic subscriptions (:mod:`._durable`) get a copy of every message
  sent to their topic, through :attr:`Router.durables`; their queues are not
  the router's (they outlive their consumers).
- Temporary queues (``/reply-queue/...``, see :mod:`._temporary`) belong to
  one session and go with it; a message sent to one that does not exist is
  dropped. They are never stored.
"""

from __future__ import annotations

import itertools
import secrets
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, Generic, Never, Protocol, TypeVar, overload

import attrs

from ..frame import PREFETCH_HEADERS, RESERVED_HEADERS, AckMode, Headers
from ._message import DestinationDepth, Message, Pending, new_message
from ._selector_work import SelectorMeter
from ._wire import kept_headers, subscription_line

if TYPE_CHECKING:
    from ._selector import Selector

TOPIC_PREFIX: Final = "/topic/"
#: The prefix of temporary queues' names (see :mod:`._temporary`).
REPLY_QUEUE_PREFIX: Final = "/reply-queue/"

#: How deep a queue with selecting consumers looks for a message to dispatch.
SELECTOR_SCAN: Final = 10_000


class Watcher(Protocol):
    """Who waits for the store's commits (a session holding back a RECEIPT)."""

    def durable(self, batch: int) -> bool:
        """Batches up to ``batch`` are on disk; return True to keep watching."""


class MessageLog(Protocol):
    """A durable store, as the router uses it (see :mod:`._store`)."""

    @property
    def restored(self) -> list[Message]:
        """What the store held when it opened, in the order it was sent."""

    def next_key(self) -> int:
        """A key for a message about to be added."""

    def add(self, message: Message) -> int:
        """Store ``message``; return the number of the commit that writes it."""

    def remove(self, key: int) -> None:
        """The message of ``key`` is consumed."""

    @property
    def durable(self) -> int:
        """The number of the last commit on disk."""

    def watch(self, watcher: Watcher) -> None:
        """Call ``watcher.durable(number)`` after each commit until it returns False."""

    def unwatch(self, watcher: Watcher) -> None:
        """Stop calling ``watcher``."""


class Consumer(Protocol):
    """A session, as its subscriptions and queues see it (see :mod:`._session`)."""

    @property
    def closing(self) -> bool:
        """True once the session is ending: it takes no more messages."""

    def can_receive(self) -> bool:
        """True when queue deliveries may go to the session now."""

    def deliver(self, sub: Subscription, message: Message) -> None:
        """Send ``message`` to the client as a MESSAGE of ``sub``."""

    def backlog_changed(self, delta: int) -> None:
        """Bytes waiting in the session's private queues changed by ``delta``."""


class DurableRouting(Protocol):
    """The durable topic subscriptions, as the router uses them (see :mod:`._durable`)."""

    def publish(self, message: Message) -> int:
        """Keep a copy of a topic's ``message`` for each durable subscription to
        it; return the store's commit number that makes them durable (0: none)."""

    def consumed(self, key: int) -> None:
        """The durable subscription's message of ``key`` is consumed."""

    def depths(self) -> list[DestinationDepth]:
        """What each durable subscription holds."""


#: The durable subscriptions a router routes to (the router's type parameter).
D = TypeVar("D", bound=DurableRouting, covariant=True)


@attrs.define(slots=True, eq=False)
class Subscription:
    """One SUBSCRIBE of one session.

    Attributes:
      session: the session that subscribed.
      id: its ``id`` (unique within the session).
      destination: what it subscribed to.
      ack_mode: ``auto``, ``client`` or ``client-individual``.
      window: the most unacknowledged messages in flight; None for no limit.
      selector: what it selects; None: every message. (A durable topic
        subscription takes none yet: its SUBSCRIBE with one is refused.)
      queue: where its messages come from (shared, or private for a topic).
      unacked: delivered and not yet acknowledged, by message id, oldest first.
      line: the ``subscription`` line of its MESSAGE frames (see :mod:`._wire`).
      exhausted: evaluations of its selector that ran out of work (see
        :mod:`._selector_work`), each a message it did not get.
    """

    session: Consumer
    id: str
    destination: str
    ack_mode: AckMode
    window: int | None
    selector: Selector | None = None
    queue: Queue = attrs.field(init=False)
    unacked: OrderedDict[str, Pending] = attrs.field(factory=OrderedDict)
    line: bytes = attrs.field(init=False)
    exhausted: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self.line = subscription_line(self.id)

    def ready(self) -> bool:
        """True when the subscription can take one more message now."""
        window = self.window
        return self.session.can_receive() and (window is None or len(self.unacked) < window)

    def selects(self, message: Message, meter: SelectorMeter, share: int = 1) -> bool:
        """True when ``message`` passes the subscription's selector (if any),
        evaluated on ``meter``'s budget (``share``: see :meth:`SelectorMeter.evaluate`)."""
        selector = self.selector
        if selector is None:
            return True
        verdict = meter.evaluate(selector, message, share)
        if verdict is None:
            self.exhausted += 1
            if self.exhausted == 1:
                meter.report(selector, self.id, self.destination)
            return False
        return verdict


class Queue:
    """Messages waiting for a consumer, and the subscriptions consuming them.

    A private queue (``owner`` set) belongs to one topic subscription: its
    backlog counts against its session's outbound bound.
    """

    __slots__ = (
        "_next",
        "_settled",
        "consumers",
        "messages",
        "meter",
        "name",
        "owner",
        "scan",
        "selecting",
    )

    def __init__(
        self,
        name: str,
        owner: Consumer | None = None,
        scan: int = SELECTOR_SCAN,
        meter: SelectorMeter | None = None,
    ) -> None:
        self.name = name
        self.owner = owner
        self.messages: deque[Message] = deque()
        self.consumers: list[Subscription] = []
        self._next = 0
        #: How many of the consumers have a selector.
        self.selecting = 0
        #: How deep dispatch looks when consumers select.
        self.scan = scan
        #: True while no waiting message is selected by a ready consumer.
        self._settled = False
        #: What evaluating selectors may cost (the broker's, for a shared queue).
        self.meter = meter if meter is not None else SelectorMeter()

    def put(self, message: Message) -> None:
        """Add ``message`` at the back and deliver what can be delivered."""
        owner = self.owner
        if owner is not None:
            if owner.closing:
                return  # a private queue whose session is ending takes nothing more
            owner.backlog_changed(message.size)
        if self._settled and self.selecting:
            # Nothing waiting is selected by a consumer with room: only the
            # new message needs a look, one evaluation per ready consumer.
            ready = self._ready()
            self.meter.start()
            if not (ready and self._offer(message, ready)):
                self.messages.append(message)
                # (An evaluation cut short by the dispatch's budget: look again.)
                self._settled = not self.meter.short
            return
        self.messages.append(message)
        self.dispatch()

    def requeue(self, messages: Iterable[Message]) -> None:
        """Put delivered ``messages`` back at the front, in order, marked redelivered."""
        returned = [m._replace(redelivered=True) for m in messages]
        if not returned:
            return
        self.messages.extendleft(reversed(returned))
        owner = self.owner
        if owner is not None:
            owner.backlog_changed(sum(m.size for m in returned))
        self.dispatch()

    def dispatch(self) -> None:
        """Hand waiting messages to ready subscriptions, round-robin."""
        if self.selecting:
            self._dispatch_selected()
            return
        messages = self.messages
        consumers = self.consumers
        owner = self.owner
        while messages:
            count = len(consumers)
            if count == 1:
                # The common case, kept tight: one consumer drains what it can.
                sub = consumers[0]
                deliver = sub.session.deliver
                while messages and sub.ready():
                    message = messages.popleft()
                    if owner is not None:
                        owner.backlog_changed(-message.size)
                    deliver(sub, message)
                return
            start = self._next
            for step in range(count):
                index = (start + step) % count
                sub = consumers[index]
                if sub.ready():
                    break
            else:
                return
            self._next = (index + 1) % count
            message = messages.popleft()
            if owner is not None:
                owner.backlog_changed(-message.size)
            sub.session.deliver(sub, message)

    def _dispatch_selected(self) -> None:
        """Dispatch when consumers select: each waiting message, oldest first,
        goes to the next ready consumer (round-robin) that selects it; one
        that none selects stays, in place. Stops when no consumer is ready,
        or once ``scan`` evaluations found no taker (the cost of one event
        is bounded, whatever the backlog and the number of consumers).
        """
        messages = self.messages
        kept: list[Message] = []
        budget = self.scan
        self._settled = False
        meter = self.meter
        meter.start()
        while messages and budget > 0 and meter.left > 0:
            ready = self._ready()
            if not ready:
                break
            message = messages.popleft()
            if not self._offer(message, ready):
                kept.append(message)
                budget -= len(ready)
        else:
            # Every waiting message was looked at: until a consumer gets room
            # (which dispatches again), a new one is all there is to look at.
            self._settled = not messages and not meter.short
        if kept:
            messages.extendleft(reversed(kept))

    def _ready(self) -> list[tuple[int, Subscription]]:
        """The consumers with room, in round-robin order, with their index."""
        consumers = self.consumers
        count = len(consumers)
        start = self._next
        ready: list[tuple[int, Subscription]] = []
        for step in range(count):
            index = (start + step) % count
            if consumers[index].ready():
                ready.append((index, consumers[index]))
        return ready

    def _offer(self, message: Message, ready: list[tuple[int, Subscription]]) -> bool:
        """Deliver ``message`` to the first of ``ready`` that selects it; False if none."""
        meter = self.meter
        share = len(ready)
        for index, sub in ready:
            if sub.selects(message, meter, share):
                self._next = (index + 1) % len(self.consumers)
                sub.session.deliver(sub, message)
                return True
            share -= 1
        return False

    def add(self, sub: Subscription) -> None:
        """Start delivering to ``sub``."""
        sub.queue = self
        self.consumers.append(sub)
        if sub.selector is not None and self.owner is None:
            self.selecting += 1  # (a topic filters before its private queue)
        self.dispatch()

    def remove(self, sub: Subscription) -> None:
        """Stop delivering to ``sub`` (its unacknowledged messages are the caller's)."""
        index = self.consumers.index(sub)
        del self.consumers[index]
        if sub.selector is not None and self.owner is None:
            self.selecting -= 1
        if index < self._next:
            self._next -= 1
        if self._next >= len(self.consumers):
            self._next = 0

    def drop_all(self) -> None:
        """Forget every waiting message (a private queue whose subscription ended)."""
        if self.owner is not None:
            self.owner.backlog_changed(-sum(m.size for m in self.messages))
        self.messages.clear()


class Router(Generic[D]):
    """Every destination of one broker, and where each message goes.

    Args:
      id_prefix: starts every message id; random by default, so ids do not
        repeat across broker runs.
      store: the durable store of queue messages; None keeps them in memory
        only. What it restored is queued at once, in order.
      selector_scan: how deep a queue looks for a message that one of its
        selecting consumers takes (see :class:`Queue`).
      durables: the broker's durable topic subscriptions (see
        :mod:`._durable`); None for none.
      meter: what evaluating selectors may cost (see :mod:`._selector_work`);
        the defaults of :class:`~trio_stomp.broker.Limits` when None.
    """

    @overload
    def __init__(
        self: Router[Never],
        id_prefix: str | None = None,
        store: MessageLog | None = None,
        selector_scan: int = SELECTOR_SCAN,
        durables: None = None,
        meter: SelectorMeter | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self,
        id_prefix: str | None = None,
        store: MessageLog | None = None,
        selector_scan: int = SELECTOR_SCAN,
        *,
        durables: D,
        meter: SelectorMeter | None = None,
    ) -> None: ...
    def __init__(
        self,
        id_prefix: str | None = None,
        store: MessageLog | None = None,
        selector_scan: int = SELECTOR_SCAN,
        durables: D | None = None,
        meter: SelectorMeter | None = None,
    ) -> None:
        self.meter = meter if meter is not None else SelectorMeter()
        self._prefix = f"{secrets.token_hex(4) if id_prefix is None else id_prefix}-"
        self._scan = selector_scan
        self._ids = itertools.count(1)
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, list[Subscription]] = {}
        #: The sessions' temporary queues, by their ``/reply-queue/`` name.
        self.temporary: dict[str, Queue] = {}
        self.store = store
        self.durables = durables
        if store is not None:
            for message in store.restored:
                self._queue(message.destination).put(message)

    def send(self, destination: str, headers: tuple[tuple[str, str], ...], body: bytes) -> int:
        """Route one SEND: queue it, or fan it out to a topic's subscriptions.

        Returns:
          The store's commit number that makes it durable (see
          :meth:`MessageLog.add`); 0 when nothing is stored.
        """
        kept = kept_headers(headers, RESERVED_HEADERS)
        message_id = f"{self._prefix}{next(self._ids)}"
        if destination.startswith(REPLY_QUEUE_PREFIX):
            queue = self.temporary.get(destination)
            if queue is not None:  # (else its session has gone: dropped, as RabbitMQ does)
                queue.put(new_message(message_id, destination, kept, body))
            return 0
        if destination.startswith(TOPIC_PREFIX):
            message = new_message(message_id, destination, kept, body)
            subs = self.topics.get(destination)
            if subs:
                meter = self.meter
                meter.start()
                share = sum(sub.selector is not None for sub in subs)
                for sub in tuple(subs):
                    if sub.selector is None:
                        sub.queue.put(message)
                        continue
                    if sub.selects(message, meter, share):
                        sub.queue.put(message)
                    share -= 1
            durables = self.durables
            return durables.publish(message) if durables is not None else 0
        store = self.store
        if store is None:
            self._queue(destination).put(new_message(message_id, destination, kept, body))
            return 0
        message = new_message(message_id, destination, kept, body, store.next_key())
        ticket = store.add(message)
        self._queue(destination).put(message)
        return ticket

    def consumed(self, message: Message) -> None:
        """``message`` was acknowledged (or delivered without acks): forget it for good."""
        key = message.key
        if key:
            if self.durables is not None:
                self.durables.consumed(key)
            if key > 0 and self.store is not None:
                self.store.remove(key)

    def _queue(self, destination: str) -> Queue:
        queue = self.queues.get(destination)
        if queue is None:
            queue = self.queues[destination] = Queue(destination, scan=self._scan, meter=self.meter)
        return queue

    def open_temporary(self, name: str, owner: Consumer) -> Queue:
        """A new temporary queue ``name`` (``/reply-queue/...``) of ``owner``'s."""
        queue = self.temporary[name] = Queue(name, owner=owner)
        return queue

    def close_temporary(self, queue: Queue) -> None:
        """Forget the temporary ``queue`` and what it holds (its session ended)."""
        del self.temporary[queue.name]
        queue.drop_all()

    def subscribe(self, sub: Subscription) -> None:
        """Start ``sub``: a private queue on a topic, else a consumer of the queue."""
        destination = sub.destination
        if destination.startswith(TOPIC_PREFIX):
            self.topics.setdefault(destination, []).append(sub)
            Queue(destination, owner=sub.session).add(sub)
            return
        self._queue(destination).add(sub)

    def unsubscribe(self, sub: Subscription) -> None:
        """End ``sub``: its unacknowledged messages go back (or away, on a topic)."""
        queue = sub.queue
        queue.remove(sub)
        returned = [pending.message for pending in sub.unacked.values()]
        sub.unacked.clear()
        if self.temporary.get(queue.name) is queue:
            # It lives as long as its session, not its consumer (and goes with it).
            if not sub.session.closing:
                queue.requeue(returned)
            return
        if queue.owner is not None:
            queue.drop_all()
            subs = self.topics[sub.destination]
            subs.remove(sub)
            if not subs:
                del self.topics[sub.destination]
            return
        queue.requeue(returned)
        self.forget_if_idle(queue)

    def forget_if_idle(self, queue: Queue) -> None:
        """Drop a shared queue that holds nothing and has nobody subscribed."""
        idle = not queue.messages and not queue.consumers and queue.owner is None
        if idle and self.queues.get(queue.name) is queue:
            del self.queues[queue.name]

    def depth(self, destination: str) -> int:
        """How many messages wait in the queue ``destination`` (0 when it has none)."""
        queue = self.queues.get(destination) or self.temporary.get(destination)
        return len(queue.messages) if queue is not None else 0

    def depths(self) -> list[DestinationDepth]:
        """Every queue and every subscribed topic, with what it holds, by name."""
        stored = self.store is not None
        found = [
            _depth(name, [queue], queue.consumers, durable=stored)
            for name, queue in self.queues.items()
        ]
        found += [
            _depth(name, [sub.queue for sub in subs], subs, durable=False)
            for name, subs in self.topics.items()
        ]
        found += [
            _depth(name, [queue], queue.consumers, durable=False)
            for name, queue in self.temporary.items()
        ]
        if self.durables is not None:
            found += self.durables.depths()
        return sorted(found, key=lambda depth: (depth.destination, depth.subscription))


def _depth(
    name: str, queues: list[Queue], consumers: list[Subscription], *, durable: bool
) -> DestinationDepth:
    queued = sum(len(queue.messages) for queue in queues)
    unacknowledged = sum(len(sub.unacked) for sub in consumers)
    return DestinationDepth(name, queued, unacknowledged, len(consumers), durable)


def prefetch_window(headers: Headers, ack_mode: AckMode, default: int) -> int | None:
    """The window a SUBSCRIBE asks for (its prefetch header, else ``default``); None: no window.

    ``auto`` subscriptions have no window, but a malformed header is still an
    error: ValueError(message, detail), for the session's ERROR frame.
    """
    for name in PREFETCH_HEADERS:
        value = headers.get(name)
        if value is not None:
            text = value.strip()
            digits = text[1:] if text[:1] == "-" else text
            if not (digits.isascii() and digits.isdigit()):
                raise ValueError(f"invalid {name} header", f"expected an integer, got {value!r}")
            count = int(text)
            return count if count > 0 and ack_mode != "auto" else None
    return None if ack_mode == "auto" else default
