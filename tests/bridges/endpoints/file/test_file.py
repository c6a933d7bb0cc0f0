"""The file source (directory, JSON lines) and the file sink (JSON lines, a file per message)."""

from __future__ import annotations

import base64
import errno
import itertools
import json
import logging
import os
import threading
from functools import partial
from pathlib import Path
from typing import Any, Literal

import pytest
import trio

from bridges import Context, Envelope, Message, MessageRejected, RetryPolicy, Route
from bridges import _fs as fs
from bridges.endpoints.file import FileSink, FileSinkConfig, FileSource, FileSourceConfig
from bridges.endpoints.file._records import encode_record
from bridges.endpoints.file.source import _DirectoryReceiver, done_names
from bridges.testing import FakeSource, messages


def ctx(tmp_path: Path) -> Context:
    return Context(route="f", base_dir=tmp_path)


def put(path: Path, data: bytes, mtime_ns: int | None = None) -> None:
    """Write then rename into place, as the source expects of writers."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    if mtime_ns is not None:
        os.utime(temporary, ns=(mtime_ns, mtime_ns))
    temporary.rename(path)


async def take(receiver: Any, count: int) -> list[Envelope]:
    return [await receiver.receive() for _ in range(count)]


# -- directory source ----------------------------------------------------------------


async def test_directory_source_takes_complete_files_oldest_first(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    put(inbox / "b.txt", b"second", 2_000_000_000)
    put(inbox / "a.txt", b"first", 1_000_000_000)
    (inbox / ".hidden").write_bytes(b"x")
    (inbox / "c.part").write_bytes(b"x")
    (inbox / "d.tmp").write_bytes(b"x")
    source = FileSource(FileSourceConfig("inbox", settle=0, poll_interval=0.01), ctx(tmp_path))
    async with source.open() as receiver:
        first, second = await take(receiver, 2)
        assert (first.message.body, second.message.body) == (b"first", b"second")
        assert first.message.headers == {"file-name": "a.txt"}
        assert first.message.id == "f/a.txt@1000000000"  # ROUTE/NAME@MTIME_NS
        with trio.move_on_after(0.1) as scope:
            await receiver.receive()  # nothing else is complete
        assert scope.cancelled_caught
        await first.ack()
        await second.nack(OSError("sink down"))
        assert (inbox / "done" / "a.txt").read_bytes() == b"first"
        assert not (inbox / "a.txt").exists()
        again = await receiver.receive()  # a nacked file is read again
        assert again.message.id == second.message.id


async def test_a_later_file_of_a_done_name_is_kept_beside_it_under_its_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = tmp_path / "in"
    done = inbox / "done"
    first, second, third = b"first \x00 body", b"second, other bytes", b"first \x00 body"
    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    with caplog.at_level(logging.WARNING, "bridges.file"):
        async with source.open() as receiver:
            # the third: same name and mtime, so the same id (a copy made with cp -p)
            for body, mtime_ns in ((first, 1), (second, 2), (third, 2)):
                put(inbox / "report.csv", body, mtime_ns * 1_000_000_000)
                await (await receiver.receive()).ack()
    assert sorted(p.name for p in inbox.iterdir()) == ["done"]
    assert (done / "report.csv").read_bytes() == first
    assert (done / "report.csv@2000000000").read_bytes() == second
    assert (done / "report.csv@2000000000-2").read_bytes() == third
    assert len(list(done.iterdir())) == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    taken = f"{done / 'report.csv'} is taken (an earlier file of that name)"
    assert warnings == [
        f"{taken}; {inbox / 'report.csv'} is kept as {done / 'report.csv@2000000000'}",
        f"{taken}; {inbox / 'report.csv'} is kept as {done / 'report.csv@2000000000-2'}",
    ]


async def test_a_done_name_that_is_already_this_very_file_is_no_conflict(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hard link of the inbox file at its done name: the move only removes the inbox name."""
    inbox = tmp_path / "in"
    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    async with source.open() as receiver:
        put(inbox / "a.txt", b"data", 1_000_000_000)
        os.link(inbox / "a.txt", inbox / "done" / "a.txt")
        envelope = await receiver.receive()
        with caplog.at_level(logging.WARNING, "bridges.file"):
            await envelope.ack()
    assert sorted(p.name for p in (inbox / "done").iterdir()) == ["a.txt"]
    assert (inbox / "done" / "a.txt").read_bytes() == b"data"
    assert not (inbox / "a.txt").exists()
    assert "is taken" not in caplog.text


