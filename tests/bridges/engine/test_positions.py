"""bridges.Positions: acks in any order, the highest contiguous offset saved durably."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges import PositionError, Positions
from bridges.testing import wait_until

# Items of sizes 1..9 one after the other; the test draws the order of acks.
SIZES = st.lists(st.integers(1, 9), min_size=1, max_size=30)


def items(sizes: list[int]) -> list[tuple[int, int]]:
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [(start, start + size) for start, size in zip(starts, sizes, strict=True)]


@settings(deadline=None, max_examples=50)
@given(sizes=SIZES, data=st.data())
def test_the_committed_offset_is_the_end_of_the_acked_prefix(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], data: st.DataObject
) -> None:
    spans = items(sizes)
    acked = data.draw(st.lists(st.sampled_from(spans), unique=True))
    folder = tmp_path_factory.mktemp("positions")

    async def main() -> None:
        positions = Positions(folder / "position")
        await positions.restore()
        for start, end in spans:
            assert positions.take(start, end)
        done: set[tuple[int, int]] = set()
        for span in acked:
            positions.ack(span[0])
            done.add(span)
            prefix = 0
            for start, end in spans:
                if (start, end) not in done:
                    break
                prefix = end
            assert positions.committed == prefix
        await positions.save()
        # A restart: resumes at the committed offset, and what was acked beyond it
        # is not handed out again; everything else is.
        again = Positions(folder / "position")
        await again.restore()
        assert again.committed == positions.committed
        handed = [s for s, e in spans if s >= again.committed and again.take(s, e)]
        assert handed == [s for s, e in spans if s >= again.committed and (s, e) not in done]

    trio.run(main)


async def test_a_nacked_item_holds_the_position_skip_and_reset(tmp_path: Path) -> None:
    positions = Positions(tmp_path / "position")
    await positions.restore()
    for start in (0, 10, 20):
        positions.take(start, start + 10)
    positions.ack(10)
    positions.ack(20)
    assert positions.committed == 0  # the first is nacked: still open, handed out again
    assert positions.in_flight == 1
    positions.skip(0, "unreadable")  # counted as done, logged
    assert positions.committed == 30
    positions.extra = {"inode": 7}
    positions.changed()
    await positions.save()
    saved = json.loads((tmp_path / "position").read_text())
    assert saved == {"inode": 7, "offset": 30, "acked": []}
    positions.reset()
    assert (positions.committed, positions.in_flight) == (0, 0)


async def test_the_save_loop_writes_once_per_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bridges._positions as module

    writes: list[bytes] = []
    monkeypatch.setattr(module, "_write", lambda file, data: writes.append(data))
    positions = Positions(tmp_path / "position")
    await positions.restore()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(positions.save_loop)
        for start in range(100):
            positions.take(start, start + 1)
            positions.ack(start)  # a burst of 100 acks, no checkpoint between
        await wait_until(lambda: bool(writes), 0.01)
        await trio.sleep(0.1)  # (nothing more to write)
        nursery.cancel_scope.cancel()
    assert [json.loads(data)["offset"] for data in writes] == [100]


async def test_an_unusable_position_file_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "position").write_text("{not json")
    with pytest.raises(PositionError, match="is unusable"):
        await Positions(tmp_path / "position").restore()
    (tmp_path / "position").unlink()
    os.symlink(tmp_path / "elsewhere", tmp_path / "position")
    with pytest.raises(PositionError, match="refused"):
        await Positions(tmp_path / "position").restore()
