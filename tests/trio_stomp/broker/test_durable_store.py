"""Durable topic subscriptions with a data dir: kept across restarts, through the
store's own commits (RECEIPT after the fsync, checksums, tally and mark).

Over real loopback TCP with raw frames; SIGKILL of ``trio-stomp broker`` is in
tests/trio_stomp/cli/test_broker_cli_data_dir.py.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_stomp.broker import Broker, DestinationDepth, StoreDamaged, open_broker
from trio_stomp.broker._store_database import Database
from trio_stomp.testing import RawClient, open_raw_client

TIMEOUT = 10.0
COMMIT = "trio_stomp.broker._store_database.Database.commit"
TOPIC = "/topic/news"
NAME = {"activemq.subscriptionName": "daily"}


async def _subscribe(client: RawClient, ack: str = "client-individual") -> None:
    headers = {"destination": TOPIC, "id": "0", "ack": ack, **NAME, "receipt": "sub"}
    await client.send("SUBSCRIBE", headers)
    await client.receipt("sub")


async def _publish(broker: Broker, bodies: list[bytes]) -> None:
    async with open_raw_client(broker) as producer:
        for body in bodies:
            await producer.publish(TOPIC, body)
        await producer.sync()


async def test_kept_across_restarts_until_acknowledged(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
            await _publish(broker, [b"1", b"2", b"3"])
            assert broker.depths() == [
                DestinationDepth(TOPIC, 3, 0, 0, durable=True, subscription="app:daily")
            ]
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
                first = await client.expect("MESSAGE")
                await client.send("ACK", {"id": first.headers["ack"]})
                rest = [await client.expect("MESSAGE") for _ in range(2)]
                await client.sync()
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
                again = [await client.expect("MESSAGE") for _ in range(2)]
                assert await client.drain() == []
    assert first.body == b"1"
    assert first.headers["redelivered"] == "true"
    assert [f.body for f in rest] == [f.body for f in again] == [b"2", b"3"]
    assert [f.headers["message-id"] for f in rest] == [f.headers["message-id"] for f in again]


async def test_a_subscription_holding_nothing_survives_a_restart(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
        async with open_broker(data_dir=tmp_path) as broker:
            await _publish(broker, [b"after the restart"])
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
                assert (await client.expect("MESSAGE")).body == b"after the restart"


async def test_removed_it_stays_removed_after_a_restart(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
            await _publish(broker, [b"1", b"2"])
            async with open_raw_client(broker, client_id="app") as client:
                await client.send("UNSUBSCRIBE", {"id": "x", **NAME, "receipt": "gone"})
                await client.receipt("gone")
        async with open_broker(data_dir=tmp_path) as broker:
            assert broker.depths() == []
            await _publish(broker, [b"3"])
            assert broker.depths() == []
    with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as db:
        assert db.execute("SELECT COUNT(*) FROM messages").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM durables").fetchone() == (0,)


async def test_the_subscribe_receipt_waits_until_the_subscription_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[dict[tuple[str, str], str | None]] = []
    original = Database.commit

    def commit(self: Any, adds: Any, removes: Any, durables: Any = None, *rest: Any) -> None:
        original(self, adds, removes, durables, *rest)
        if durables is not None and durables.subscriptions:
            written.append(dict(durables.subscriptions))

    monkeypatch.setattr(COMMIT, commit)
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
                assert written == [{("app", "daily"): TOPIC}]
                await client.send("UNSUBSCRIBE", {"id": "0", **NAME, "receipt": "gone"})
                await client.receipt("gone")
                assert written == [{("app", "daily"): TOPIC}, {("app", "daily"): None}]


async def test_a_damaged_subscription_record_is_refused_then_rebuilt_from_its_messages(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
            await _publish(broker, [b"kept"])
        with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as db, db:
            db.execute("UPDATE durables SET destination = '/topic/elsewhere'")
        with pytest.raises(StoreDamaged, match=r"1 durable subscription record\(s\) damaged"):
            async with open_broker(data_dir=tmp_path):
                pytest.fail("the broker started")
        async with open_broker(data_dir=tmp_path, accept_damage=True) as broker:
            assert [(d.destination, d.subscription) for d in broker.depths()] == [
                (TOPIC, "app:daily")
            ]
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
                assert (await client.expect("MESSAGE")).body == b"kept"


async def test_a_damaged_durable_message_is_damage_like_a_queue_message(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
            await _publish(broker, [b"kept"])
        with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as db, db:
            db.execute('UPDATE messages SET subscription = \'["app", "other"]\'')
        with pytest.raises(StoreDamaged, match=r"1 stored message\(s\) damaged"):
            async with open_broker(data_dir=tmp_path):
                pytest.fail("the broker started")


async def test_a_store_of_schema_2_is_upgraded_and_keeps_its_queue_messages(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as producer:
                for body in (b"1", b"2"):
                    await producer.publish("/queue/a", body)
                await producer.sync()
        with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as db, db:
            db.execute("ALTER TABLE messages DROP COLUMN subscription")
            db.execute("DROP TABLE durables")
            db.execute("PRAGMA user_version=2")
        async with open_broker(data_dir=tmp_path) as broker:
            assert broker.queue_depth("/queue/a") == 2
            async with open_raw_client(broker, client_id="app") as client:
                await _subscribe(client)
        async with open_broker(data_dir=tmp_path) as broker:
            assert [(d.destination, d.subscription, d.held) for d in broker.depths()] == [
                ("/queue/a", "", 2),
                (TOPIC, "app:daily", 0),
            ]
