"""The file sink and repeats: JSON lines read their tail back; a file per message is named by id."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from bridges import ConfigError, Context, Message, Route, default_registry, load_config
from bridges.endpoints.file import FileSink, FileSinkConfig, FileSource, FileSourceConfig
from bridges.endpoints.file._records import encode_record
from bridges.testing import FakeSource, messages


def ctx(tmp_path: Path, in_flight: int = 10) -> Context:
    return Context(route="f", base_dir=tmp_path, in_flight=in_flight)


def ids(out: Path) -> list[str]:
    """Every line's id, in the order written (files by name, then lines)."""
    found = []
    for path in sorted(out.iterdir()):
        found += [json.loads(line)["id"] for line in path.read_bytes().splitlines()]
    return found


async def test_a_repeat_is_not_written_again_by_the_same_writer(tmp_path: Path) -> None:
    sink = FileSink(FileSinkConfig("out"), ctx(tmp_path))
    async with sink.open() as writer:
        await writer.write(messages(5))
        await writer.write([*messages(5)[1:3], *messages(2, "new"), messages(1, "new")[0]])
        assert writer.skipped == 3  # two recent, and new0 twice in one batch
    assert ids(tmp_path / "out") == ["m0", "m1", "m2", "m3", "m4", "new0", "new1"]


async def test_a_reopened_sink_reads_back_what_it_wrote_over_several_files(
    tmp_path: Path,
) -> None:
    sink = FileSink(FileSinkConfig("out", rotate_bytes=1), ctx(tmp_path))  # a file per batch
    async with sink.open() as writer:
        for start in range(0, 6, 2):
            await writer.write(messages(6)[start : start + 2])
    assert len(list((tmp_path / "out").iterdir())) == 3
    async with sink.open() as writer:
        await writer.write(messages(8))
        assert writer.skipped == 6
    assert ids(tmp_path / "out") == [f"m{i}" for i in range(8)]


async def test_lines_a_killed_run_left_in_a_part_file_are_not_written_again(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    written = b"".join(encode_record(m) for m in messages(3))  # fsynced, never acked
    half = encode_record(messages(4)[3])[:9]  # the kill came in the middle of m3
    (out / "messages-20240101T000000.000000Z.jsonl.part").write_bytes(written + half)
    async with FileSink(FileSinkConfig("out"), ctx(tmp_path)).open() as writer:
        await writer.write(messages(5))  # the source sends them all again
        assert writer.skipped == 3
    assert ids(out) == [f"m{i}" for i in range(5)]


async def test_the_window_keeps_the_last_ids_only(tmp_path: Path) -> None:
    sink = FileSink(FileSinkConfig("out", dedup_window=3), ctx(tmp_path, in_flight=3))
    async with sink.open() as writer:
        await writer.write(messages(5))
    async with sink.open() as writer:
        await writer.write([messages(5)[1], messages(5)[2]])  # m1 is out of the window
    assert ids(tmp_path / "out") == ["m0", "m1", "m2", "m3", "m4", "m1"]


async def test_a_running_writer_keeps_the_window_too(tmp_path: Path) -> None:
    sink = FileSink(FileSinkConfig("out", dedup_window=3), ctx(tmp_path, in_flight=3))
    async with sink.open() as writer:
        await writer.write(messages(5))  # the common path: every id new
        await writer.write([messages(5)[1], messages(5)[4]])  # m1 left the window; m4 not
        assert writer.skipped == 1
    assert ids(tmp_path / "out") == ["m0", "m1", "m2", "m3", "m4", "m1"]


async def test_off_and_empty_ids_write_every_time(tmp_path: Path) -> None:
    sink = FileSink(FileSinkConfig("out", dedup_window=0), ctx(tmp_path))
    async with sink.open() as writer:
        await writer.write(messages(2))
        await writer.write(messages(2))
    on = FileSink(FileSinkConfig("out"), ctx(tmp_path))
    async with on.open() as writer:
        await writer.write([Message(b"a"), Message(b"b")])
        await writer.write([Message(b"a")])
    assert ids(tmp_path / "out") == ["m0", "m1", "m0", "m1", "", "", ""]


async def test_what_is_read_back_is_only_the_sinks_own_regular_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(encode_record(messages(1)[0]))
    os.symlink(elsewhere, out / "messages-20240101T000000.000000Z.jsonl")  # never followed
    (out / "other-20240101T000000.000000Z.jsonl").write_bytes(encode_record(messages(2)[1]))
    (out / "messages-20240101T000001.000000Z.jsonl").write_bytes(b"not json\n\n{}\n")
    async with FileSink(FileSinkConfig("out"), ctx(tmp_path)).open() as writer:
        await writer.write(messages(2))
        assert writer.skipped == 0


def test_the_default_window_grows_with_in_flight(tmp_path: Path) -> None:
    assert FileSink(FileSinkConfig("out"), ctx(tmp_path, in_flight=10)).dedup_window == 10_000
    assert FileSink(FileSinkConfig("out"), ctx(tmp_path, in_flight=50_000)).dedup_window == 50_000


def test_a_window_smaller_than_in_flight_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(
        '[routes.r]\nin_flight = 500\n[routes.r.source]\ntype = "file"\npath = "in"\n'
        '[routes.r.sink]\ntype = "file"\npath = "out"\ndedup_window = 100\n'
    )
    with pytest.raises(ConfigError, match="dedup_window: 100 is less than the route's in_flight"):
        load_config(config, default_registry(plugins=False), base_dir=tmp_path)


async def test_a_file_per_message_named_by_its_id_is_written_once(tmp_path: Path) -> None:
    sink = FileSink(FileSinkConfig("out", format="files"), ctx(tmp_path))  # name = "{id}"
    source = FakeSource([*messages(4), *messages(4)], end=True)  # every message delivered twice
    async with sink.open() as writer:
        await writer.write(messages(2))
        await writer.write(messages(3))
        assert writer.skipped == 2
    await Route("r", source, sink, batch_count=3, batch_time=0).run()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["m0", "m1", "m2", "m3"]
    assert len(source.acked) == 8
    assert (tmp_path / "out" / "m3").read_bytes() == b"m3"


async def test_a_rotated_input_gives_new_ids_kept_across_a_restart(tmp_path: Path) -> None:
    log_file = tmp_path / "app.jsonl"
    log_file.write_bytes(b"same\n")
    config = FileSourceConfig("app.jsonl", mode="jsonl", poll_interval=0.01)
    ids = []
    with trio.fail_after(10):
        async with FileSource(config, ctx(tmp_path)).open() as receiver:
            first = await receiver.receive()
            ids.append(first.message.id)
            await first.ack()
            (tmp_path / "new.jsonl").write_bytes(b"same\nnext\n")
            (tmp_path / "new.jsonl").rename(log_file)  # rotated: the same first line, anew
            again = await receiver.receive()
            ids.append(again.message.id)
            await again.ack()
            await trio.sleep(0.2)  # the position is persisted
        async with FileSource(config, ctx(tmp_path)).open() as receiver:  # a restart
            ids.append((await receiver.receive()).message.id)
    assert ids == ["f/app.jsonl:0", "f/app.jsonl#1:0", "f/app.jsonl#1:5"]
