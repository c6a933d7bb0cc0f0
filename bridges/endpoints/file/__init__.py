"""The ``file`` family: a watched directory or a tailed JSON-lines file in, files out.

:mod:`.source` (directory mode), :mod:`.tail` (JSON-lines mode of the
source), :mod:`.sink` (JSON lines) and :mod:`._files` (its file-per-message
mode: names, conflicts); :mod:`._records` is the JSON-lines record format
both sides share, and :mod:`._fs` every file-system operation, made safe
against links, FIFOs and swaps planted in the directories.
"""

from __future__ import annotations

from ..._registry import Registry
from .sink import FileSink, FileSinkConfig
from .source import FileSource, FileSourceConfig

__all__ = ["FileSink", "FileSinkConfig", "FileSource", "FileSourceConfig", "register"]


def register(registry: Registry) -> None:
    """Register the ``file`` source and sink."""
    registry.register("source", "file", FileSourceConfig, FileSource.build)
    registry.register("sink", "file", FileSinkConfig, FileSink.build)