@pytest.mark.parametrize("after", ["move", "delete"])
async def test_a_file_replaced_after_it_was_read_is_read_in_its_turn_not_done_with(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, after: Literal["move", "delete"]
) -> None:
    inbox = tmp_path / "in"
    config = FileSourceConfig("in", settle=0, poll_interval=0.01, after=after)
    source = FileSource(config, ctx(tmp_path))
    with caplog.at_level(logging.WARNING, "bridges.file"):
        async with source.open() as receiver:
            put(inbox / "status.json", b"v1", 1_000_000_000)
            first = await receiver.receive()
            put(inbox / "status.json", b"v2", 2_000_000_000)  # a writer renames v2 over it
            await first.ack()
            assert (inbox / "status.json").read_bytes() == b"v2"  # not moved: never read
            second = await receiver.receive()
            assert (second.message.body, second.message.id) == (b"v2", "f/status.json@2000000000")
            (inbox / "status.json").write_bytes(b"v3")  # rewritten in place: same inode
            os.utime(inbox / "status.json", ns=(3_000_000_000, 3_000_000_000))
            await second.ack()
            third = await receiver.receive()
            assert third.message.body == b"v3"
            await third.ack()
    assert not (inbox / "status.json").exists()
    if after == "move":
        assert [p.name for p in (inbox / "done").iterdir()] == ["status.json"]
        assert (inbox / "done" / "status.json").read_bytes() == b"v3"
    else:
        assert not (inbox / "done").exists()
    changed = f"{inbox / 'status.json'} changed after it was read; the new file stays to be read"
    assert [r.getMessage() for r in caplog.records] == [
        f"{changed}, as {inbox / 'status.json'}"
    ] * 2


async def test_what_a_stop_left_under_a_hidden_taken_name_is_read_again_or_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = tmp_path / "in"
    (inbox / "done").mkdir(parents=True)
    put(inbox / "done" / "moved.txt", b"delivered and moved", 1_000_000_000)
    os.link(inbox / "done" / "moved.txt", inbox / ".bridge-taken-0123abcd-moved.txt")
    put(inbox / ".bridge-taken-89abcdef-a.txt", b"not yet deleted", 2_000_000_000)
    put(inbox / ".bridge-taken-fedcba98", b"a long name's", 3_000_000_000)
    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    with caplog.at_level(logging.WARNING, "bridges.file"):
        async with source.open() as receiver:
            bodies = {
                e.message.headers["file-name"]: e.message.body for e in await take(receiver, 2)
            }
    assert bodies == {"a.txt": b"not yet deleted", "recovered-fedcba98": b"a long name's"}
    assert sorted(p.name for p in (inbox / "done").iterdir()) == ["moved.txt"]
    assert not [p for p in inbox.iterdir() if p.name.startswith(".")]
    assert f"{inbox / '.bridge-taken-89abcdef-a.txt'} was left by a stop" in caplog.text


def test_a_taken_name_keeps_the_name_when_it_fits(tmp_path: Path) -> None:
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ("a.txt", "é" * 120):  # 240 bytes: the name no longer fits beside the prefix
            (tmp_path / name).write_bytes(b"x")
            hidden, info = fs.take(dir_fd, name)
            assert hidden.startswith(".bridge-taken-")
            assert info.st_size == 1
            assert fs.taken_name(hidden) == (name if name == "a.txt" else None)
            assert not (tmp_path / name).exists()
            assert (tmp_path / hidden).read_bytes() == b"x"
    finally:
        os.close(dir_fd)


