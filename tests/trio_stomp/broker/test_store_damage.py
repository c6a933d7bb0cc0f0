"""A damaged store is never silent: the broker says what it lost, and refuses to start.

What a killed broker leaves is taken while it runs: a copy of its data dir
between two commits holds what SIGKILL would leave (the WAL with every
commit, the mark file as the page cache holds it), without a process to kill.
The subprocess test in ``tests/trio_stomp/cli/test_broker_cli_data_dir.py``
does the same with a real SIGKILL.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_stomp.broker import StoreDamaged, StoreError, open_broker, serve_broker
from trio_stomp.broker._store_mark import MARK_FILE
from trio_stomp.testing import open_raw_client

TIMEOUT = 20.0
QUEUE = "/queue/a"


async def _send_each(broker: Any, bodies: list[bytes]) -> None:
    """Send each body with a receipt, waiting for it: one commit per message."""
    async with open_raw_client(broker) as client:
        for number, body in enumerate(bodies):
            await client.send("SEND", {"destination": QUEUE, "receipt": str(number)}, body)
            await client.receipt(str(number))


async def _killed(data_dir: Path, bodies: list[bytes], consume: int = 0) -> Path:
    """What a broker killed after storing ``bodies`` (and consuming ``consume``) leaves."""
    left = data_dir.with_name(data_dir.name + "-killed")
    async with open_broker(data_dir=data_dir) as broker:
        await _send_each(broker, bodies)
        if consume:
            async with open_raw_client(broker) as client:
                await client.subscribe(QUEUE, ack="client-individual", prefetch_count="1")
                for number in range(consume):
                    frame = await client.expect("MESSAGE")
                    await client.send("ACK", {"id": frame.headers["ack"], "receipt": f"a{number}"})
                    await client.receipt(f"a{number}")
                await client.send("UNSUBSCRIBE", {"id": "0"})
                # (a RECEIPT waits for the removals too only when it follows a SEND)
                await client.send("SEND", {"destination": "/queue/b", "receipt": "b"}, b"b")
                await client.receipt("b")
        shutil.copytree(data_dir, left)
    return left


def _flip(path: Path, at: float, count: int = 16) -> None:
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    for index in range(start, start + count):
        data[index] ^= 0xFF
    path.write_bytes(bytes(data))


async def _bodies_of(broker: Any, count: int) -> list[bytes]:
    async with open_raw_client(broker) as client:
        await client.subscribe(QUEUE)
        return [(await client.expect("MESSAGE")).body for _ in range(count)]


# -- the cases ---------------------------------------------------------------


async def test_a_damaged_wal_is_refused_naming_how_many_were_lost_and_from_where(
    tmp_path: Path,
) -> None:
    bodies = [f"m{i}".encode() for i in range(120)]
    with trio.fail_after(TIMEOUT):
        left = await _killed(tmp_path / "data", bodies)
        _flip(left / "broker.sqlite3-wal", 0.5)
        found = (left / "broker.sqlite3-wal").read_bytes()
        with pytest.raises(StoreDamaged) as info:
            async with open_broker(data_dir=left):
                pytest.fail("the broker started")
        # The WAL as found (its frames after the damaged one) is kept aside.
        assert (left / "broker.sqlite3-wal.refused").read_bytes() == found
        damage = info.value
        # SQLite keeps the commits before the damaged frame: one message each.
        kept = damage.from_key - 1
        assert 0 < kept < len(bodies)
        assert damage.lost == damage.lost_most == len(bodies) - kept
        message = str(damage)
        assert f"{len(bodies) - kept} message(s) lost" in message
        assert f"from key {damage.from_key}" in message
        assert str(left / "broker.sqlite3") in message
        assert "accept" in message
        # Refused again, the same way: nothing was dropped or counted as done.
        with pytest.raises(StoreDamaged, match=f"{len(bodies) - kept} message"):
            async with open_broker(data_dir=left):
                pytest.fail("the broker started")


async def test_a_damaged_wal_header_loses_every_commit_since_the_last_checkpoint(
    tmp_path: Path,
) -> None:
    bodies = [f"m{i}".encode() for i in range(20)]
    with trio.fail_after(TIMEOUT):
        left = await _killed(tmp_path / "data", bodies)
        _flip(left / "broker.sqlite3-wal", 0.0)  # (SQLite then ignores the whole WAL)
        with pytest.raises(StoreDamaged) as info:
            async with open_broker(data_dir=left):
                pytest.fail("the broker started")
    assert (info.value.lost, info.value.lost_most, info.value.from_key) == (20, 20, 1)


async def test_accepted_damage_starts_with_what_is_left_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_stomp.broker")
    bodies = [f"m{i}".encode() for i in range(60)]
    with trio.fail_after(TIMEOUT):
        left = await _killed(tmp_path / "data", bodies)
        _flip(left / "broker.sqlite3-wal", 0.5)
        with pytest.raises(StoreDamaged) as info:
            async with open_broker(data_dir=left):
                pytest.fail("the broker started")
        kept = info.value.from_key - 1
        async with open_broker(data_dir=left, accept_damage=True) as broker:
            assert broker.queue_depth(QUEUE) == kept
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1
            assert "accept" in warnings[0].getMessage()
            assert f"{len(bodies) - kept} message(s) lost" in warnings[0].getMessage()
            await _send_each(broker, [b"after"])
        caplog.clear()
        # Accepted once: the store counts on from there, and the next start is silent.
        async with open_broker(data_dir=left) as broker:
            assert await _bodies_of(broker, kept + 1) == [*bodies[:kept], b"after"]
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("how", ["emptied", "deleted"])
async def test_an_emptied_or_recreated_store_file_is_refused(tmp_path: Path, how: str) -> None:
    data_dir = tmp_path / "data"
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=data_dir) as broker:
            await _send_each(broker, [b"0", b"1", b"2"])
        store = data_dir / "broker.sqlite3"
        if how == "emptied":
            store.write_bytes(b"")
        else:
            store.unlink()
        with pytest.raises(StoreDamaged) as info:
            async with open_broker(data_dir=data_dir):
                pytest.fail("the broker started")
        assert (info.value.lost, info.value.from_key) == (3, 1)
        assert "3 message(s) lost" in str(info.value)
        assert "empty" in str(info.value)
        async with open_broker(data_dir=data_dir, accept_damage=True) as broker:
            assert broker.queue_depth(QUEUE) == 0


async def test_a_damaged_row_is_refused_by_its_checksum_and_dropped_when_accepted(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            await _send_each(broker, [b"0", b"1", b"2"])
        with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as db, db:
            db.execute("UPDATE messages SET body = x'31ff' WHERE body = x'31'")  # (key 2)
        with pytest.raises(StoreDamaged, match=r"1 stored message\(s\) damaged .*keys 2\b"):
            async with open_broker(data_dir=tmp_path):
                pytest.fail("the broker started")
        async with open_broker(data_dir=tmp_path, accept_damage=True) as broker:
            assert await _bodies_of(broker, 2) == [b"0", b"2"]


async def test_a_store_row_that_is_not_ours_is_damage_naming_the_file(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path):
            pass
    with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as db, db:
        db.execute(
            "INSERT INTO messages (key, id, destination, headers, body, checksum) "
            "VALUES (1, 'x', '/queue/a', 'not json', x'00', 0)"
        )
    with trio.fail_after(TIMEOUT), pytest.raises(StoreError, match=r"broker\.sqlite3"):
        async with open_broker(data_dir=tmp_path):
            pytest.fail("the broker started")


async def test_a_missing_mark_is_refused_when_the_store_has_commits(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            await _send_each(broker, [b"0"])
        (tmp_path / MARK_FILE).unlink()
        with pytest.raises(StoreDamaged, match=f"{MARK_FILE} is missing") as info:
            async with open_broker(data_dir=tmp_path):
                pytest.fail("the broker started")
        assert info.value.lost_most is None
        assert "an unknown number of message(s) lost" in str(info.value)


async def test_lost_commits_that_also_acknowledged_give_a_range(tmp_path: Path) -> None:
    # 40 stored, then the first 10 consumed one at a time: 50 commits. The
    # damage drops the last ones, which removed messages: those come back.
    bodies = [f"m{i}".encode() for i in range(40)]
    with trio.fail_after(TIMEOUT):
        left = await _killed(tmp_path / "data", bodies, consume=10)
        _flip(left / "broker.sqlite3-wal", 0.9)
        with pytest.raises(StoreDamaged) as info:
            async with open_broker(data_dir=left):
                pytest.fail("the broker started")
        damage = info.value
        # The lost commits removed messages too: whether the removed ones were
        # among the lost adds cannot be told, so the count is a range.
        assert damage.lost_most is not None
        assert damage.lost < damage.lost_most
        assert f"{damage.lost} to {damage.lost_most} message(s) lost" in str(damage)
        assert "consumed message(s) delivered again" in str(damage)


async def test_rows_deleted_behind_the_brokers_back_do_not_add_up(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            await _send_each(broker, [b"0", b"1", b"2"])
        with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as db, db:
            db.execute("DELETE FROM messages WHERE key = 2")
        with pytest.raises(StoreDamaged, match=r"counts 3 message.* but holds 2") as info:
            async with open_broker(data_dir=tmp_path):
                pytest.fail("the broker started")
        assert info.value.lost == 1


async def test_a_damaged_mark_is_refused_when_the_store_has_commits(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            await _send_each(broker, [b"0"])
        _flip(tmp_path / MARK_FILE, 0.0, count=96)
        with pytest.raises(StoreDamaged, match=f"{MARK_FILE} is unreadable"):
            async with open_broker(data_dir=tmp_path):
                pytest.fail("the broker started")


async def test_a_damaged_page_of_the_database_file_is_refused(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            await _send_each(broker, [bytes(1000)] * 40)  # (several pages)
        store = tmp_path / "broker.sqlite3"
        data = bytearray(store.read_bytes())
        page = 4096 * 2  # (the third page: a b-tree page, its header first)
        data[page : page + 16] = bytes(16)
        store.write_bytes(bytes(data))
        with pytest.raises(StoreError, match=re.escape(str(store))) as info:
            async with open_broker(data_dir=tmp_path):
                pytest.fail("the broker started")
        # SQLite itself finds this one; accept_damage cannot help a file it cannot read.
        assert "malformed" in str(info.value)


# -- the clean cases stay silent -------------------------------------------------------


async def test_a_new_data_dir_and_a_clean_restart_are_silent_and_quick(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_stomp.broker")
    bodies = [f"m{i}".encode() for i in range(30)]
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            await _send_each(broker, bodies)
        started = time.perf_counter()
        async with open_broker(data_dir=tmp_path) as broker:
            opened = time.perf_counter() - started
            assert await _bodies_of(broker, 30) == bodies
        # What a killed broker leaves, undamaged, is whole too.
        left = await _killed(tmp_path / "again", bodies)
        async with open_broker(data_dir=left) as broker:
            assert broker.queue_depth(QUEUE) == 30
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert opened < 2.0  # (30 messages: milliseconds; the bound leaves room for a busy CI)


async def test_a_store_of_schema_1_is_upgraded_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_stomp.broker")
    with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as db, db:
        db.execute(
            "CREATE TABLE messages (key INTEGER PRIMARY KEY, id TEXT NOT NULL, "
            "destination TEXT NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL)"
        )
        db.execute("INSERT INTO messages VALUES (4, 'x-4', '/queue/a', '[]', x'34')")
        db.execute("INSERT INTO messages VALUES (7, 'x-7', '/queue/a', '[]', x'37')")
        db.execute("PRAGMA user_version=1")
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            assert broker.queue_depth(QUEUE) == 2
            await _send_each(broker, [b"8"])  # (keys go on past the old ones)
        async with open_broker(data_dir=tmp_path) as broker:
            assert await _bodies_of(broker, 3) == [b"4", b"7", b"8"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_serve_broker_takes_accept_damage(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            await _send_each(broker, [b"0"])
        (tmp_path / "broker.sqlite3").write_bytes(b"")
        async with trio.open_nursery() as nursery:
            with pytest.raises(StoreDamaged):
                await nursery.start(functools.partial(serve_broker, data_dir=tmp_path))
            broker = await nursery.start(
                functools.partial(serve_broker, data_dir=tmp_path, accept_damage=True)
            )
            assert broker.queue_depth(QUEUE) == 0
            nursery.cancel_scope.cancel()
