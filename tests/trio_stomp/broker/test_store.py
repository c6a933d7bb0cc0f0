"""The embedded broker's durable store (``data_dir``), over real loopback TCP.

The store's commit (the call that ends in an fsync) is patched where a test
must control when it finishes or count how often it runs; everything else
goes through the broker's public API and raw STOMP frames.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_stomp.broker import StoreError, open_broker
from trio_stomp.broker._store_database import Database
from trio_stomp.testing import RawClient, open_raw_client

TIMEOUT = 10.0
COMMIT = "trio_stomp.broker._store_database.Database.commit"


async def _send_all(client: RawClient, destination: str, bodies: list[bytes]) -> None:
    for body in bodies:
        await client.publish(destination, body)
    await client.sync()


async def _read_queue(
    broker: Any, destination: str, count: int, ack: str = "client-individual"
) -> list[Any]:
    """Subscribe, take ``count`` messages (acking them unless auto), and leave.

    Messages delivered after those and not acked go back to the queue.
    """
    frames: list[Any] = []
    if not count:
        return frames
    async with open_raw_client(broker) as client:
        await client.subscribe(destination, ack=ack, prefetch_count=str(count))
        for _ in range(count):
            frame = await client.expect("MESSAGE")
            frames.append(frame)
            if ack != "auto":
                await client.send("ACK", {"id": frame.headers["ack"]})
        await client.sync()
    return frames


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Gate]:
    gate = _Gate()
    original = Database.commit

    def commit(self: Any, adds: Any, removes: Any, *rest: Any) -> None:
        gate.entered.set()
        gate.release.wait(TIMEOUT)
        original(self, adds, removes, *rest)

    monkeypatch.setattr(COMMIT, commit)
    yield gate
    gate.release.set()


class _Gate:
    """Holds every commit until released (a disk that is slow to fsync)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    async def wait_entered(self) -> None:
        assert await trio.to_thread.run_sync(self.entered.wait, TIMEOUT)


# -- restart -----------------------------------------------------------------------


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sent=st.integers(1, 12), acked=st.data())
async def test_restart_delivers_the_unacked_in_order_marked_redelivered(
    tmp_path_factory: pytest.TempPathFactory, sent: int, acked: st.DataObject
) -> None:
    data_dir = tmp_path_factory.mktemp("data")
    take = acked.draw(st.integers(0, sent), label="taken and acked before the restart")
    bodies = [f"m{i}".encode() for i in range(sent)]
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=data_dir) as broker:
            async with open_raw_client(broker) as client:
                await _send_all(client, "/queue/a", bodies)
            first = await _read_queue(broker, "/queue/a", take)
            assert [f.body for f in first] == bodies[:take]
            assert all("redelivered" not in f.headers for f in first)
        async with open_broker(data_dir=data_dir) as broker:
            assert broker.queue_depth("/queue/a") == sent - take
            again = await _read_queue(broker, "/queue/a", sent - take)
        assert [f.body for f in again] == bodies[take:]
        assert all(f.headers["redelivered"] == "true" for f in again)
        ids = {f.headers["message-id"] for f in again}
        assert len(ids) == sent - take  # each keeps one id across restarts
        async with open_broker(data_dir=data_dir) as broker:
            assert broker.queue_depth("/queue/a") == 0


