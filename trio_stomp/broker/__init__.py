"""An embedded STOMP broker for Trio: zero setup, in memory, for tests and demos.

Start one in a test or an app with :func:`open_broker` (or
:func:`serve_broker` under ``nursery.start``), from the command line with
``trio-stomp broker --listen 127.0.0.1:61613``, or in pytest with the
``stomp_broker`` fixture (see :mod:`trio_stomp.testing.pytest_plugin`)::

    async with trio_stomp.broker.open_broker() as broker:
        ...  # connect to broker.url

Protocol: STOMP 1.0, 1.1 and 1.2 (the newest both sides accept), CONNECT or
STOMP, receipts on every frame that asks (DISCONNECT included: RECEIPT, then
close), heart-beats both ways, transactions (SEND, ACK and NACK are held until
COMMIT, dropped on ABORT or disconnect). A client that breaks the protocol or
a limit gets an ERROR frame (with ``message``, and ``receipt-id`` when the bad
frame asked for a receipt) and is disconnected; nobody else notices.

Policies:

- Destinations: ``/topic/...`` fans out to every current subscriber and keeps
  nothing for later subscribers. Every other name (``/queue/...``, or any
  other prefix) is a queue: each message goes to one subscriber, round-robin
  among those with room, and waits in the queue while there is none.
- Temp queues: ``reply-to:/temp-queue/<name>`` on a SEND is rewritten to a
  ``/reply-queue/...`` queue private to the sender's connection, which the
  SEND subscribes to it (as RabbitMQ does) unless the connection SUBSCRIBEd
  to ``/temp-queue/<name>`` itself (as on ActiveMQ). It goes with the
  connection; a SEND to a ``/reply-queue/`` that is gone is dropped. See
  :mod:`trio_stomp.broker._temporary`.
- Selectors: a SUBSCRIBE's ``selector`` header (ActiveMQ's dialect, an
  SQL-92 subset over headers: ``=``, ``<>``, ``<``, ``>``, ``<=``, ``>=``,
  ``[NOT] LIKE`` with ``ESCAPE``, ``[NOT] IN``, ``[NOT] BETWEEN``, ``IS [NOT]
  NULL``, ``AND``/``OR``/``NOT``, ``+ - * / %``; string, number and boolean
  literals; a missing header is NULL, with three-valued logic) delivers only
  the messages it selects. Typed as ActiveMQ's STOMP transport types it: a
  header compared with a number or boolean is read as one (``a > 3`` selects
  ``a:5``), and ``NOT`` binds tighter than a comparison (write ``NOT (a =
  'x')``); :mod:`._selector` lists the rules, and tests check them against
  ActiveMQ. On a topic, a subscription never sees what it does not select;
  on a queue, such a message stays, in order, for another consumer.
  Differences from ActiveMQ: where ActiveMQ fails to evaluate (``1 + a``
  with a string header, ``TRUE = a``) it answers the SEND with an ERROR,
  here the message is just not selected; an integer literal beyond 64 bits
  and ``XPATH``/``XQUERY`` are refused instead of never matching;
  ``JMSTimestamp`` is NULL unless the SEND had a ``timestamp``;
  ``JMSMessageID`` is this broker's id; and a queue spends at most
  :attr:`Limits.selector_scan` (10,000) evaluations that find no taker per
  dispatch, where ActiveMQ looks at a page of 200 messages. A selector that does not
  parse, or is longer than :attr:`Limits.max_selector_length` (4096) or
  nested deeper than :attr:`Limits.max_selector_depth` (40), or whose
  LIKE patterns hold more than 64 characters of ``%...%`` pieces with
  ``_`` (each costs its length times the value's), is an ERROR naming the
  position. LIKE never backtracks. The work of evaluating one is bounded
  too: :attr:`Limits.max_selector_work` per evaluation,
  :attr:`Limits.max_selector_string` per string it builds, and
  :attr:`Limits.max_selector_dispatch_work` per message across the
  subscriptions (a fair share each); one that runs out is a non-match,
  counted in :attr:`Broker.selector_work_exhausted` and logged once per
  subscription (see :mod:`._selector_work`). A durable subscription (below)
  takes no selector yet: its SUBSCRIBE with one gets an ERROR.
- Durable topic subscriptions, named as ActiveMQ names them: a SUBSCRIBE to
  a ``/topic/`` with ``activemq.subscriptionName``, from a connection whose
  CONNECT carried ``client-id``, keeps what is sent to the topic while its
  client is away (with ``data_dir``, across restarts; without one, while the
  broker runs), until consumed. A plain UNSUBSCRIBE keeps it; one with
  ``activemq.subscriptionName`` removes it. A client-id is held by one
  connection at a time (a second CONNECT with it: ERROR, "client-id in
  use"), and free again at DISCONNECT (after its RECEIPT), as on ActiveMQ.
  Bounded by :attr:`Limits.max_durable_subscriptions`, per
  subscription by :attr:`Limits.max_durable_messages` and
  :attr:`Limits.max_durable_bytes`, and together by
  :attr:`Limits.max_durable_total_bytes` (a message past them is not kept
  for it, and counted). List and remove them on a stopped broker's data dir with
  :func:`list_durable_subscriptions` and :func:`remove_durable_subscription`
  (``trio-stomp broker --list-subscriptions``, ``--remove-subscription``).
  See :mod:`trio_stomp.broker._durable`.
- Duplicate detection, **off by default**: with
  :attr:`Limits.duplicate_window` set (ids per destination; 0, the default:
  off), a SEND whose ``bridge-id`` header repeats one the broker accepted
  for the same destination within that many ids and
  :attr:`Limits.duplicate_window_seconds` (600) gets its RECEIPT (once the
  first is on disk) and is dropped, like ActiveMQ Artemis's duplicate-id
  cache; with ``data_dir`` the ids of stored messages are kept in the store,
  written with the messages. Bounded by :attr:`Limits.duplicate_window_bytes`
  and :attr:`Limits.max_duplicate_id_length`. :attr:`Broker.duplicates_dropped`
  counts the drops (per destination:
  :attr:`Broker.duplicates_dropped_by_destination`), and they are logged at
  INFO, sampled. See :mod:`trio_stomp.broker._dedup`.
- Acknowledgement: ``auto`` (the default), ``client`` (an ACK or NACK covers
  that message and every earlier unacknowledged one of the subscription) and
  ``client-individual``. STOMP 1.2 ACK/NACK name the MESSAGE's ``ack`` header
  in ``id``; 1.1 names ``message-id`` and ``subscription``; 1.0 names
  ``message-id`` (``subscription`` optional).
- Redelivery: a message NACKed, or unacknowledged when its subscription ends
  (UNSUBSCRIBE, disconnect), goes back to the front of its queue and is
  delivered again with the header ``redelivered:true`` and the same
  ``message-id``. On a topic it returns to that subscriber only while it
  stays subscribed.
- Prefetch: a ``client``/``client-individual`` subscription gets at most
  ``prefetch-count`` (or ``activemq.prefetchSize``) unacknowledged messages
  at a time; 0 or less means no limit; without either header the window is
  :attr:`Limits.default_prefetch` (1000). ``auto`` subscriptions have no
  window: a consumer that reads slowly gets queue messages only as fast as
  its socket takes them.
- MESSAGE frames carry ``destination``, ``message-id``, ``subscription``,
  ``ack`` (1.2, when the subscription acknowledges), ``redelivered`` (when
  so), then the SEND's own headers except ``receipt`` and ``transaction``,
  and always a ``content-length``. A header that the consumer's version
  cannot carry (a line break, to a 1.0 client) is left out.
- Errors: an ACK or NACK of a message that is not pending (already
  acknowledged, or its subscription ended), an unknown subscription or
  transaction id, a duplicate subscription id, a missing required header, a
  second CONNECT, or a server frame from the client ends the connection with
  an ERROR.
- Heart-beats: the broker agrees to whatever the client asks, down to
  :attr:`Limits.min_heartbeat_ms` (100 ms): it answers ``heart-beat:sx,sy``
  with ``sx = max(cy, min)`` and ``sy = max(cx, min)`` (0 where the client
  said 0). It then sends a newline when it has written nothing for
  ``max(sx, cy)`` ms, and drops a client it has heard nothing from for twice
  ``max(cx, sy)`` ms (after an ERROR "heart-beat timeout").
- Bounds: a client that stops reading is disconnected once what waits for
  it (its socket buffer plus its topic backlog) passes
  :attr:`Limits.max_outbound_bytes` (8 MiB) by more than the largest frame
  it was given, so its memory stays bounded (by that plus two frames). Any
  frame the broker accepted, up to :attr:`Limits.max_frame_size` (16 MiB),
  reaches a consumer that keeps up. Queues themselves are not bounded: what
  producers send to a queue nobody consumes stays there.
- Durability: without ``data_dir`` the broker is volatile (it logs so at
  start): everything is in memory, and messages still in queues are lost
  when it stops. With ``data_dir``, queue messages are kept in SQLite there
  (WAL, fsync on commit, commits grouped across senders): a RECEIPT comes
  only once every queue message its connection sent before it is on disk,
  a message is deleted once acknowledged (or delivered to an ``auto``
  subscription), and at the next start what was left is queued again, in
  order, with ``redelivered:true``. Durable topic subscriptions (below) and
  what they hold are stored the same way; other topic messages never are. A data
  dir that cannot be opened or written is a :class:`StoreError`. A store
  that lost messages since the broker last wrote it (a damaged WAL, an
  emptied or recreated file, a damaged row) is a :class:`StoreDamaged`
  saying how many and from which store key on, unless ``accept_damage``.
"""

from ._admin import DurableSubscriptionInfo as DurableSubscriptionInfo
from ._admin import list_durable_subscriptions as list_durable_subscriptions
from ._admin import remove_durable_subscription as remove_durable_subscription
from ._config import Limits as Limits
from ._config import UsersFileError as UsersFileError
from ._config import load_users as load_users
from ._config import parse_users as parse_users
from ._message import DestinationDepth as DestinationDepth
from ._server import Broker as Broker
from ._server import open_broker as open_broker
from ._server import serve_broker as serve_broker
from ._store_database import StoreDamaged as StoreDamaged
from ._store_database import StoreError as StoreError
from ._store_database import StoreInUse as StoreInUse

__all__ = [
    "Broker",
    "DestinationDepth",
    "DurableSubscriptionInfo",
    "Limits",
    "StoreDamaged",
    "StoreError",
    "StoreInUse",
    "UsersFileError",
    "list_durable_subscriptions",
    "load_users",
    "open_broker",
    "parse_users",
    "remove_durable_subscription",
    "serve_broker",
]
