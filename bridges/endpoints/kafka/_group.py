"""How the ``kafka`` source is a member of its consumer group: session, static membership, protocol.

Session: the group coordinator gives a member's partitions to another once
it has heard nothing from it for ``session.timeout.ms``. A member that
leaves cleanly (``close``) says so and is replaced at once; one that is
killed is noticed only when its session expires, and a restarted process is
a new member: its partitions come back only then (Kafka's default, 45 s).

Static membership (``group.instance.id``, KIP-345): a member that joins with
the instance id of one the coordinator still holds *replaces* it, with its
partitions, at once and without a rebalance. So a killed and restarted
bridge resumes in a second or two. Two processes with one instance id fence
each other (the older one's next request fails: ``FENCED_INSTANCE_ID``, a
fatal error that stops its source), so the id must be unique per running
instance: it is never derived from the route (the same name on two hosts).
The price: a static member's clean stop does not leave the group either, so
its partitions wait ``session_timeout`` before another member reads them.

Rebalance protocol: the source lets a revoked partition go only after its
commit (see :mod:`.source`), and a route that carries the source's offsets in
its sink's transactions (:mod:`._carry`) takes the group's generation with
each assignment and trusts a partition it holds to be the one assigned
then. Both assume *eager* rebalancing, where every rebalance revokes every
partition and assigns them all again, in a new generation. Under incremental
rebalancing (``cooperative-sticky``, or KIP-848's ``consumer`` protocol) a
partition may stay across a rebalance without an assignment callback, so a
transaction would carry an older generation than the group's. So the
strategies are pinned to eager ones (``range,roundrobin``, librdkafka's
default) and the protocol to Kafka's classic one (``group.protocol =
classic``), whatever librdkafka's defaults become. A group whose other
members offer only incremental strategies refuses this member
(``INCONSISTENT_GROUP_PROTOCOL``); that, like a session timeout the brokers
refuse, stops the source with :func:`explain` instead of a warning per
retry: the same settings meet it on every one.

After a carrying route's last transaction: the route's sink carries the
source's offsets in its transactions (:mod:`._carry`), so the source commits
none by itself; a message settled after the last transaction (dead-lettered,
filtered) would be read, and dead-lettered, again at the next start. So when
the source closes (after the sink: no transaction is open) it commits
:func:`commit_ahead`: each partition whose watermark is above the group's
committed offset (a stable read), never behind a transaction's commit.

Settings and checks; :func:`commit_ahead` alone calls the consumer (in a worker thread).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final

import attrs
import confluent_kafka
from attrs.validators import and_, ge, le

from bridges import InvalidSetting

from ._connection import one_line
from ._security import KafkaSecurity

log = logging.getLogger("bridges.kafka")

#: How long the stable read of the committed offsets at close may take, s.
_COMMITTED_TIMEOUT: Final = 2.5
#: Kafka's lower bound on a member's session timeout (its brokers' default
#: ``group.min.session.timeout.ms``), s.
MIN_SESSION: Final = 6.0
#: Kafka's upper bound on it (the default ``group.max.session.timeout.ms``), s.
MAX_SESSION: Final = 1800.0
#: librdkafka's default heartbeat interval, ms (a third of the session at most).
_HEARTBEAT_MS: Final = 3000
#: librdkafka's default ``max.poll.interval.ms`` (it must be >= the session timeout).
_MAX_POLL_MS: Final = 300_000
#: The eager strategies (librdkafka's default list); ``cooperative-sticky`` is incremental.
EAGER_STRATEGIES: Final = "range,roundrobin"
#: What a JoinGroup answers that the same settings meet on every retry: the source stops.
REFUSED: Final = {
    confluent_kafka.KafkaError.INCONSISTENT_GROUP_PROTOCOL: (
        "another member of the group offers only assignment strategies this source does "
        f"not ({EAGER_STRATEGIES}: it needs eager rebalancing); give the route a group "
        "of its own"
    ),
    confluent_kafka.KafkaError.INVALID_SESSION_TIMEOUT: (
        "the brokers refuse session_timeout (outside their group.min.session.timeout.ms "
        "and group.max.session.timeout.ms)"
    ),
    # (a static member fenced by another with its instance_id: not .fatal(), yet final)
    confluent_kafka.KafkaError._FATAL: "",  # noqa: SLF001 (librdkafka's local error)
}
#: Kafka's rule for a ``group.instance.id`` (as for topic names).
_INSTANCE_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")


@attrs.frozen
class KafkaMembership(KafkaSecurity):
    """Connection settings, and how the ``kafka`` source is a member of its group (see
    :mod:`._group`).

    Attributes:
      session_timeout: how long the group waits to hear from a member before
        it gives the member's partitions to another (``session.timeout.ms``),
        s; Kafka accepts 6 to 1800 unless its brokers say otherwise. A bridge
        that was killed (not stopped) gets its partitions back, once started
        again, only after this, unless it has an ``instance_id``.
      instance_id: static membership (``group.instance.id``): the id of this
        running instance in the group. Unique per instance (two running with
        one id fence each other: the older one fails); a restarted instance
        with the same id takes its partitions back at once. Its clean stop
        keeps them too, for ``session_timeout``. Default: none (dynamic).
    """

    session_timeout: float = attrs.field(
        default=45.0, validator=and_(ge(MIN_SESSION), le(MAX_SESSION))
    )
    instance_id: str | None = None


def check_instance_id(instance_id: str | None) -> None:
    """Raises InvalidSetting for an id Kafka refuses (1 to 249 of ``A-Z a-z 0-9 . _ -``)."""
    if instance_id is None:
        return
    if not _INSTANCE_ID.fullmatch(instance_id) or instance_id in (".", ".."):
        raise InvalidSetting(
            "instance_id",
            f"{instance_id[:60]!r} is not a valid group.instance.id "
            "(1 to 249 of A-Z a-z 0-9 . _ -)",
        )


def group_settings(session_timeout: float, instance_id: str | None) -> dict[str, Any]:
    """librdkafka's consumer settings for the membership (see the module)."""
    session_ms = round(session_timeout * 1000)
    settings: dict[str, Any] = {
        "group.protocol": "classic",
        "partition.assignment.strategy": EAGER_STRATEGIES,
        "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": min(_HEARTBEAT_MS, session_ms // 3),
        "max.poll.interval.ms": max(_MAX_POLL_MS, session_ms),
    }
    if instance_id is not None:
        settings["group.instance.id"] = instance_id
    return settings


def stops(error: confluent_kafka.KafkaError) -> bool:
    """Whether a consumer's ``error`` stops the source (fatal, or one of :data:`REFUSED`)."""
    return bool(error.fatal()) or error.code() in REFUSED


def explain(error: confluent_kafka.KafkaError) -> str:
    """``error`` as one line, with what to change when it is one of :data:`REFUSED`."""
    why = REFUSED.get(error.code())
    return f"{one_line(error)}: {why}" if why else one_line(error)


def commit_ahead(consumer: Any, offsets: list[Any], describe: str) -> None:
    """Commit those of ``offsets`` above the group's committed ones (see the module).

    Asynchronous: the consumer's ``close``, right after, waits for the answer.
    A failure is logged: those messages are read again (at least once).
    """
    try:
        if offsets:
            now = consumer.committed(offsets, timeout=_COMMITTED_TIMEOUT)
            done = {tp.partition: tp.offset for tp in now}
            ahead = [tp for tp in offsets if tp.offset > done.get(tp.partition, -1)]
            if ahead:
                consumer.commit(offsets=ahead, asynchronous=True)
    except confluent_kafka.KafkaException as exc:
        log.warning("%s: commit at close failed: %s", describe, one_line(exc))