async def test_nacked_and_unacked_stay_client_ack_removes_up_to_the_acked(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as client:
                await _send_all(client, "/queue/a", [b"0", b"1", b"2", b"3"])
                await client.subscribe("/queue/a", ack="client", prefetch_count="3")
                frames = [await client.expect("MESSAGE") for _ in range(3)]
                # Cumulative ACK of the second: the first two are consumed.
                await client.send("ACK", {"id": frames[1].headers["ack"]})
                await client.send("NACK", {"id": frames[2].headers["ack"]})
                await client.sync()
        async with open_broker(data_dir=tmp_path) as broker:
            again = await _read_queue(broker, "/queue/a", 2)
        assert [f.body for f in again] == [b"2", b"3"]


async def test_auto_ack_deliveries_are_consumed(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as client:
                await _send_all(client, "/queue/a", [b"0", b"1"])
            await _read_queue(broker, "/queue/a", 2, ack="auto")
        async with open_broker(data_dir=tmp_path) as broker:
            assert broker.queue_depth("/queue/a") == 0


async def test_topics_are_not_stored(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as listener, open_raw_client(broker) as sender:
                await listener.subscribe("/topic/t", ack="client-individual")
                await sender.send("SEND", {"destination": "/topic/t", "receipt": "r"}, b"x")
                await sender.receipt("r")
                assert (await listener.expect("MESSAGE")).body == b"x"  # never acked
        with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as db:
            assert db.execute("SELECT COUNT(*) FROM messages").fetchone() == (0,)
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as listener:
                await listener.subscribe("/topic/t")
                assert await listener.drain() == []


async def test_depths_say_a_queue_is_kept_and_a_topic_is_not(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as listener, open_raw_client(broker) as sender:
                await listener.subscribe("/topic/t", ack="client-individual")
                await sender.publish("/topic/t", b"x")
                await sender.publish("/queue/q", b"y")
                await sender.sync()
                assert (await listener.expect("MESSAGE")).body == b"x"  # never acked
                held = [(d.destination, d.held, d.durable) for d in broker.depths()]
                assert held == [("/queue/q", 1, True), ("/topic/t", 1, False)]


async def test_aborted_transaction_stores_nothing_committed_one_does(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as client:
                for tx, end in (("t1", "ABORT"), ("t2", "COMMIT")):
                    await client.send("BEGIN", {"transaction": tx})
                    await client.publish("/queue/a", tx.encode(), transaction=tx)
                    await client.send(end, {"transaction": tx, "receipt": tx})
                    await client.receipt(tx)
        async with open_broker(data_dir=tmp_path) as broker:
            assert [f.body for f in await _read_queue(broker, "/queue/a", 1)] == [b"t2"]


# -- receipts wait for the disk ------------------------------------------------------


async def test_no_receipt_before_the_commit_returns(tmp_path: Path, gate: _Gate) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as producer, open_raw_client(broker) as other:
                # The probe: a topic message the store never writes, delivered to
                # the producer while its commit is held.
                await producer.subscribe("/topic/probe")
                await producer.send("SEND", {"destination": "/queue/a", "receipt": "r1"}, b"1")
                await producer.publish("/queue/a", b"2")  # no receipt of its own
                await producer.send("SUBSCRIBE", {"destination": "/queue/b", "id": "b"})
                await producer.send("UNSUBSCRIBE", {"id": "b", "receipt": "r2"})
                await gate.wait_entered()
                # The broker has handled all of the above; a later frame's output
                # on the same connection arrives while the commit is held...
                await other.send("SEND", {"destination": "/topic/probe", "receipt": "p"}, b"p")
                await other.receipt("p")
                probe = await producer.frame()
                assert probe.command == "MESSAGE"
                assert probe.body == b"p"
                # ...and no RECEIPT came before it.
                assert not [e for e in producer.events if getattr(e, "command", "") == "RECEIPT"]
                gate.release.set()
                await producer.receipt("r1")
                await producer.receipt("r2")  # in order, after r1


async def test_disconnect_receipt_waits_for_the_commit(tmp_path: Path, gate: _Gate) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as client:
                await client.publish("/queue/a", b"1")
                await client.send("DISCONNECT", {"receipt": "bye"})
                await client.send("SEND", {"destination": "/queue/a"}, b"ignored")
                await gate.wait_entered()
                with pytest.raises(trio.TooSlowError):
                    await client.event(within=0.2)
                gate.release.set()
                frames = await client.expect_closed()
                assert [f.headers.get("receipt-id") for f in frames] == ["bye"]
        async with open_broker(data_dir=tmp_path) as broker:
            assert broker.queue_depth("/queue/a") == 1


async def test_group_commit_many_senders_share_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    senders, each = 20, 25
    commits: list[int] = []
    original = Database.commit

    def commit(self: Any, adds: Any, removes: Any, *rest: Any) -> None:
        adds = list(adds)
        commits.append(len(adds))
        original(self, adds, removes, *rest)

    monkeypatch.setattr(COMMIT, commit)

    async def sender(broker: Any, number: int) -> None:
        async with open_raw_client(broker) as client:
            for i in range(each):
                receipt = f"{number}-{i}"
                await client.send(
                    "SEND", {"destination": "/queue/a", "receipt": receipt}, receipt.encode()
                )
                await client.receipt(receipt)

    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path) as broker:
            async with trio.open_nursery() as nursery:
                for number in range(senders):
                    nursery.start_soon(sender, broker, number)
        async with open_broker(data_dir=tmp_path) as broker:
            assert broker.queue_depth("/queue/a") == senders * each
    assert sum(commits) == senders * each
    # Each sender waits for its receipt, so one at a time would take one
    # commit per message; grouped, each commit carries several senders' messages.
    assert len(commits) <= senders * each / 4, commits


# -- errors and warnings -------------------------------------------------------------


async def test_a_data_dir_that_is_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a directory")
    with trio.fail_after(TIMEOUT), pytest.raises(StoreError, match=str(plain)):
        async with open_broker(data_dir=plain):
            pytest.fail("the broker started")


async def test_a_corrupt_store_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "broker.sqlite3").write_bytes(b"garbage " * 1000)
    with trio.fail_after(TIMEOUT), pytest.raises(StoreError, match="not a database") as info:
        async with open_broker(data_dir=tmp_path):
            pytest.fail("the broker started")
    assert str(tmp_path / "broker.sqlite3") in str(info.value)


async def test_a_second_broker_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_broker(data_dir=tmp_path):
            with pytest.raises(StoreError, match="another broker"):
                async with open_broker(data_dir=tmp_path):
                    pytest.fail("the second broker started")


async def test_a_failed_write_stops_the_broker_without_a_receipt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def commit(self: Any, adds: Any, removes: Any, *rest: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(COMMIT, commit)
    frames: list[Any] = []

    async def run() -> None:
        async with open_broker(data_dir=tmp_path) as broker:
            async with open_raw_client(broker) as client:
                await client.send("SEND", {"destination": "/queue/a", "receipt": "r"}, b"x")
                frames.extend(await client.expect_closed())
                await trio.sleep_forever()  # the store's failure ends the block

    with trio.fail_after(TIMEOUT), pytest.raises(StoreError, match="disk is full") as info:
        await run()
    assert str(tmp_path) in str(info.value)
    assert all(f.command != "RECEIPT" for f in frames)


async def test_without_data_dir_the_broker_says_it_is_volatile(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, logger="trio_stomp.broker")
    with trio.fail_after(TIMEOUT):
        async with open_broker():
            pass
        assert "volatile" in caplog.text
        caplog.clear()
        async with open_broker(data_dir=tmp_path):
            pass
        assert "volatile" not in caplog.text
        assert str(tmp_path) in caplog.text
