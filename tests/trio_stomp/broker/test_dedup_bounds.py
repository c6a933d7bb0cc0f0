"""The duplicate window's bounds (issues 31 and 32): off by default for library users, per
destination (another destination's ids never push one's out), a byte bound, long ids kept
as digests, and every drop counted and logged."""

from __future__ import annotations

import logging
import sqlite3
import tracemalloc
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from test_dedup import _Clock, _offer

import trio_stomp
from trio_stomp.broker import Broker, Limits, open_broker
from trio_stomp.broker._dedup import ENTRY_COST, Duplicates
from trio_stomp.testing import RawClient, open_raw_client

TIMEOUT = 20.0


# -- a library user ------------------------------------------------------------------


async def test_a_library_users_second_send_with_a_reused_bridge_id_is_delivered() -> None:
    # A message that passed through a bridge carries bridge-id; the application sends it
    # again later, changed: the default broker (and the stomp_broker fixture) delivers both.
    with trio.fail_after(TIMEOUT):
        async with open_broker() as broker, trio_stomp.connect(broker.url) as client:
            headers = {"bridge-id": "order-1"}
            await client.send("/queue/orders", b"first", headers=headers, receipt=True)
            await client.send("/queue/orders", b"second (different)", headers=headers, receipt=True)
            async with client.subscribe("/queue/orders") as subscription:
                bodies = [(await subscription.__anext__()).body for _ in range(2)]
            assert bodies == [b"first", b"second (different)"]
            assert broker.duplicates_dropped == 0


async def test_the_stomp_broker_fixture_delivers_a_reused_bridge_id(stomp_broker: Broker) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_stomp.connect(stomp_broker.url) as client:
            for body in (b"one", b"two"):
                await client.send("/queue/f", body, headers={"bridge-id": "x"}, receipt=True)
        assert stomp_broker.queue_depth("/queue/f") == 2


# -- per destination -----------------------------------------------------------------


def test_ids_sent_to_another_destination_never_push_one_out() -> None:
    window = Duplicates(100, 600.0, _Clock())
    assert _offer(window, "/queue/a", "order-1")
    for n in range(10_000):
        assert _offer(window, "/queue/b", f"other-{n}")
    assert not _offer(window, "/queue/a", "order-1")  # still remembered: dropped
    assert len(window) == 101  # (each destination its own 100)


async def _send(client: RawClient, destination: str, bridge_id: str, receipt: str = "") -> None:
    headers = {"destination": destination, "bridge-id": bridge_id}
    if receipt:
        headers["receipt"] = receipt
    await client.send("SEND", headers, b"x")


async def test_a_broker_keeps_one_destinations_ids_while_another_gets_many() -> None:
    limits = Limits(duplicate_window=50)
    with trio.fail_after(TIMEOUT):
        async with open_broker(limits=limits) as broker, open_raw_client(broker) as client:
            await _send(client, "/queue/a", "order-1")
            for n in range(1_000):
                await _send(client, "/queue/b", f"b-{n}")
            await _send(client, "/queue/a", "order-1", receipt="r")
            await client.receipt("r")
            assert broker.queue_depth("/queue/a") == 1
            assert broker.duplicates_dropped_by_destination == {"/queue/a": 1}


# -- the byte bound and long ids ---------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5_000), min_size=1, max_size=300),
    destinations=st.integers(1, 5),
)
def test_the_accounted_bytes_never_pass_the_bound(sizes: list[int], destinations: int) -> None:
    bound = 64 * 1024
    window = Duplicates(10_000, 600.0, _Clock(), max_bytes=bound, max_id_length=4096)
    for n, size in enumerate(sizes):
        _offer(window, f"/queue/{n % destinations}", f"{n}-" + "i" * size)
        assert window.bytes <= bound


def test_the_oldest_ids_of_the_destination_holding_most_go_first() -> None:
    window = Duplicates(100_000, 600.0, _Clock(), max_bytes=200_000)
    assert _offer(window, "/queue/small", "mine")
    for n in range(5_000):  # far past the bound
        _offer(window, "/queue/flood", f"flood-{n}")
    assert window.bytes <= 200_000
    assert not _offer(window, "/queue/small", "mine")  # the flood flushed its own
    assert not _offer(window, "/queue/flood", "flood-4999")
    assert _offer(window, "/queue/flood", "flood-0")


def test_the_accounting_covers_what_the_window_really_takes() -> None:
    # tracemalloc: what 2,000 ids of 1 to 256 characters really cost stays within their
    # accounted bytes (ENTRY_COST is the measured cost of an entry, rounded up).
    window = Duplicates(100_000, 600.0, _Clock(), max_bytes=1 << 30)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(2_000):
            _offer(window, "/queue/a", f"{n}:" + "x" * (n % 256))
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert ENTRY_COST > 0
    assert used <= window.bytes, (used, window.bytes)


