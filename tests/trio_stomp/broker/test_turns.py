"""A client that pipelines thousands of frames in one read cannot starve the others.

The broker acts on one read's frames a turn at a time (at most
``FRAMES_PER_TURN`` frames, or frames whose selectors spent
``WORK_PER_TURN`` units) and lets every other task run between turns.
"""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_stomp.broker import open_broker
from trio_stomp.broker._connection import FRAMES_PER_TURN
from trio_stomp.broker._destinations import Router
from trio_stomp.broker._session import Session
from trio_stomp.frame import Frame, encode

CONNECT = encode(Frame("CONNECT", {"accept-version": "1.2", "host": "/"}))


def send(destination: str, body: bytes = b"", **headers: str) -> bytes:
    return encode(Frame("SEND", {"destination": destination, **headers}, body))


async def test_a_pipelined_flood_is_acted_on_a_turn_at_a_time_with_others_run_between() -> None:
    count = 6_000  # about 200 KiB: one or a few reads of 256 KiB
    async with open_broker() as broker:
        stream = await trio.open_tcp_stream("127.0.0.1", broker.port)
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, CONNECT + send("/queue/flood") * count)
            # Between two of its own checkpoints, from before the first frame, how
            # far did the flood get?
            jumps, seen = [], 0
            with trio.fail_after(20):
                while seen < count:
                    await trio.lowlevel.checkpoint()
                    depth = broker.queue_depth("/queue/flood")
                    jumps.append(depth - seen)
                    seen = depth
    # Trio runs each batch of tasks in either order: two turns between two looks at
    # most. Thousands when a read is acted on at once.
    assert max(jumps) <= 2 * FRAMES_PER_TURN, max(jumps)
    assert sum(jumps) == count


async def test_a_turn_ends_once_the_selectors_of_its_frames_spent_the_work() -> None:
    router = Router(id_prefix="m")
    session = Session(router, _Edge(), session_id="s")
    selector = " OR ".join(f"k = 'v{i}'" for i in range(50))
    session.receive_data(CONNECT)
    subscribe = Frame(
        "SUBSCRIBE", {"destination": "/topic/t", "id": "1", "ack": "auto", "selector": selector}
    )
    session.receive_data(encode(subscribe))
    session.receive_data(send("/topic/t", k="v49"))
    cost = router.meter.spent  # what one SEND costs its selector
    assert cost > 0
    acted: list[int] = []
    before = router.meter.spent
    more = session.receive_data(send("/topic/t", k="v49") * 10, max_work=3 * cost - 1)
    acted.append((router.meter.spent - before) // cost)
    while more:
        before = router.meter.spent
        more = session.receive_more(max_work=3 * cost - 1)
        acted.append((router.meter.spent - before) // cost)
    assert acted == [3, 3, 3, 1]


class _Edge:
    def wake(self) -> None:
        pass

    def abort(self) -> None:
        pass


def run_in_turns(chunks: list[bytes], max_frames: int | None) -> tuple[bytes, int, str | None]:
    """What a session does with ``chunks``: its output, the queue's depth, why it closed."""
    router = Router(id_prefix="m")
    session = Session(router, _Edge(), session_id="s")
    output = []
    for chunk in chunks:
        if max_frames is None:
            more = session.receive_data(chunk)
        else:
            more = session.receive_data(chunk, max_frames=max_frames)
            while more:
                output.append(session.take_output())
                more = session.receive_more(max_frames=max_frames)
        assert not more
        output.append(session.take_output())
    return b"".join(output), router.depth("/queue/q"), session.close_reason


frames = st.lists(
    st.sampled_from(
        [
            send("/queue/q", b"x"),
            send("/queue/q", b"y", receipt="r"),
            b"\n",  # a heart-beat: no frame, no turn
            encode(Frame("SUBSCRIBE", {"destination": "/queue/q", "id": "1", "ack": "client"})),
            encode(Frame("UNSUBSCRIBE", {"id": "1", "receipt": "u"})),
            encode(Frame("BEGIN", {"transaction": "t"})),
            send("/queue/q", b"z", transaction="t"),
            encode(Frame("COMMIT", {"transaction": "t"})),
        ]
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(
    frames,
    st.booleans(),
    st.sampled_from([b"", b"NOT A FRAME\n\n\x00", encode(Frame("DISCONNECT", {"receipt": "d"}))]),
    st.lists(st.integers(1, 300), max_size=8),
    st.integers(1, 5),
)
def test_acting_in_turns_changes_nothing_but_when(
    body: list[bytes], connect: bool, tail: bytes, cuts: list[int], max_frames: int
) -> None:
    data = (CONNECT if connect else b"") + b"".join(body) + tail
    points = sorted({min(cut, len(data)) for cut in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    chunks = [chunk for chunk in chunks if chunk]
    assert run_in_turns(chunks, max_frames) == run_in_turns(chunks, None)
