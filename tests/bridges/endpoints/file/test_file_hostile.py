"""The file family against planted links, FIFOs, odd names and oversized lines (issue 11 §2, §3).

Whatever an attacker with write access to the bridge's directories plants
there (a symbolic link, a FIFO, a file swapped in between the scan and the
read), nothing outside those directories is read, written, moved or
truncated, and nothing blocks the route.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from bridges import Context, Envelope, Message, MessageRejected, RetryPolicy, Route
from bridges.endpoints.file import FileSink, FileSinkConfig, FileSource, FileSourceConfig
from bridges.endpoints.file.source import _DirectoryReceiver
from bridges.endpoints.file.tail import JsonlReceiver
from bridges.testing import FakeSink, wait_until


def ctx(tmp_path: Path) -> Context:
    return Context(route="hostile", base_dir=tmp_path)


def put(path: Path, data: bytes, mtime_ns: int) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.utime(temporary, ns=(mtime_ns, mtime_ns))
    temporary.rename(path)


@contextlib.contextmanager
def swap_after_scan(monkeypatch: pytest.MonkeyPatch, swap: Callable[[], None]) -> Iterator[None]:
    """Run ``swap`` once, right after the first directory scan: the race an attacker wins."""
    original = _DirectoryReceiver._scan
    swapped: list[bool] = []

    def scan(self: _DirectoryReceiver, taken: frozenset[str]) -> list[tuple[int, str]]:
        found = original(self, taken)
        if found and not swapped:
            swapped.append(True)
            swap()
        return found

    monkeypatch.setattr(_DirectoryReceiver, "_scan", scan)
    yield


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


def unblock_fifo(path: Path) -> None:
    """Open the FIFO's other end, so a reader stuck in open() (the bug) gets free."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


async def receive_within(receiver: Any, seconds: float = 5.0) -> Envelope:
    with trio.fail_after(seconds):
        envelope: Envelope = await receiver.receive()
        return envelope


# -- §2: the directory source -------------------------------------------------------


@pytest.mark.deadline(15)
async def test_a_link_swapped_in_after_the_scan_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:x:0:0")
    inbox = tmp_path / "in"
    inbox.mkdir()
    put(inbox / "a.txt", b"innocent", 1_000_000_000)
    put(inbox / "b.txt", b"second", 2_000_000_000)

    def plant() -> None:
        (inbox / "a.txt").unlink()
        (inbox / "a.txt").symlink_to(secret)

    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    with swap_after_scan(monkeypatch, plant), caplog.at_level(logging.ERROR, "bridges.file"):
        async with source.open() as receiver:
            envelope = await receive_within(receiver)
            assert envelope.message.body == b"second"
            with trio.move_on_after(0.2):
                extra = await receiver.receive()
                assert extra.message.body != b"root:x:0:0"
    assert "a.txt" in caplog.text
    assert (inbox / "a.txt").is_symlink()  # left where it is
    assert secret.read_bytes() == b"root:x:0:0"


@pytest.mark.deadline(15)
async def test_a_fifo_swapped_in_after_the_scan_never_blocks_the_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    put(inbox / "a.txt", b"first", 1_000_000_000)
    put(inbox / "b.txt", b"second", 2_000_000_000)
    fifo = inbox / "a.txt"

    def plant() -> None:
        fifo.unlink()
        os.mkfifo(fifo)

    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    try:
        with swap_after_scan(monkeypatch, plant), caplog.at_level(logging.ERROR, "bridges.file"):
            async with source.open() as receiver:
                envelope = await receive_within(receiver, 3.0)
                assert envelope.message.body == b"second"
    finally:
        unblock_fifo(fifo)
    assert "a.txt" in caplog.text
    assert "regular file" in caplog.text