async def test_without_hard_links_done_names_are_still_never_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    inbox = tmp_path / "in"
    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    async with source.open() as receiver:
        monkeypatch.setattr(os, "link", no_links)  # a file system without hard links
        for body, mtime_ns in ((b"one", 1_000_000_000), (b"two", 2_000_000_000)):
            put(inbox / "a.txt", body, mtime_ns)
            await (await receiver.receive()).ack()
        put(inbox / "b.txt", b"read", 3_000_000_000)
        envelope = await receiver.receive()
        put(inbox / "b.txt", b"written after", 4_000_000_000)
        await envelope.ack()
        assert (await receiver.receive()).message.body == b"written after"
    assert (inbox / "done" / "a.txt").read_bytes() == b"one"
    assert (inbox / "done" / "a.txt@2000000000").read_bytes() == b"two"
    assert not (inbox / "done" / "b.txt").exists()
    assert (inbox / "b.txt").read_bytes() == b"written after"


def test_done_names_keep_the_suffix_within_255_bytes() -> None:
    long = "é" * 125 + ".csv"  # 254 bytes: a name the file system allows
    names = list(itertools.islice(done_names(long, 1_764_000_000_123_456_789), 3))
    assert names[0] == long
    assert names[1].endswith("@1764000000123456789")
    assert names[2].endswith("@1764000000123456789-2")
    for name in names[1:]:
        assert len(os.fsencode(name)) <= 255
        assert name.startswith("é" * 100)
        name.encode()  # cut between characters, never inside one