async def test_many_long_ids_stay_under_the_bound_and_are_still_dropped_when_repeated() -> None:
    # 32 §2: 10,000 ids of 60,000 characters took the broker from 37 to 611 MiB. Here 300
    # of them: each is kept as its 65-byte digest, and the window stays under its bound.
    limits = Limits(duplicate_window=10_000, duplicate_window_bytes=256 * 1024)
    long_id = "L" * 60_000
    with trio.fail_after(TIMEOUT):
        async with open_broker(limits=limits) as broker, open_raw_client(broker) as client:
            for n in range(300):
                await _send(client, "/queue/a", f"{n}{long_id}")
            await _send(client, "/queue/a", f"299{long_id}", receipt="r1")  # a repeat
            await _send(client, "/queue/a", f"{long_id}300", receipt="r2")  # another
            await client.receipt("r2")
            assert broker.duplicate_window_bytes <= limits.duplicate_window_bytes
            assert broker.duplicates_dropped == 1
            assert broker.queue_depth("/queue/a") == 301


def test_a_long_id_is_stored_as_its_digest(tmp_path: Path) -> None:
    connection = sqlite3.connect(":memory:")
    window = Duplicates(10, 600.0, _Clock(), max_id_length=256)
    window.load(connection)
    long_id = "é" * 200  # 400 bytes of UTF-8
    assert _offer(window, "/queue/a", long_id, ticket=1)
    assert _offer(window, "/queue/a", "é" * 128, ticket=1)  # 256 bytes: kept as it is
    taken = window.take()
    assert taken is not None
    window.write(connection, taken)
    (ids,) = connection.execute("SELECT ids FROM duplicate_ids").fetchone()
    assert long_id not in ids
    assert "\\u00e9" * 128 in ids
    again = Duplicates(10, 600.0, _Clock(), max_id_length=256)
    again.load(connection)
    assert not _offer(again, "/queue/a", long_id)
    assert not _offer(again, "/queue/a", "é" * 128)


def test_rows_go_once_none_of_their_ids_is_in_the_window() -> None:
    connection = sqlite3.connect(":memory:")
    window = Duplicates(2, 600.0, _Clock())
    window.load(connection)

    def commit() -> None:
        taken = window.take()
        if taken is not None:
            window.write(connection, taken)

    _offer(window, "/queue/a", "a1", ticket=1)
    _offer(window, "/queue/b", "b1", ticket=1)
    commit()  # row 1: a1, b1
    _offer(window, "/queue/a", "a2", ticket=1)
    _offer(window, "/queue/a", "a3", ticket=1)  # a1 goes; row 1 still holds b1
    commit()
    rows = connection.execute("SELECT row FROM duplicate_ids ORDER BY row").fetchall()
    assert rows == [(1,), (2,)]
    _offer(window, "/queue/b", "b2", ticket=1)
    _offer(window, "/queue/b", "b3", ticket=1)  # b1 goes: row 1 holds nothing
    commit()
    rows = connection.execute("SELECT row FROM duplicate_ids ORDER BY row").fetchall()
    assert rows == [(2,), (3,)]


# -- counted and logged ------------------------------------------------------------------


def test_drops_are_counted_per_destination_and_logged_sampled_and_escaped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    window = Duplicates(100, 600.0, clock, log_every=60.0)
    hostile = "/queue/\x1b]52;c;AAAA\x07"
    with caplog.at_level(logging.INFO, logger="trio_stomp.broker"):
        _offer(window, hostile, "id-\x1b[2J")
        for _ in range(5):
            assert not _offer(window, hostile, "id-\x1b[2J")
        clock.now += 61.0
        assert not _offer(window, hostile, "id-\x1b[2J")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # the first drop, then one line after log_every
    assert all("\x1b" not in line and "\\x1b" in line for line in lines)
    assert "5 dropped to it since the last line, 6 in all" in lines[1]
    assert window.dropped_by_destination == {hostile: 6}


def test_drops_past_a_thousand_destinations_are_counted_together() -> None:
    window = Duplicates(10, 600.0, _Clock())
    for n in range(1_001):
        _offer(window, f"/queue/{n}", "x")
        assert not _offer(window, f"/queue/{n}", "x")
    assert len(window.dropped_by_destination) == 1_001
    assert window.dropped_by_destination["(other destinations)"] == 1
    assert window.dropped == 1_001
