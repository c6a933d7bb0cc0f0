"""Records only a hostile producer writes: a Produce request built by hand.

Kafka's clients refuse or rewrite a header name that is not UTF-8; the
protocol carries any bytes (a varint length and the bytes). This writes one
record batch (magic 2) with a bare Produce request (v3, ``acks=all``) to the
partition's leader, which on the project's one broker is the bootstrap
server. Test code only.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Sequence

_CRC32C_POLY = 0x82F63B78
_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ _CRC32C_POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _field(data: bytes | None) -> bytes:
    return _varint(-1) if data is None else _varint(len(data)) + data


def _record(
    delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[bytes, bytes | None]],
) -> bytes:
    body = b"\0" + _varint(0) + _varint(delta) + _field(key) + _field(value)
    body += _varint(len(headers)) + b"".join(_field(n) + _field(v) for n, v in headers)
    return _varint(len(body)) + body


def record_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[bytes, bytes | None]]]],
) -> bytes:
    """One batch of (key, value, headers) with raw header names."""
    # (the time now: a record stamped 1970 is past the broker's retention, and its
    # segment went at the next retention check, every 5 min: a flaky test read nothing)
    now = int(time.time() * 1000)
    tail = struct.pack(">hiqqqhii", 0, len(records) - 1, now, now, -1, -1, -1, len(records))
    tail += b"".join(_record(i, k, v, h) for i, (k, v, h) in enumerate(records))
    crc = _crc32c(tail)
    header = struct.pack(">iBI", 0, 2, crc)  # partition leader epoch, magic, crc
    batch = header + tail
    return struct.pack(">qi", 0, len(batch)) + batch


#: Kafka's errors for a partition not ready yet: UNKNOWN_TOPIC_OR_PARTITION,
#: LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER.
_NOT_READY = frozenset({3, 5, 6})


def produce_raw(
    servers: str,
    topic: str,
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[bytes, bytes | None]]]],
    partition: int = 0,
) -> None:
    """Write ``records`` to ``topic``'s ``partition``; raises when the broker refuses them."""
    host, _, port = servers.split(",")[0].rpartition(":")
    batch = record_batch(records)
    name = topic.encode()
    body = struct.pack(">hhih", 0, 3, 7, 3) + b"raw"  # Produce v3, correlation 7, client "raw"
    body += struct.pack(">hhii", -1, -1, 30_000, 1)  # no transactional id, acks=all, 1 topic
    body += struct.pack(">h", len(name)) + name + struct.pack(">iii", 1, partition, len(batch))
    body += batch
    deadline = time.monotonic() + 15
    while True:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", _read(sock, 4))[0]
            reply = _read(sock, size)
        # correlation, 1 topic, name, 1 partition, partition, error code
        offset = 4 + 4 + 2 + len(name) + 4 + 4
        error = struct.unpack(">h", reply[offset : offset + 2])[0]
        if error in _NOT_READY and time.monotonic() < deadline:
            time.sleep(0.1)  # (a partition just created has no leader for a moment)
            continue
        if error:
            raise RuntimeError(f"the broker refused the raw records: error {error}")
        return


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data
