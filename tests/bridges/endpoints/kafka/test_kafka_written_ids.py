"""The transactional kafka sink's memory of the ids it wrote: the last ``window`` of them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridges.endpoints.kafka._tail import WrittenIds

ids = st.text(alphabet="abcde", max_size=2)


@given(st.integers(1, 6), st.lists(st.lists(ids, max_size=8), max_size=8), st.lists(ids))
def test_it_remembers_the_last_window_of_distinct_ids(
    window: int, batches: list[list[str]], asked: list[str]
) -> None:
    written = WrittenIds(window)
    model: list[str] = []  # distinct ids, oldest first
    for batch in batches:
        for message_id in batch:
            written.add(message_id)
            if message_id and message_id not in model:
                model = [*model, message_id][-window:]
    assert len(written) == len(model)
    assert [m in written for m in asked] == [m in model for m in asked]
    assert "" not in written
