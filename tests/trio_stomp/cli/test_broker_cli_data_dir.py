"""``trio-stomp broker --data-dir``: what a RECEIPT confirmed survives SIGKILL (queues and
durable topic subscriptions); listing and removing durable subscriptions of a stopped broker."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from trio_stomp.cli import main
from trio_stomp.testing import open_raw_client


def _command() -> list[str]:
    script = Path(sys.executable).with_name("trio-stomp")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trio_stomp.cli"]


@asynccontextmanager
async def _broker(data_dir: Path, *more: str) -> AsyncIterator[tuple[trio.Process, int, bytes]]:
    """A ``trio-stomp broker`` process; yields it, its port and its first lines."""
    command = [*_command(), "broker", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *more]
    process = await trio.lowlevel.open_process(
        command, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    assert process.stderr is not None
    try:
        seen = b""
        with trio.fail_after(15):
            while not (found := re.search(rb"listening on stomp://127\.0\.0\.1:(\d+)", seen)):
                chunk = await process.stderr.receive_some(4096)
                assert chunk, seen
                seen += chunk
        yield process, int(found.group(1)), seen
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.deadline(40)
async def test_receipted_messages_survive_sigkill(tmp_path: Path) -> None:
    async with _broker(tmp_path) as (process, port, seen):
        assert b"broker store" in seen
        with trio.fail_after(10):
            async with open_raw_client(port) as client:
                for i in range(20):
                    receipt = str(i)
                    await client.send(
                        "SEND", {"destination": "/queue/a", "receipt": receipt}, receipt.encode()
                    )
                await client.receipt("19")
        process.send_signal(signal.SIGKILL)
        await process.wait()
    async with _broker(tmp_path) as (process, port, _):
        with trio.fail_after(10):
            async with open_raw_client(port) as client:
                await client.subscribe("/queue/a")
                frames = [await client.expect("MESSAGE") for _ in range(20)]
    assert [f.body for f in frames] == [str(i).encode() for i in range(20)]
    assert {f.headers["redelivered"] for f in frames} == {"true"}


@pytest.mark.deadline(40)
async def test_a_killed_brokers_damaged_wal_is_refused_then_accepted(tmp_path: Path) -> None:
    sent = 100
    async with _broker(tmp_path) as (process, port, _):
        with trio.fail_after(10):
            async with open_raw_client(port) as client:
                for i in range(sent):  # one commit each
                    await client.send("SEND", {"destination": "/queue/a", "receipt": str(i)}, b"x")
                    await client.receipt(str(i))
        process.send_signal(signal.SIGKILL)
        await process.wait()
    wal = tmp_path / "broker.sqlite3-wal"
    data = bytearray(wal.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    wal.write_bytes(bytes(data))
    command = [*_command(), "broker", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path)]
    with trio.fail_after(15):
        refused = await trio.run_process(command, capture_stderr=True, check=False)
    err = refused.stderr.decode()
    assert refused.returncode == 1, err
    found = re.search(r"(\d+) message\(s\) lost \(those stored from key (\d+) on\)", err)
    assert found, err
    lost, from_key = int(found.group(1)), int(found.group(2))
    assert 0 < lost < sent
    assert lost == sent - (from_key - 1)
    assert "--accept-damage" in err
    assert "Traceback" not in err
    async with _broker(tmp_path, "--accept-damage") as (process, port, seen):
        assert b"started as accepted" in seen
        assert f"{lost} message(s) lost".encode() in seen
        with trio.fail_after(10):
            async with open_raw_client(port) as client:
                await client.subscribe("/queue/a")
                frames = [await client.expect("MESSAGE") for _ in range(sent - lost)]
                assert await client.drain() == []
    assert len(frames) == from_key - 1


def test_accept_damage_needs_a_data_dir(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["broker", "--listen", "127.0.0.1:0", "--accept-damage"]) == 2
    assert "--accept-damage needs --data-dir" in capsys.readouterr().err


def test_a_data_dir_that_cannot_be_opened_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "plain"
    plain.write_text("a file, not a directory")
    status = main(["broker", "--listen", "127.0.0.1:0", "--data-dir", str(plain)])
    assert status == 1
    err = capsys.readouterr().err
    assert str(plain) in err
    assert "Traceback" not in err


# -- durable topic subscriptions ----------------------------------------------------

DURABLE = {"destination": "/topic/news", "id": "0", "activemq.subscriptionName": "daily"}


@pytest.mark.deadline(40)
async def test_a_durable_subscriptions_receipted_messages_survive_sigkill(tmp_path: Path) -> None:
    async with _broker(tmp_path) as (process, port, _):
        with trio.fail_after(10):
            async with open_raw_client(port, client_id="app") as client:
                await client.send("SUBSCRIBE", {**DURABLE, "ack": "client", "receipt": "s"})
                await client.receipt("s")
            async with open_raw_client(port) as producer:
                for i in range(20):
                    receipt = str(i)
                    await producer.send(
                        "SEND", {"destination": "/topic/news", "receipt": receipt}, b"%d" % i
                    )
                await producer.receipt("19")
        process.send_signal(signal.SIGKILL)
        await process.wait()
    async with _broker(tmp_path) as (process, port, _):
        with trio.fail_after(10):
            async with open_raw_client(port, client_id="app") as client:
                await client.send("SUBSCRIBE", {**DURABLE, "ack": "client", "receipt": "s"})
                await client.receipt("s")
                frames = [await client.expect("MESSAGE") for _ in range(20)]
    assert [f.body for f in frames] == [b"%d" % i for i in range(20)]
    assert {f.headers["redelivered"] for f in frames} == {"true"}
    assert {f.headers["destination"] for f in frames} == {"/topic/news"}


async def _keep_two(data_dir: Path) -> None:
    from trio_stomp.broker import open_broker

    async with open_broker(data_dir=data_dir) as broker:
        for client_id in ("app", "tab\there"):
            async with open_raw_client(broker, client_id=client_id) as client:
                await client.send("SUBSCRIBE", {**DURABLE, "receipt": "s"})
                await client.receipt("s")
        async with open_raw_client(broker) as producer:
            await producer.send("SEND", {"destination": "/topic/news", "receipt": "r"}, b"x")
            await producer.receipt("r")


def test_list_and_remove_subscriptions_of_a_stopped_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trio.run(_keep_two, tmp_path)
    data_dir = ["broker", "--data-dir", str(tmp_path)]
    assert main([*data_dir, "--list-subscriptions"]) == 0
    out = capsys.readouterr().out
    size = len(b"x") + 64 + len("/topic/news")
    assert out.splitlines() == [
        "client-id\tname\ttopic\tmessages\tbytes",
        f"app\tdaily\t/topic/news\t1\t{size}",
        f"tab\\there\tdaily\t/topic/news\t1\t{size}",
    ]
    assert main([*data_dir, "--remove-subscription", "app", "daily"]) == 0
    err = capsys.readouterr().err
    assert "removed durable subscription 'daily' of client-id 'app'" in err
    assert "1 message(s)" in err
    assert main([*data_dir, "--list-subscriptions"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"tab\\there\tdaily\t/topic/news\t1\t{size}"
    ]
    assert main([*data_dir, "--remove-subscription", "app", "daily"]) == 1
    err = capsys.readouterr().err
    assert "no durable subscription 'daily' of client-id 'app'" in err
    assert "Traceback" not in err


def test_subscription_commands_need_a_data_dir(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["broker", "--list-subscriptions"]) == 2
    assert "--list-subscriptions needs --data-dir" in capsys.readouterr().err
    assert main(["broker", "--remove-subscription", "a", "b"]) == 2
    assert "--remove-subscription needs --data-dir" in capsys.readouterr().err


@pytest.mark.deadline(30)
async def test_the_admin_commands_on_a_running_brokers_store_say_so_and_what_to_do(
    tmp_path: Path,
) -> None:
    """Issue 32: they said "database is locked"; now one line says a broker runs there."""
    admin = [*_command(), "broker", "--data-dir", str(tmp_path)]
    async with _broker(tmp_path):
        with trio.fail_after(20):
            listed = await trio.run_process(
                [*admin, "--list-subscriptions"], capture_stderr=True, check=False
            )
            removed = await trio.run_process(
                [*admin, "--remove-subscription", "app", "daily"], capture_stderr=True, check=False
            )
    for refused, flag in ((listed, "--list-subscriptions"), (removed, "--remove-subscription")):
        err = refused.stderr.decode()
        assert refused.returncode == 1, err
        assert err.count("\n") == 1, err  # one line
        assert f"a broker is running on the data dir {str(tmp_path)!r}" in err, err
        assert f"stop it, then run {flag} again" in err
        assert "database is locked" not in err
        assert "Traceback" not in err
    assert "Broker.depths()" in listed.stderr.decode()
    assert (
        "CONNECT with client-id 'app' and send UNSUBSCRIBE with activemq.subscriptionName 'daily'"
        in removed.stderr.decode()
    )


@pytest.mark.deadline(40)
async def test_the_duplicate_window_survives_sigkill(tmp_path: Path) -> None:
    on = ("--duplicate-window", "10000")  # (off by default)
    first = {"destination": "/queue/d", "bridge-id": "order-7", "receipt": "1"}
    async with _broker(tmp_path, *on) as (process, port, _):
        with trio.fail_after(10):
            async with open_raw_client(port) as client:
                await client.send("SEND", first, b"first")
                await client.receipt("1")
                # Consumed: the message's row is gone, its id stays.
                await client.subscribe("/queue/d", ack="client-individual")
                message = await client.expect("MESSAGE")
                await client.send("ACK", {"id": message.headers["ack"]})
                # (an ACK's RECEIPT does not wait for the disk; a SEND's does, and its
                # commit carries the removal the ACK made before it)
                await client.send("SEND", {"destination": "/queue/other", "receipt": "2"})
                await client.receipt("2")
        process.send_signal(signal.SIGKILL)
        await process.wait()
    async with _broker(tmp_path, *on) as (process, port, _):
        with trio.fail_after(10):
            async with open_raw_client(port) as client:
                await client.send("SEND", {**first, "receipt": "3"}, b"again")  # (a resend)
                await client.receipt("3")
                await client.send("SEND", {"destination": "/queue/d", "receipt": "4"}, b"next")
                await client.receipt("4")
                await client.subscribe("/queue/d")
                assert (await client.expect("MESSAGE")).body == b"next"


def test_a_negative_duplicate_window_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["broker", "--listen", "127.0.0.1:0", "--duplicate-window", "-1"]) == 2
    assert "duplicate_window" in capsys.readouterr().err


@pytest.mark.deadline(40)
async def test_the_duplicate_window_is_off_unless_asked_for(tmp_path: Path) -> None:
    # A library user's own resend of a bridged message, with another body, is delivered.
    headers = {"destination": "/queue/d", "bridge-id": "order-1"}
    async with _broker(tmp_path) as (_, port, _):
        with trio.fail_after(10):
            async with open_raw_client(port) as client:
                await client.send("SEND", {**headers, "receipt": "1"}, b"first")
                await client.receipt("1")
                await client.send("SEND", {**headers, "receipt": "2"}, b"second (different)")
                await client.receipt("2")
                await client.subscribe("/queue/d")
                bodies = [(await client.expect("MESSAGE")).body for _ in range(2)]
    assert bodies == [b"first", b"second (different)"]