@pytest.mark.deadline(15)
async def test_a_file_that_grew_past_max_bytes_after_the_scan_is_refused_on_the_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    put(inbox / "a.txt", b"small", 1_000_000_000)
    put(inbox / "b.txt", b"second", 2_000_000_000)

    def grow() -> None:
        with open(inbox / "a.txt", "ab") as file:
            file.write(b"x" * 200)
        os.utime(inbox / "a.txt", ns=(1_000_000_000, 1_000_000_000))

    config = FileSourceConfig("in", settle=0, poll_interval=0.01, max_bytes=100)
    source = FileSource(config, ctx(tmp_path))
    with swap_after_scan(monkeypatch, grow), caplog.at_level(logging.ERROR, "bridges.file"):
        async with source.open() as receiver:
            envelope = await receive_within(receiver)
    assert envelope.message.body == b"second"
    assert "max_bytes = 100" in caplog.text
    assert (inbox / "a.txt").exists()


async def test_a_link_or_fifo_planted_before_the_scan_is_skipped(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"secret")
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "link").symlink_to(secret)
    os.mkfifo(inbox / "fifo")
    put(inbox / "real", b"real", 1_000_000_000)
    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    async with source.open() as receiver:
        envelope = await receive_within(receiver)
        assert envelope.message.body == b"real"
        with trio.move_on_after(0.2) as scope:
            await receiver.receive()
        assert scope.cancelled_caught


async def test_a_done_dir_swapped_for_a_link_moves_nothing_outside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    inbox = tmp_path / "in"
    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    async with source.open() as receiver:
        (inbox / "done").rmdir()
        (inbox / "done").symlink_to(outside)
        put(inbox / "a.txt", b"data", 1_000_000_000)
        envelope = await receive_within(receiver)
        with caplog.at_level(logging.ERROR, "bridges.file"):
            await envelope.ack()
    assert list(outside.iterdir()) == []
    assert (inbox / "a.txt").read_bytes() == b"data"  # left where it was
    assert "done" in caplog.text


async def test_a_link_planted_as_the_done_name_is_neither_followed_nor_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    inbox = tmp_path / "in"
    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    async with source.open() as receiver:
        (inbox / "done" / "a.txt").symlink_to(victim)
        put(inbox / "a.txt", b"data", 1_000_000_000)
        envelope = await receive_within(receiver)
        with caplog.at_level(logging.WARNING, "bridges.file"):
            await envelope.ack()
    assert victim.read_bytes() == b"precious"
    assert (inbox / "done" / "a.txt").readlink() == victim  # left as planted
    kept = inbox / "done" / "a.txt@1000000000"
    assert kept.read_bytes() == b"data"
    assert not kept.is_symlink()
    assert not (inbox / "a.txt").exists()
    assert str(kept) in caplog.text


