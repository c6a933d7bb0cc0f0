"""What a message becomes as a Kafka record: the tuple ``produce`` takes, and its headers."""

from __future__ import annotations

from collections.abc import Mapping

from ._connection import DELIVERY_HEADERS, ID_HEADER

#: What one message becomes: topic, partition (-1: the partitioner's), key, value, headers.
Record = tuple[str, int, bytes | None, bytes | None, list[tuple[str, str | bytes | None]]]


def record_headers(fields: Mapping[str, str]) -> tuple[list[tuple[str, str | bytes | None]], int]:
    """A message's headers as a record's (the delivery headers and the id left out),
    and their size in bytes.

    Raises:
      ValueError: a name Kafka cannot carry.
    """
    headers: list[tuple[str, str | bytes | None]] = []
    size = 0
    for name, value in fields.items():
        if name in DELIVERY_HEADERS or name == ID_HEADER:
            continue
        if (not name.isascii() and not _is_text(name)) or "\0" in name:
            # (a Kafka header name is a string; librdkafka takes it as a C string)
            raise ValueError(f"header name {name[:40]!r} is not UTF-8 text without NUL")
        encoded = value.encode("utf-8", "surrogateescape")
        headers.append((name, encoded))
        size += len(name) + len(encoded)
    return headers, size


def _is_text(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True
