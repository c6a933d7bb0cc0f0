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
from typing import Any, Final

import confluent_kafka

from ._connection import ID_HEADER, KafkaEndpointError, one_line

log = logging.getLogger("bridges.kafka")

#: How long one poll of the tail may wait, s.
_POLL: Final = 0.5


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
    servers: str, topic: str, window: int, timeout: float, security: dict[str, Any] | None = None
) -> WrittenIds:
    """The ``bridge-id`` of the last ``window`` committed records of each partition of ``topic``.

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
            "logger": log,
        }
        | (security or {})
    )
    deadline = time.monotonic() + timeout
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            return found  # no topic yet: nothing written
        for number in sorted(described.partitions):
            partition = confluent_kafka.TopicPartition(topic, number)
            low, high = consumer.get_watermark_offsets(partition, timeout=timeout)
            start = max(low, high - window)
            if high <= start:
                continue
            consumer.assign([confluent_kafka.TopicPartition(topic, number, start)])
            while time.monotonic() < deadline:
                record = consumer.poll(_POLL)
                if record is None:
                    # Nothing more: at the end, or at the last stable offset (transaction
                    # markers take offsets no record is handed out for).
                    position = consumer.position([partition])[0].offset
                    if position < 0 or position >= high:
                        break
                    continue
                if record.error() is None:
                    headers: Any = record.headers() or ()
                    for name, value in headers:
                        if name == ID_HEADER and isinstance(value, bytes):
                            found.add(value.decode("utf-8", "surrogateescape"))
                    if (record.offset() or 0) + 1 >= high:
                        break
            else:
                raise KafkaEndpointError(f"kafka {topic}: its tail not read in {timeout:g} s")
    except confluent_kafka.KafkaException as exc:
        raise KafkaEndpointError(f"kafka {topic}: reading its tail: {one_line(exc)}") from None
    finally:
        consumer.close()
    return found
