"""Records a consumer group never read because Kafka deleted them first: said and counted.

When retention (or ``kafka-delete-records``) removed records the group had
not read yet, its committed offset is below the partition's earliest one,
and librdkafka resets it by ``auto.offset.reset`` with one line of its own
that does not say how much was skipped. Each assignment compares the
committed offsets with the partitions' bounds (one ListOffsets request per
partition with a committed offset, in the assign callback's worker thread)
and logs, per partition, which offsets are gone and how many records that is.

With ``auto_offset_reset = "latest"`` the reset goes to the partition's end,
so the records still kept after the deleted ones are skipped too: counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import confluent_kafka

from ._connection import one_line

log = logging.getLogger("bridges.kafka")


def lost_to_retention(
    consumer: Any,
    committed: Sequence[confluent_kafka.TopicPartition],
    reset: str,
    describe: str,
    timeout: float,
) -> int:
    """How many records ``committed`` offsets skip (0: none); each partition that skips some
    is logged at WARNING, as is one whose committed offset is past its end (recreated?).

    Runs in a worker thread (the assign callback); asks the broker, bounded by ``timeout``.
    """
    lost = 0
    for tp in committed:
        if tp.offset < 0:
            continue  # nothing committed: auto_offset_reset applies, nothing is skipped
        try:
            low, high = consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(tp.topic, tp.partition), timeout, False
            )
        except confluent_kafka.KafkaException as exc:
            log.warning(
                "%s: partition %d: its bounds were not read (%s); records deleted before "
                "the group read them would not be counted",
                describe, tp.partition, one_line(exc),
            )  # fmt: skip
            continue
        if tp.offset > high:
            log.warning(
                "%s: partition %d: the committed offset %d is past the partition's end %d "
                "(was the topic deleted and created again?); auto_offset_reset = %r applies",
                describe, tp.partition, tp.offset, high, reset,
            )  # fmt: skip
            continue
        if tp.offset >= low:
            continue
        start = low if reset == "earliest" else high
        lost += start - tp.offset
        log.warning(
            "%s: partition %d: offsets %d to %d were deleted before the group read them "
            "(the earliest kept is %d); auto_offset_reset = %r resumes at %d: "
            "%d record(s) lost",
            describe, tp.partition, tp.offset, start - 1, low, reset, start, start - tp.offset,
        )  # fmt: skip
    return lost