async def test_a_file_still_being_written_waits_until_it_settles(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    source = FileSource(FileSourceConfig("in", settle=0.3, poll_interval=0.02), ctx(tmp_path))
    async with source.open() as receiver:
        (inbox / "slow.txt").write_bytes(b"partial")
        start = trio.current_time()
        envelope = await receiver.receive()
        assert trio.current_time() - start >= 0.25
        assert envelope.message.body == b"partial"


async def test_delete_after_ack_and_unreadable_files_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = FileSourceConfig("in", settle=0, after="delete", poll_interval=0.01, max_bytes=10)
    source = FileSource(config, ctx(tmp_path))
    async with source.open() as receiver:
        put(tmp_path / "in" / "big", b"x" * 11)
        put(tmp_path / "in" / "ok", b"fine")
        envelope = await receiver.receive()
        assert envelope.message.body == b"fine"
        await envelope.ack()
    assert sorted(p.name for p in (tmp_path / "in").iterdir()) == ["big"]
    assert "more than max_bytes = 10; it stays where it is" in caplog.text


async def test_a_read_error_is_logged_and_the_file_left_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    source = FileSource(FileSourceConfig("in", settle=0, poll_interval=0.01), ctx(tmp_path))
    async with source.open() as receiver:
        put(tmp_path / "in" / "locked", b"secret")
        put(tmp_path / "in" / "open", b"ok", 9_000_000_000_000_000_000)
        assert isinstance(receiver, _DirectoryReceiver)
        real = receiver._read

        def read(name: str) -> tuple[bytes, os.stat_result]:
            if name == "locked":
                raise PermissionError(errno.EACCES, "Permission denied")
            return real(name)

        monkeypatch.setattr(receiver, "_read", read)
        assert (await receiver.receive()).message.body == b"ok"
    assert (tmp_path / "in" / "locked").exists()
    assert "cannot read" in caplog.text
    assert "locked (Permission denied)" in caplog.text


# -- JSON-lines source ----------------------------------------------------------------


async def test_jsonl_source_persists_its_position_only_after_acks_in_order(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"one\ntwo\nthree\npart")
    config = FileSourceConfig("events.jsonl", mode="jsonl", poll_interval=0.01)
    source = FileSource(config, ctx(tmp_path))
    position = tmp_path / "events.jsonl.position"
    async with source.open() as receiver:
        one, two, three = await take(receiver, 3)
        assert [e.message.body for e in (one, two, three)] == [b"one", b"two", b"three"]
        assert [e.message.id for e in (one, two)] == ["f/events.jsonl:0", "f/events.jsonl:4"]
        await two.ack()
        await trio.sleep(0.05)
        assert json.loads(position.read_text())["offset"] == 0  # line one is not acked yet
        await one.ack()
        await trio.sleep(0.05)
        assert json.loads(position.read_text())["offset"] == 8
        with log.open("ab") as file:
            file.write(b"ial\n")
        four = await receiver.receive()
        assert four.message.body == b"partial"
        await four.ack()
    assert json.loads(position.read_text())["offset"] == 8  # three is not acked
    async with source.open() as receiver:  # a restart resumes after the acked prefix
        again = await receiver.receive()
        assert again.message.body == b"three"
        await again.nack(OSError("x"))
        assert (await receiver.receive()).message.id == again.message.id


async def test_a_jsonl_ack_returns_once_its_position_is_on_disk_one_save_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A restart repeats at most the in-flight window only if an ack frees its
    # slot after the save that holds it: a slow save must hold the ack back.
    from bridges import _positions

    (tmp_path / "events.jsonl").write_bytes(b"".join(b"line%d\n" % i for i in range(6)))
    config = FileSourceConfig("events.jsonl", mode="jsonl", poll_interval=0.01)
    position = tmp_path / "events.jsonl.position"
    gate = threading.Event()
    saves: list[int] = []
    real_write = _positions._write

    def slow_write(file: Path, data: bytes) -> None:
        gate.wait(10)
        saves.append(json.loads(data)["offset"])
        real_write(file, data)

    monkeypatch.setattr(_positions, "_write", slow_write)
    async with FileSource(config, ctx(tmp_path)).open() as receiver:
        first, *run = await take(receiver, 6)
        done: list[str] = []

        async def settle(name: str, call: Any) -> None:
            await call()
            done.append(name)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(settle, "one", first.ack)
            await trio.sleep(0.1)
            assert done == []  # the save is still running
            assert not position.exists()
            gate.set()
            await trio.sleep(0.2)
            assert done == ["one"]
            assert saves[-1] == 6  # (after the start's own save of offset 0, if it was due)
            assert json.loads(position.read_text())["offset"] == 6
            gate.clear()
            before = len(saves)
            nursery.start_soon(settle, "run", lambda: run[0].ack_all(run))
            await trio.sleep(0.1)
            assert done == ["one"]
            gate.set()
        assert done == ["one", "run"]
        assert saves[before:] == [36]  # the whole run: one save
        assert json.loads(position.read_text())["offset"] == 36


async def test_jsonl_envelope_lines_read_what_the_sink_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = [
        encode_record(Message(b"text", {"a": "1"}, "x1", "/queue/q")),
        b"{broken\n",
        encode_record(Message(b"\xff\x00", {}, "")),
    ]
    (tmp_path / "in.jsonl").write_bytes(b"".join(records))
    config = FileSourceConfig("in.jsonl", mode="jsonl", lines="envelope", poll_interval=0.01)
    async with FileSource(config, ctx(tmp_path)).open() as receiver:
        first, broken, second = await take(receiver, 3)
    assert first.message == Message(b"text", {"a": "1"}, "x1", "/queue/q")
    assert first.error is None
    # A line that is not a record is handed out for the dead-letter sink, with why.
    assert broken.message.body == b"{broken"
    assert "not a record" in str(broken.error)
    assert second.message.body == b"\xff\x00"
    assert second.message.id.startswith("f/in.jsonl:")
    assert "not a record" in caplog.text


# -- file sink ----------------------------------------------------------------------


def lines(directory: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted(directory.glob("messages-*.jsonl*")):
        found.extend(json.loads(line) for line in path.read_text().splitlines())
    return found


async def test_jsonl_sink_writes_fsynced_lines_then_renames_on_close(tmp_path: Path) -> None:
    sink = FileSink(FileSinkConfig("out"), ctx(tmp_path))
    async with sink.open() as writer:
        await writer.write([Message(b"hi", {"h": "1"}, "a", "/queue/x"), Message(b"\xff", {}, "b")])
        [part] = (tmp_path / "out").iterdir()
        assert part.name.endswith(".jsonl.part")
        assert lines(tmp_path / "out") == [
            {"id": "a", "destination": "/queue/x", "headers": {"h": "1"}, "body": "hi"},
            {"id": "b", "headers": {}, "body_base64": base64.b64encode(b"\xff").decode()},
        ]
    [final] = (tmp_path / "out").iterdir()
    assert final.name.startswith("messages-")
    assert final.name.endswith(".jsonl")


async def test_jsonl_sink_makes_its_file_calls_in_a_thread_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridges import blocking
    from bridges._blocking import MAX_THREADS
    from bridges.endpoints.file.sink import _JsonlWriter

    threads: list[int] = []
    append, finish = _JsonlWriter._append, _JsonlWriter.finish

    def recorded_append(self: _JsonlWriter, data: bytes) -> None:
        threads.append(threading.get_ident())
        append(self, data)

    def recorded_finish(self: _JsonlWriter) -> None:
        threads.append(threading.get_ident())
        finish(self)

    monkeypatch.setattr(_JsonlWriter, "_append", recorded_append)
    monkeypatch.setattr(_JsonlWriter, "finish", recorded_finish)
    hung = threading.Event()
    config = FileSinkConfig("out", rotate_seconds=0.3)
    try:
        async with trio.open_nursery() as nursery:
            # Another route's blocking calls take every thread of the shared limiter
            # (a hung disk): this sink's appends, its rotation by age and its close go
            # on in its own thread.
            for _ in range(MAX_THREADS):
                nursery.start_soon(partial(blocking, hung.wait, what="hang", abandon=True))
            await trio.sleep(0.1)
            with trio.fail_after(5):
                async with FileSink(config, ctx(tmp_path)).open() as writer:
                    for n in range(2):
                        await writer.write([Message(b"%d" % n, {}, f"m{n}")])
                    await trio.sleep(0.6)  # the file is renamed by age meanwhile
                    await writer.write([Message(b"2", {}, "m2")])
            hung.set()
    finally:
        hung.set()
    assert [line["body"] for line in lines(tmp_path / "out")] == ["0", "1", "2"]
    assert sorted(p.suffix for p in (tmp_path / "out").iterdir()) == [".jsonl", ".jsonl"]
    assert len(threads) >= 5  # 3 appends, the rotation's finish and the close's
    assert len(set(threads)) == 1
    assert threads[0] != threading.get_ident()


async def test_jsonl_sink_rotates_by_size_and_by_age(tmp_path: Path) -> None:
    # (No MockClock here: the sink waits on worker threads, which autojump does not see.)
    config = FileSinkConfig("out", rotate_bytes=100, rotate_seconds=3600)
    async with FileSink(config, ctx(tmp_path)).open() as writer:
        for batch in range(4):
            await writer.write(messages(3, f"b{batch}-"))
        assert len(list((tmp_path / "out").glob("*.jsonl"))) == 3
    assert len(lines(tmp_path / "out")) == 12
    aged = FileSinkConfig("aged", rotate_seconds=0.2)
    async with FileSink(aged, ctx(tmp_path)).open() as writer:
        await writer.write(messages(1))
        await trio.sleep(0.5)  # no further write: the age alone finishes the file
        assert [p.suffix for p in (tmp_path / "aged").iterdir()] == [".jsonl"]


async def test_as_dead_letters_each_write_is_a_finished_file_at_once(tmp_path: Path) -> None:
    """Dead letters do not wait in a ``.part`` for an hour: each write is visible."""
    sink = FileSink(
        FileSinkConfig("dead"), Context(route="f", role="dead_letter", base_dir=tmp_path)
    )
    async with sink.open() as writer:
        await writer.write(messages(2, "x-"))
        await writer.write(messages(1, "y-"))
        assert sorted(p.suffix for p in (tmp_path / "dead").iterdir()) == [".jsonl", ".jsonl"]
        assert len(lines(tmp_path / "dead")) == 3


async def test_jsonl_sink_body_modes(tmp_path: Path) -> None:
    assert json.loads(encode_record(Message(b"hi", {}, "i"), "base64"))["body_base64"] == "aGk="
    with pytest.raises(ValueError, match="not UTF-8"):
        encode_record(Message(b"\xff", {}, "i"), "text")
    sink = FileSink(FileSinkConfig("out", body="text"), ctx(tmp_path))
    async with sink.open() as writer:
        with pytest.raises(MessageRejected) as info:
            await writer.write([Message(b"ok", {}, "1"), Message(b"\xff", {}, "2")])
    assert info.value.indices == (1,)


async def test_part_files_of_a_killed_run_are_cut_after_their_last_line_and_finished(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "messages-20240101T000000.000000Z.jsonl.part").write_bytes(b'{"id":"a"}\n{"id":"b')
    (out / "messages-20240101T000001.000000Z.jsonl.part").write_bytes(b'{"id":"c')
    async with FileSink(FileSinkConfig("out"), ctx(tmp_path)).open():
        pass
    assert [p.name for p in out.iterdir()] == ["messages-20240101T000000.000000Z.jsonl"]
    assert (out / "messages-20240101T000000.000000Z.jsonl").read_bytes() == b'{"id":"a"}\n'


async def test_enospc_loses_nothing_and_leaves_no_half_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    failures = [2, 5]  # the 2nd and 5th os.write calls hit a full disk, after writing a bit

    calls = 0

    def write(fd: int, data: Any) -> int:
        nonlocal calls
        calls += 1
        if calls in failures:
            real_write(fd, bytes(data[:7]))  # part of the batch reached the file
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr("bridges._fs.os.write", write)
    source = FakeSource(messages(40))
    sink = FileSink(FileSinkConfig("out"), ctx(tmp_path))
    retry = RetryPolicy(attempts=5, initial=0.01, jitter=0)
    route = Route("r", source, sink, batch_count=7, batch_time=0, retry=retry)
    await route.run()
    assert [line["id"] for line in lines(tmp_path / "out")] == [f"m{i}" for i in range(40)]
    assert route.stats.retries == 2
    assert source.nacked == []


async def test_files_sink_writes_one_file_per_message_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = FileSink(FileSinkConfig("out", format="files", name="{header:file-name}"), ctx(tmp_path))
    async with sink.open() as writer:
        await writer.write(
            [
                Message(b"1", {"file-name": "a.txt"}, "x"),
                Message(b"2", {"file-name": "../evil"}, "y"),
            ]
        )
        await writer.write([Message(b"1", {"file-name": "a.txt"}, "x")])  # a repeat: no conflict
        with pytest.raises(MessageRejected, match="conflict = fail"):  # never overwritten
            await writer.write([Message(b"3", {"file-name": "a.txt"}, "x")])
        with pytest.raises(MessageRejected, match="no 'file-name' header"):
            await writer.write([Message(b"4", {}, "z")])

        def fail(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr("bridges._fs.os.fsync", fail)
        with pytest.raises(OSError, match="No space"):
            await writer.write([Message(b"5", {"file-name": "b.txt"}, "w")])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["_.._evil", "a.txt"]
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"1"
