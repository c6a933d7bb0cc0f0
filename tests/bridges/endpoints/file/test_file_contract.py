"""The file source (directory and JSON-lines modes) and the file sink (both formats),
held to the bridges Source/Sink contract."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from family_kit import POISON_MIXES, POISON_SETTINGS, poison_run
from hypothesis import given
from hypothesis import strategies as st

from bridges import Context, Message
from bridges.endpoints.file import FileSink, FileSinkConfig, FileSource, FileSourceConfig
from bridges.endpoints.file._records import parse_record
from bridges.testing import (
    SinkCase,
    SinkFactory,
    SourceCase,
    SourceFactory,
    check_sink,
    check_source,
)


def fresh(root: Path) -> Path:
    folder = root / uuid.uuid4().hex[:10]
    folder.mkdir()
    return folder


def directory_sources(root: Path) -> SourceFactory:
    @asynccontextmanager
    async def factory() -> AsyncIterator[SourceCase]:
        inbox = fresh(root)
        config = FileSourceConfig(path=str(inbox), settle=0.0, poll_interval=0.01)
        source = FileSource(config, Context(route="c", base_dir=root))

        async def publish(messages: Sequence[Message]) -> None:
            for message in messages:  # written aside, then renamed in: what writers must do
                temporary = inbox / f"{message.id}.tmp"
                temporary.write_bytes(message.body)
                temporary.rename(inbox / message.id)

        yield SourceCase(source, publish)

    return factory


def jsonl_sources(root: Path) -> SourceFactory:
    @asynccontextmanager
    async def factory() -> AsyncIterator[SourceCase]:
        folder = fresh(root)
        log = folder / "events.jsonl"
        log.touch()
        config = FileSourceConfig(path=str(log), mode="jsonl", poll_interval=0.01)
        source = FileSource(config, Context(route="c", base_dir=root))

        async def publish(messages: Sequence[Message]) -> None:
            with log.open("ab") as file:
                file.write(b"".join(message.body + b"\n" for message in messages))

        yield SourceCase(source, publish)

    return factory


def file_sinks(root: Path, file_format: str) -> SinkFactory:
    @asynccontextmanager
    async def factory() -> AsyncIterator[SinkCase]:
        outbox = fresh(root)
        if file_format == "files":
            config = FileSinkConfig(path=str(outbox), format="files")
            never = Message(b"a name longer than 255 bytes", {}, "n" * 256)
        else:
            config = FileSinkConfig(path=str(outbox), body="text")
            never = Message(b"\xff not UTF-8 text", {}, "not-text")
        sink = FileSink(config, Context(route="c", role="sink", base_dir=root))

        async def read_back() -> list[Message]:
            names = sorted(p for p in outbox.iterdir() if not p.name.startswith("."))
            if file_format == "files":
                return [Message(path.read_bytes()) for path in names]
            lines = b"".join(path.read_bytes() for path in names).splitlines()
            return [parse_record(line) for line in lines]

        yield SinkCase(sink, read_back, reject=never, ordered=file_format == "jsonl")

    return factory


@pytest.mark.deadline(60)
async def test_the_directory_source_keeps_the_source_contract(tmp_path: Path) -> None:
    await check_source(directory_sources(tmp_path))


@pytest.mark.deadline(60)
async def test_the_jsonl_source_keeps_the_source_contract(tmp_path: Path) -> None:
    await check_source(jsonl_sources(tmp_path))


@pytest.mark.parametrize("file_format", ["files", "jsonl"])
@pytest.mark.deadline(60)
async def test_the_file_sink_keeps_the_sink_contract(tmp_path: Path, file_format: str) -> None:
    await check_sink(file_sinks(tmp_path, file_format))


@POISON_SETTINGS
@given(mix=POISON_MIXES, file_format=st.sampled_from(["jsonl", "files"]))
def test_the_file_sink_sets_each_poison_message_aside_alone(
    tmp_path: Path, mix: list[int | None], file_format: str
) -> None:
    poison_run(file_sinks(tmp_path, file_format), mix)
