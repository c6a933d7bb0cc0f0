"""Consume-transform-produce: a kafka source's offsets committed in a kafka sink's transaction.

A route from a ``kafka`` source to a ``transactional`` ``kafka`` sink on the
same cluster (the same ``bootstrap_servers``) writes, in each batch's
transaction, the consumer group's offsets as they will be once the batch is
acked (``send_offsets_to_transaction``), as Kafka Streams does. The records
and the offsets they were read from are committed together, or neither is:
a crash anywhere between the two leaves both where they were, so the batch is
read again and written once. The source commits nothing by itself then
(:meth:`bridges.CarryingSink.carries` told it so when the route was built);
it still keeps its books by the engine's acks, so the offsets of messages
settled without a write (filtered, dead-lettered) ride in the next
transaction, or, when the route stops first, in the source's one commit at
close (:func:`._group.commit_ahead`, never behind a transaction's).

Rebalance and zombies:

- the group's metadata (group, generation, member) is taken in the assign
  callback, with the partitions it assigned: a transaction carries the
  generation its records were read in, and the group coordinator refuses
  offsets of an older one (``ILLEGAL_GENERATION``): that transaction aborts,
  its records are never visible, and the engine writes the batch again;
- a batch's records of partitions the source no longer holds (revoked since
  they were read) are not written at all: the partition's next owner reads
  them from the last committed offset and writes them (a revoke waits up to
  ``revoke_timeout`` for a transaction in flight, as for any ack);
- a second instance with the same ``transactional.id`` fences this one (its
  transaction aborts), as for any transactional sink.

No I/O here: :func:`carried_offsets` reads the source's books on the loop's
thread; the sink sends what it returns in its worker-thread commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import confluent_kafka

from bridges import Envelope

from ._envelope import KafkaEnvelope as _KafkaEnvelope
from .source import KafkaSource, _KafkaReceiver


@attrs.frozen
class Carried:
    """What one transaction carries for its source.

    Attributes:
      keep: the positions in the batch of messages whose partitions the
        source still holds (the others are not written: see the module).
      offsets: every held partition's offset (and metadata) once the batch is acked.
      group: the consumer group's metadata at the last assignment (None: nothing held).
    """

    keep: list[int]
    offsets: list[confluent_kafka.TopicPartition]
    group: Any


def same_cluster(servers: str, other: str) -> bool:
    """Whether two checked ``bootstrap_servers`` lists name the same brokers."""
    return set(servers.split(",")) == set(other.split(","))


def carry_source(servers: str, source: object) -> bool:
    """Tell ``source``, when it is a kafka source on ``servers``, that its offsets are carried."""
    if not isinstance(source, KafkaSource) or not same_cluster(servers, source.servers):
        return False
    source.offsets_carried = True
    return True


def carried_offsets(envelopes: Sequence[Envelope]) -> Carried:
    """The offsets a transaction of the batch from ``envelopes`` commits for their source.

    Raises:
      TypeError: an envelope is not a kafka source's (the route's source changed?).
    """
    receiver: _KafkaReceiver | None = None
    keep: list[int] = []
    batch_offsets: dict[int, set[int]] = {}
    for index, envelope in enumerate(envelopes):
        if not isinstance(envelope, _KafkaEnvelope):
            raise TypeError(f"{envelope!r} is not from a kafka source")
        held = envelope._receiver  # noqa: SLF001 (the family's own envelope)
        if not isinstance(held, _KafkaReceiver):
            raise TypeError(f"{envelope!r} is not from a kafka source")
        receiver = held
        number, partition = envelope._number, envelope._partition  # noqa: SLF001
        if receiver.holds(number, partition):
            keep.append(index)
            batch_offsets.setdefault(number, set()).add(envelope._offset)  # noqa: SLF001
    if receiver is None:
        return Carried(keep, [], None)
    return Carried(keep, receiver.carried_commits(batch_offsets), receiver.group_metadata)


def settle_written(envelopes: Sequence[Envelope], keep: Sequence[int]) -> None:
    """After the transaction committed: the ``keep`` envelopes are acked in their source's
    books now (their offsets are committed), so the next batch's offsets, computed before
    the engine's own acks of this one, start after them; the engine's ack is a no-op then.
    """
    for index in keep:
        envelope = envelopes[index]
        if envelope.state == "open" and isinstance(envelope, _KafkaEnvelope):
            envelope.state = "acked"
            receiver = envelope._receiver  # noqa: SLF001
            receiver.acked(envelope._partition, envelope._number, envelope._offset)  # noqa: SLF001
