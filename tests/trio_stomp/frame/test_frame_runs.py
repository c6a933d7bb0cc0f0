"""message_runs: the frames of one read, MESSAGE runs grouped by subscription."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from trio_stomp.frame import HEARTBEAT, Event, Frame
from trio_stomp.frame._runs import message_runs


def message(subscription: str | None, n: int) -> Frame:
    headers = [("message-id", str(n))]
    if subscription is not None:
        headers.append(("subscription", subscription))
    return Frame("MESSAGE", headers)


events = st.lists(
    st.one_of(
        st.just(HEARTBEAT),
        st.just(Frame("RECEIPT", {"receipt-id": "r"})),
        st.tuples(st.sampled_from(["0", "1", None]), st.integers(0, 99)).map(
            lambda pair: message(*pair)
        ),
    ),
    max_size=30,
)


@given(events)
def test_runs_keep_every_frame_in_order_and_group_as_much_as_allowed(got: list[Event]) -> None:
    runs = message_runs(got)
    flat = [f for item in runs for f in (item if isinstance(item, list) else [item])]
    assert flat == [event for event in got if isinstance(event, Frame)]
    keys: list[tuple[str, str | None]] = []
    for item in runs:
        if isinstance(item, Frame):
            assert item.command != "MESSAGE"
            keys.append(("frame", None))
            continue
        assert item
        assert all(frame.command == "MESSAGE" for frame in item)
        subscriptions = {frame.headers.get("subscription") for frame in item}
        assert len(subscriptions) == 1
        (key,) = subscriptions
        assert key is not None or len(item) == 1  # no subscription: one at a time
        keys.append(("run", key))
    # Maximal: two runs side by side are for different subscriptions.
    for before, after in itertools.pairwise(keys):
        assert not (before == after and before[0] == "run" and before[1] is not None)


def test_a_read_of_one_subscription_is_one_run() -> None:
    frames = [message("7", n) for n in range(5)]
    assert message_runs([HEARTBEAT, *frames, HEARTBEAT]) == [frames]