async def test_names_planted_at_every_suffix_are_skipped_not_replaced(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    async with source.open() as receiver:
        done = inbox / "done"
        (done / "a.txt").write_bytes(b"earlier")
        (done / "a.txt@1000000000").symlink_to(tmp_path / "nowhere")
        os.mkfifo(done / "a.txt@1000000000-2")
        put(inbox / "a.txt", b"data", 1_000_000_000)
        envelope = await receive_within(receiver)
        await envelope.ack()
    assert (done / "a.txt").read_bytes() == b"earlier"
    assert (done / "a.txt@1000000000").is_symlink()
    assert not (tmp_path / "nowhere").exists()
    assert (done / "a.txt@1000000000-3").read_bytes() == b"data"


# -- §2: the sink and the position file ---------------------------------------------------


async def test_a_planted_part_link_is_neither_truncated_nor_renamed_on_recovery(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    victim = tmp_path / "victim.log"
    victim.write_bytes(b"line one\nno newline yet")
    out = tmp_path / "out"
    out.mkdir()
    planted = out / "messages-20260101T000000.000000Z.jsonl.part"
    planted.symlink_to(victim)
    sink = FileSink(FileSinkConfig("out"), ctx(tmp_path))
    with caplog.at_level(logging.WARNING, "bridges.file"):
        async with sink.open() as writer:
            await writer.write([Message(b"x", {}, "1")])
    assert victim.read_bytes() == b"line one\nno newline yet"
    assert planted.is_symlink()
    assert "link" in caplog.text


async def test_sink_temp_names_are_unpredictable_and_links_there_are_not_followed(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    out = tmp_path / "out"
    out.mkdir()
    for guess in (".a.tmp", ".a.part", "a.tmp", ".a"):
        (out / guess).symlink_to(victim)
    sink = FileSink(FileSinkConfig("out", format="files", name="{id}"), ctx(tmp_path))
    async with sink.open() as writer:
        await writer.write([Message(b"body", {}, "a")])
    assert victim.read_bytes() == b"precious"
    assert (out / "a").read_bytes() == b"body"
    assert sorted(p.name for p in out.iterdir()) == [".a", ".a.part", ".a.tmp", "a", "a.tmp"]


async def test_a_position_file_swapped_for_a_link_is_refused_and_never_written_through(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b'{"inode": null, "offset": 0}')
    log_file = tmp_path / "app.jsonl"
    log_file.write_bytes(b"one\ntwo\n")
    position = tmp_path / "app.jsonl.position"
    position.symlink_to(victim)
    source = FileSource(FileSourceConfig("app.jsonl", mode="jsonl"), ctx(tmp_path))
    with caplog.at_level(logging.ERROR), pytest.raises(OSError, match="link"):
        async with source.open():
            pass
    assert victim.read_bytes() == b'{"inode": null, "offset": 0}'


async def test_the_position_file_is_written_without_following_a_planted_temp(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    log_file = tmp_path / "app.jsonl"
    log_file.write_bytes(b"one\ntwo\n")
    (tmp_path / ".app.jsonl.position.tmp").symlink_to(victim)
    source = FileSource(
        FileSourceConfig("app.jsonl", mode="jsonl", poll_interval=0.01), ctx(tmp_path)
    )
    async with source.open() as receiver:
        for _ in range(2):
            envelope = await receive_within(receiver)
            await envelope.ack()
    assert victim.read_bytes() == b"precious"
    assert b'"offset": 8' in (tmp_path / "app.jsonl.position").read_bytes()


async def test_a_tailed_file_swapped_for_a_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "app.jsonl"
    os.mkfifo(fifo)
    source = FileSource(
        FileSourceConfig("app.jsonl", mode="jsonl", poll_interval=0.01), ctx(tmp_path)
    )
    try:
        async with source.open() as receiver:
            with trio.move_on_after(0.5) as scope:
                await receiver.receive()
            assert scope.cancelled_caught  # (cancelled in time: nothing blocked in a thread)
    finally:
        unblock_fifo(fifo)


# -- §3: file sink names and conflicts -----------------------------------------------------


async def test_a_name_over_255_utf8_bytes_is_rejected_alone(tmp_path: Path) -> None:
    sink = FileSink(FileSinkConfig("out", format="files", name="{id}"), ctx(tmp_path))
    too_long = "é" * 128  # 256 bytes in UTF-8, 128 characters
    longest = "é" * 127 + "x"  # 255 bytes
    async with sink.open() as writer:
        batch = [Message(b"1", {}, "ok"), Message(b"2", {}, too_long), Message(b"3", {}, longest)]
        with pytest.raises(MessageRejected) as caught:
            await writer.write(batch)
        assert caught.value.indices == (1,)
        assert "255" in caught.value.reason
        await writer.write([batch[0], batch[2]])
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == sorted(["ok", longest])
    assert (tmp_path / "out" / longest).read_bytes() == b"3"


async def test_the_default_conflict_fails_the_message_and_keeps_the_existing_file(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.txt").write_bytes(b"older, someone else's")
    sink = FileSink(FileSinkConfig("out", format="files", name="{id}"), ctx(tmp_path))
    async with sink.open() as writer:
        with pytest.raises(MessageRejected) as caught:
            await writer.write([Message(b"new", {}, "report.txt"), Message(b"b", {}, "b.txt")])
        assert caught.value.indices == (0,)
        assert "report.txt" in caught.value.reason
        assert "conflict" in caught.value.reason
        await writer.write([Message(b"b", {}, "b.txt")])
        # A redelivered copy writing the same content again is not a conflict.
        await writer.write([Message(b"b", {}, "b.txt")])
        # Two different messages with one name in a batch: the second one fails.
        with pytest.raises(MessageRejected) as caught:
            await writer.write([Message(b"c1", {}, "c"), Message(b"c2", {}, "c")])
        assert caught.value.indices == (1,)
    assert (out / "report.txt").read_bytes() == b"older, someone else's"
    assert (out / "c").read_bytes() == b"c1"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    ("conflict", "expected"),
    [
        ("replace", {"a.txt": b"new"}),
        ("ignore", {"a.txt": b"old"}),
        ("rename", {"a.txt": b"old", "a-1.txt": b"new", "a-2.txt": b"newer"}),
    ],
)
async def test_conflict_strategies(
    tmp_path: Path, conflict: Any, expected: dict[str, bytes]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_bytes(b"old")
    sink = FileSink(
        FileSinkConfig("out", format="files", name="{id}", conflict=conflict), ctx(tmp_path)
    )
    async with sink.open() as writer:
        await writer.write([Message(b"new", {}, "a.txt")])
        await writer.write([Message(b"new", {}, "a.txt")])  # a redelivery: nothing more
        if conflict == "rename":
            await writer.write([Message(b"newer", {}, "a.txt")])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == expected


async def test_replace_replaces_a_planted_link_never_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a").symlink_to(victim)
    (out / "b").symlink_to(victim)
    replace = FileSink(FileSinkConfig("out", format="files", conflict="replace"), ctx(tmp_path))
    async with replace.open() as writer:
        await writer.write([Message(b"new", {}, "a")])
    fail = FileSink(FileSinkConfig("out", format="files"), ctx(tmp_path))
    async with fail.open() as writer:
        with pytest.raises(MessageRejected):
            await writer.write([Message(b"new", {}, "b")])
    assert victim.read_bytes() == b"precious"
    assert (out / "a").read_bytes() == b"new"
    assert not (out / "a").is_symlink()
    assert (out / "b").is_symlink()


# -- §3: the JSON-lines source's max_line ------------------------------------------------------


async def test_a_line_over_max_line_is_set_apart_with_bounded_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_file = tmp_path / "app.jsonl"
    log_file.write_bytes(b"first\n" + b"x" * 100_000 + b"\nsecond\n")
    config = FileSourceConfig("app.jsonl", mode="jsonl", poll_interval=0.01, max_line=1000)
    source = FileSource(config, ctx(tmp_path))
    with caplog.at_level(logging.WARNING, "bridges.file"):
        async with source.open() as receiver:
            first, big, second = [await receive_within(receiver) for _ in range(3)]
            assert (first.message.body, second.message.body) == (b"first", b"second")
            assert (first.error, second.error) == (None, None)
            assert big.message.body == b"x" * 1000  # its start only: for the dead letter
            assert "a line of 100001 bytes, more than max_line = 1000" in str(big.error)
            for envelope in (first, big, second):
                await envelope.ack()
            # An unterminated line growing without end: memory stays bounded.
            for _ in range(40):
                append(log_file, b"y" * 100_000)
            with trio.move_on_after(0.5):
                await receiver.receive()
            assert isinstance(receiver, JsonlReceiver)
            held = len(receiver._buffer) + sum(len(line) for _, _, line in receiver._lines)
            assert held <= 2 * 1000 + 256 * 1024
            append(log_file, b"\nthird\n")
            huge = await receive_within(receiver)
            assert huge.message.body == b"y" * 1000
            assert "a line of 4000001 bytes" in str(huge.error)
            third = await receive_within(receiver)
            assert third.message.body == b"third"
            await huge.nack(huge.error)  # no dead-letter sink: skipped, never handed out again
            await third.ack()
            with trio.move_on_after(0.2) as scope:
                await receiver.receive()
            assert scope.cancelled_caught
    assert "max_line = 1000" in caplog.text
    assert "100001 bytes" in caplog.text  # the skipped line's length, with its newline


@pytest.mark.parametrize("with_dead_letter", [True, False])
async def test_a_line_over_max_line_goes_to_the_dead_letter_sink_and_the_route_moves_on(
    tmp_path: Path, with_dead_letter: bool
) -> None:
    log_file = tmp_path / "app.jsonl"
    log_file.write_bytes(b"a\n" + b"x" * 5000 + b"\nb\n")
    config = FileSourceConfig("app.jsonl", mode="jsonl", poll_interval=0.01, max_line=1000)
    sink, dead = FakeSink(), FakeSink()
    route = Route(
        "r",
        FileSource(config, ctx(tmp_path)),
        sink,
        dead_letter=dead if with_dead_letter else None,
        batch_time=0,
        retry=RetryPolicy(initial=0.01),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(route.run)
        await wait_until(lambda: route.stats.received == 3 and route.in_flight == 0)
        route.stop()
    assert [m.body for batch in sink.batches for m in batch] == [b"a", b"b"]
    position = (tmp_path / "app.jsonl.position").read_bytes()
    assert f'"offset": {2 + 5001 + 2}'.encode() in position  # nothing left behind, no repeat
    if with_dead_letter:
        [[letter]] = dead.batches
        assert letter.body == b"x" * 1000  # the line's start, never more than max_line
        assert letter.headers["bridge-stage"] == "source"
        assert "a line of 5001 bytes, more than max_line = 1000" in letter.headers["bridge-error"]
        assert letter.headers["bridge-source"].endswith("app.jsonl:2")
    else:
        assert route.stats.nacked == 1


@pytest.mark.parametrize("conflict", ["fail", "replace", "rename"])
async def test_a_directory_in_the_way_is_a_rejection_not_a_retry(
    tmp_path: Path, conflict: Any
) -> None:
    out = tmp_path / "out"
    (out / "d").mkdir(parents=True)
    (out / "d" / "keep").write_bytes(b"keep")
    sink = FileSink(FileSinkConfig("out", format="files", conflict=conflict), ctx(tmp_path))
    async with sink.open() as writer:
        if conflict == "rename":
            await writer.write([Message(b"x", {}, "d")])
        else:
            with pytest.raises(MessageRejected) as caught:
                await writer.write([Message(b"x", {}, "d"), Message(b"y", {}, "e")])
            assert caught.value.indices == (0,)
    assert (out / "d" / "keep").read_bytes() == b"keep"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    if conflict == "rename":
        assert (out / "d-1").read_bytes() == b"x"
    else:
        assert (out / "e").read_bytes() == b"y"


async def test_a_replaced_file_does_not_inherit_the_old_ones_unfinished_line(
    tmp_path: Path,
) -> None:
    log_file = tmp_path / "app.jsonl"
    log_file.write_bytes(b"one\nunfinished")
    config = FileSourceConfig("app.jsonl", mode="jsonl", poll_interval=0.01)
    async with FileSource(config, ctx(tmp_path)).open() as receiver:
        one = await receive_within(receiver)
        assert one.message.body == b"one"
        await one.ack()
        with trio.move_on_after(0.1):
            await receiver.receive()  # reads the unfinished line into its buffer
        (tmp_path / "new.jsonl").write_bytes(b"fresh\n")
        (tmp_path / "new.jsonl").rename(log_file)  # rotated: a new inode
        fresh = await receive_within(receiver)
        assert fresh.message.body == b"fresh"
        assert fresh.message.id == "hostile/app.jsonl#1:0"  # not the old first line's id
        assert one.message.id == "hostile/app.jsonl:0"
