"""The status line and headers of the server's answers, made once for each shape.

A webhook's 204 is the same bytes every time, so :func:`response_head` keeps
what it made (a bounded number of shapes) instead of formatting each answer
again.
"""

from __future__ import annotations

from typing import Final

#: Reasons of the statuses the server sends.
_REASONS: Final = {
    100: b"Continue",
    200: b"OK",
    201: b"Created",
    202: b"Accepted",
    204: b"No Content",
    400: b"Bad Request",
    401: b"Unauthorized",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    413: b"Content Too Large",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}

#: Answer heads already made, by (status, headers, length, close): a webhook's 204 is
#: the same bytes every time. Emptied when it holds :data:`_HEADS_KEPT`.
_heads: dict[tuple[int, tuple[tuple[bytes, bytes], ...], int, bool], bytes] = {}
_HEADS_KEPT: Final = 256


def response_head(
    status: int, headers: list[tuple[bytes, bytes]], length: int, *, close: bool
) -> bytes:
    """The status line and headers of an answer with a body of ``length`` bytes."""
    key = (status, tuple(headers), length, close)
    try:
        head = _heads.get(key)
    except TypeError:  # (headers as lists: not kept)
        return _response_head(status, headers, length, close=close)
    if head is None:
        if len(_heads) >= _HEADS_KEPT:
            _heads.clear()
        head = _heads[key] = _response_head(status, headers, length, close=close)
    return head


def _response_head(
    status: int, headers: list[tuple[bytes, bytes]], length: int, *, close: bool
) -> bytes:
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b""))]
    has_connection = False
    for name, value in headers:
        lowered = name.lower()
        if lowered in (b"content-length", b"transfer-encoding"):
            continue
        if lowered == b"connection":
            has_connection = True
        lines.append(b"%s: %s\r\n" % (name, value))
    if close and not has_connection:
        lines.append(b"connection: close\r\n")
    if status >= 200 and status not in (204, 304):
        lines.append(b"content-length: %d\r\n" % length)
    lines.append(b"\r\n")
    return b"".join(lines)
