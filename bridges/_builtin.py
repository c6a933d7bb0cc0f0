"""The endpoints and transforms that come with bridges."""

from __future__ import annotations

from ._file_sink import FileSink, FileSinkConfig
from ._file_source import FileSource, FileSourceConfig
from ._registry import Registry
from ._stomp import StompSink, StompSinkConfig, StompSource, StompSourceConfig
from ._transforms import (
    DestinationConfig,
    Filter,
    FilterConfig,
    JsonExtract,
    JsonExtractConfig,
    PythonConfig,
    RemoveHeaders,
    RemoveHeadersConfig,
    RenameHeaders,
    RenameHeadersConfig,
    SetDestination,
    SetHeaders,
    SetHeadersConfig,
    build_python,
)


def register_builtins(registry: Registry) -> None:
    """Register ``stomp`` and ``file`` (source and sink) and the built-in transforms."""
    registry.register("source", "stomp", StompSourceConfig, StompSource.build)
    registry.register("sink", "stomp", StompSinkConfig, StompSink.build)
    registry.register("source", "file", FileSourceConfig, FileSource.build)
    registry.register("sink", "file", FileSinkConfig, FileSink.build)
    registry.register("transform", "set_headers", SetHeadersConfig, SetHeaders.build)
    registry.register("transform", "remove_headers", RemoveHeadersConfig, RemoveHeaders.build)
    registry.register("transform", "rename_headers", RenameHeadersConfig, RenameHeaders.build)
    registry.register("transform", "destination", DestinationConfig, SetDestination.build)
    registry.register("transform", "filter", FilterConfig, Filter.build)
    registry.register("transform", "json_extract", JsonExtractConfig, JsonExtract.build)
    registry.register("transform", "python", PythonConfig, build_python)
