"""The transactional sink's memory of what it wrote: the ids in a topic's committed tail.

On open, after ``init_transactions`` has fenced any older producer with the
same ``transactional.id`` and aborted its open transaction, the sink reads
the last ``window`` records of each partition of its topic with
``isolation.level = read_committed`` and keeps their ``bridge-id`` headers:
a message whose id is there was written (committed) before a crash or a
restart, and is skipped. Ids written while open join the set; it keeps the
most recent ``window`` per topic.

Blocking (a consumer, in a worker thread, each call under its own timeout).
"""

from __future__ import annotations

import collections
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any, Final

import confluent_kafka

from ._connection import ID_HEADER, KafkaEndpointError, one_line
from ._envelope import pairs

log = logging.getLogger("bridges.kafka")

#: How long one poll of the tail may wait, s.
_POLL: Final = 0.1
#: How long the broker may hold a fetch that has nothing new, ms: the end of a
#: partition whose last offset is a transaction marker shows only in the next
#: fetch's answer (Kafka's default, 500 ms, held each open 0.5 to 1 s per partition).
_FETCH_WAIT_MS: Final = 10


class WrittenIds:
    """The ids of the most recent records of one topic, ``window`` of them at most."""

    def __init__(self, window: int) -> None:
        self._window = window
        self._order: collections.deque[str] = collections.deque()
        self._ids: set[str] = set()

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, message_id: str) -> None:
        """Remember ``message_id``; the oldest one goes past the window."""
        if not message_id or message_id in self._ids:
            return
        self._order.append(message_id)
        self._ids.add(message_id)
        while len(self._order) > self._window:
            self._ids.discard(self._order.popleft())


def read_tail(
    servers: str,
    topic: str,
    window: int,
    timeout: float,
    security: dict[str, Any] | None = None,
    partitions: Sequence[int] | None = None,
) -> WrittenIds:
    """The ``bridge-id`` of the last ``window`` committed records of each partition of ``topic``.

    ``partitions``: the topic's partitions when the caller knows them (the
    sink's producer asked for them as it opened); else they are asked for
    here, which a fresh consumer's first metadata request makes 50 ms longer
    on this project's Kafka (2 to 6 ms without it, to an empty topic's end).

    Raises:
      KafkaEndpointError: the tail could not be read within ``timeout`` s.
    """
    found = WrittenIds(window * 64)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"bridge-tail-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": _FETCH_WAIT_MS,
            "logger": log,
        }
        | (security or {})
    )
    deadline = time.monotonic() + timeout
    try:
        if partitions is None:
            metadata = consumer.list_topics(topic, timeout=timeout)
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                return found  # no topic yet: nothing written
            partitions = sorted(described.partitions)
        ranges: dict[int, tuple[int, int]] = {}
        for number in partitions:
            partition = confluent_kafka.TopicPartition(topic, number)
            low, high = consumer.get_watermark_offsets(partition, timeout=timeout)
            start = max(low, high - window)
            if high > start:
                ranges[number] = (start, high)
        if ranges and not _read_ranges(consumer, topic, ranges, deadline, found):
            raise KafkaEndpointError(f"kafka {topic}: its tail not read in {timeout:g} s")
    except confluent_kafka.KafkaException as exc:
        raise KafkaEndpointError(f"kafka {topic}: reading its tail: {one_line(exc)}") from None
    finally:
        consumer.close()
    return found


def _read_ranges(
    consumer: confluent_kafka.Consumer,
    topic: str,
    ranges: dict[int, tuple[int, int]],
    deadline: float,
    found: WrittenIds,
) -> bool:
    """Add the ids of the committed records of each partition's range (partition ->
    (start, end)) to ``found``, all partitions at once; False when ``deadline``
    (time.monotonic) came first."""
    consumer.assign([confluent_kafka.TopicPartition(topic, n, a) for n, (a, _) in ranges.items()])
    left = {number: end for number, (_, end) in ranges.items()}
    while left and time.monotonic() < deadline:
        record = consumer.poll(_POLL)
        if record is None:
            # Nothing more yet: each partition at its end, or at its last stable offset
            # (transaction markers take offsets no record is handed out for). No
            # position yet (negative) is not the end: a poll after ``assign`` may come
            # back empty before the first fetch (it did for 2 of 3 partitions).
            asked = [confluent_kafka.TopicPartition(topic, number) for number in left]
            for position in consumer.position(asked):
                if position.offset >= left[position.partition]:
                    del left[position.partition]
            continue
        if record.error() is None:
            try:
                headers: Any = pairs(record) or ()
            except (SystemError, UnicodeDecodeError):  # a header name that is not UTF-8
                headers = ()  # (not a record this sink wrote: its names are text)
            for name, value in headers:
                if name == ID_HEADER and isinstance(value, bytes):
                    found.add(value.decode("utf-8", "surrogateescape"))
            number = record.partition()
            if number in left and (record.offset() or 0) + 1 >= left[number]:
                del left[number]
    return not left
