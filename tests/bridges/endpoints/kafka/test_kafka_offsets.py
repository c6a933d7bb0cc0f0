"""Which offset the kafka source commits when acks come out of order (no broker needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridges.endpoints.kafka._offsets import (
    MAX_METADATA,
    Partition,
    WentBack,
    format_metadata,
    parse_metadata,
)


@given(
    offsets=st.lists(st.integers(0, 10_000), min_size=1, max_size=200, unique=True).map(sorted),
    data=st.data(),
)
def test_the_commit_never_passes_an_offset_that_is_not_acked(
    offsets: list[int], data: st.DataObject
) -> None:
    partition = Partition(offsets[0])
    for offset in offsets:
        assert partition.take(offset)
    acked = data.draw(st.sets(st.sampled_from(offsets)))
    for offset in data.draw(st.permutations(sorted(acked))):
        partition.ack(offset)
    watermark, metadata = partition.commit()
    below = [o for o in offsets if o < watermark]
    assert all(o in acked for o in below)
    unacked = [o for o in offsets if o not in acked]
    assert watermark == (unacked[0] if unacked else offsets[-1] + 1)
    # A restart at the watermark skips exactly the acked offsets above it.
    again = Partition(watermark, metadata)
    handed_out = [o for o in offsets if o >= watermark and again.take(o)]
    assert handed_out == [o for o in unacked if o >= watermark]


@given(acked=st.sets(st.integers(1, 10**15), max_size=3000))
def test_the_metadata_fits_kafkas_limit_and_keeps_what_fits(acked: set[int]) -> None:
    text = format_metadata(0, acked)
    assert len(text) <= MAX_METADATA
    kept = parse_metadata(0, text)
    assert kept <= acked
    assert kept == set(sorted(acked)[: len(kept)])  # the lowest ones, in order


def test_metadata_another_tool_wrote_skips_nothing() -> None:
    assert parse_metadata(5, "written by kafka-consumer-groups") == frozenset()
    assert parse_metadata(5, "acked1:1,x") == frozenset()
    assert parse_metadata(5, None) == frozenset()


@given(
    offsets=st.lists(st.integers(0, 10_000), min_size=1, max_size=200, unique=True).map(sorted),
    data=st.data(),
)
def test_outstanding_counts_what_was_taken_and_not_acked(
    offsets: list[int], data: st.DataObject
) -> None:
    # Acks in order (the common case, which skips the set) and out of order, mixed.
    partition = Partition(offsets[0])
    taken: list[int] = []
    acked: set[int] = set()
    for offset in offsets:
        assert partition.take(offset)
        taken.append(offset)
        open_ = [o for o in taken if o not in acked]
        for chosen in data.draw(st.lists(st.sampled_from(open_), unique=True, max_size=3)):
            partition.ack(chosen)
            acked.add(chosen)
        assert partition.outstanding == len(taken) - len(acked)
        unacked = [o for o in taken if o not in acked]
        assert partition.watermark == (unacked[0] if unacked else taken[-1] + 1)


def test_an_offset_below_one_taken_says_the_log_went_back_and_changes_nothing() -> None:
    partition = Partition(5)
    assert partition.take(5)
    assert partition.take(6)
    with pytest.raises(WentBack):
        partition.take(2)
    assert (partition.watermark, partition.outstanding) == (5, 2)
    partition.ack(5)
    partition.ack(6)
    assert partition.watermark == 7
