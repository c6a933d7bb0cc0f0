"""The broker's duplicate window on ``bridge-id``: the window alone, then the broker with and
without a data dir."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from test_store import _Gate, _read_queue, gate  # noqa: F401 (the fixture)

from trio_stomp.broker import Limits, open_broker
from trio_stomp.broker._dedup import Duplicates
from trio_stomp.frame import Headers
from trio_stomp.testing import RawClient, open_raw_client

TIMEOUT = 10.0
#: The window on, as bridges' embedded broker has it (the library's default is off).
ON = Limits(duplicate_window=10_000)


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _offer(window: Duplicates, destination: str, bridge_id: str, ticket: int = 0) -> bool:
    """True when the window accepts the SEND (and records it, as the session does)."""
    key, seen = window.check(destination, Headers([("bridge-id", bridge_id)]))
    if seen is not None:
        return False
    if key is not None:
        window.accept(key, ticket)
    return True


@given(count=st.integers(1, 6), ids=st.lists(st.integers(0, 9), max_size=60))
def test_a_repeat_is_dropped_while_within_the_last_count_accepted(
    count: int, ids: list[int]
) -> None:
    window = Duplicates(count, 60.0, _Clock())
    accepted: list[int] = []
    for i in ids:
        expected = i not in accepted[-count:]
        assert _offer(window, "/queue/a", str(i)) is expected
        if expected:
            accepted.append(i)
    assert window.dropped == len(ids) - len(accepted)
    assert len(window) <= count


def test_an_id_is_forgotten_after_the_time_window() -> None:
    clock = _Clock()
    window = Duplicates(100, 10.0, clock)
    assert _offer(window, "/queue/a", "x")
    clock.now += 9.0
    assert not _offer(window, "/queue/a", "x")
    clock.now += 2.0
    assert _offer(window, "/queue/a", "x")


def test_ids_are_per_destination_and_a_send_without_one_is_always_taken() -> None:
    window = Duplicates(100, 10.0, _Clock())
    assert _offer(window, "/queue/a", "x")
    assert _offer(window, "/queue/b", "x")
    assert _offer(window, "/queue/a", "bx")
    assert _offer(window, "/queue/ab", "x")  # (not the same as "/queue/a" and "bx")
    assert window.check("/queue/a", Headers([("other", "y")])) == (None, None)
    assert Duplicates(0, 10.0).check("/queue/a", Headers([("bridge-id", "x")])) == (None, None)


def test_stored_ids_are_read_back_within_both_windows() -> None:
    connection = sqlite3.connect(":memory:")
    clock = _Clock()
    first = Duplicates(3, 100.0, clock)
    first.load(connection)
    for i in range(5):
        _offer(first, "/queue/a", f"s{i}", ticket=1)
        taken = first.take()
        assert taken is not None
        first.write(connection, taken)
    _offer(first, "/topic/t", "memory-only", ticket=0)
    assert first.take() is None  # (nothing stored to write)
    again = Duplicates(3, 100.0, clock)
    again.load(connection)
    offered = [_offer(again, "/queue/a", f"s{i}") for i in (4, 3, 2, 1, 0)]
    assert offered == [False, False, False, True, True]
    assert _offer(again, "/topic/t", "memory-only")
    rows = connection.execute("SELECT COUNT(*) FROM duplicate_ids").fetchone()[0]
    assert rows == 3  # (rows out of the count window were deleted)
    clock.now += 101.0
    late = Duplicates(3, 100.0, clock)
    late.load(connection)
    assert _offer(late, "/queue/a", "s4")


# -- the broker ----------------------------------------------------------------------


async def _send(client: RawClient, destination: str, bridge_id: str, receipt: str) -> None:
    headers = {"destination": destination, "bridge-id": bridge_id, "receipt": receipt}
    await client.send("SEND", headers, receipt.encode())


async def test_a_repeated_bridge_id_gets_its_receipt_and_is_dropped() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(limits=ON) as broker, open_raw_client(broker) as client:
            await _send(client, "/queue/a", "x", "r1")
            await _send(client, "/queue/a", "x", "r2")
            await _send(client, "/queue/b", "x", "r3")
            await client.send("SEND", {"destination": "/queue/a", "receipt": "r4"}, b"plain")
            await client.send("SEND", {"destination": "/queue/a", "receipt": "r5"}, b"plain")
            for receipt in ("r1", "r2", "r3", "r4", "r5"):
                await client.receipt(receipt)
            assert broker.queue_depth("/queue/a") == 3
            assert broker.queue_depth("/queue/b") == 1
            assert broker.duplicates_dropped == 1
            frames = await _read_queue(broker, "/queue/a", 3)
            assert [f.body for f in frames] == [b"r1", b"plain", b"plain"]


async def test_a_repeat_in_a_transaction_is_dropped_at_commit() -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(limits=ON) as broker, open_raw_client(broker) as client:
            await client.send("BEGIN", {"transaction": "t"})
            for n in range(2):
                headers = {"destination": "/queue/a", "bridge-id": "x", "transaction": "t"}
                await client.send("SEND", headers, str(n).encode())
            await client.send("COMMIT", {"transaction": "t", "receipt": "c"})
            await client.receipt("c")
            assert broker.queue_depth("/queue/a") == 1


async def test_the_window_is_off_by_default() -> None:
    assert Limits().duplicate_window == 0
    with trio.fail_after(TIMEOUT):
        async with open_broker() as broker, open_raw_client(broker) as client:
            await _send(client, "/queue/a", "x", "r1")
            await _send(client, "/queue/a", "x", "r2")
            await client.receipt("r2")
            assert broker.queue_depth("/queue/a") == 2


@pytest.mark.parametrize("window", [10_000, 0])
async def test_with_a_data_dir_a_repeat_is_dropped_after_the_first_was_consumed_and_a_restart(
    tmp_path: Path, window: int
) -> None:
    limits = Limits(duplicate_window=window)
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path, limits=limits) as broker:
            async with open_raw_client(broker) as client:
                await _send(client, "/queue/a", "x", "r1")
                await client.receipt("r1")
            assert len(await _read_queue(broker, "/queue/a", 1)) == 1
        async with open_broker(data_dir=tmp_path, limits=limits) as broker:
            async with open_raw_client(broker) as client:
                await _send(client, "/queue/a", "x", "r2")
                await client.receipt("r2")
            assert broker.queue_depth("/queue/a") == (0 if window else 1)


async def test_the_receipt_of_a_repeat_waits_for_the_first_to_be_on_disk(
    tmp_path: Path,
    gate: _Gate,  # noqa: F811
) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path, limits=ON) as broker:
            async with open_raw_client(broker) as first, open_raw_client(broker) as second:
                await _send(first, "/queue/a", "x", "r1")
                await gate.wait_entered()
                await _send(second, "/queue/a", "x", "r2")
                with pytest.raises(trio.TooSlowError):
                    await second.receipt("r2", within=0.3)
                gate.release.set()
                await second.receipt("r2")
                await first.receipt("r1")
            assert broker.queue_depth("/queue/a") == 1
