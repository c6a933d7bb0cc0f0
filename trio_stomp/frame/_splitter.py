"""Cutting a byte stream of STOMP frames at frame boundaries, without parsing it.

STOMP over WebSocket wants each frame in a message of its own; the client's
writer produces bytes. :class:`FrameSplitter` finds where each frame ends with
the parser's own head scan (:func:`._head.find_blank_line`), then the
``content-length`` or the NUL.
"""

from __future__ import annotations

import enum

from ._head import find_blank_line


class _Part(enum.Enum):
    BETWEEN = "between frames"
    CR = "after a CR between frames"
    HEAD = "in a command or header line"
    BODY_LENGTH = "in a body with content-length"
    BODY_NUL = "in a body ended by NUL"


class FrameSplitter:
    """Cuts outgoing bytes at STOMP frame boundaries (sans-IO).

    Feed it bytes with :meth:`split`; it returns ``(piece, ends_message)``
    pairs whose concatenation is exactly the input. A piece that ends a frame
    (or a heart-beat EOL) ends its message; the last piece of a call may
    leave a frame open, and the next call continues it.

    It trusts its input to be STOMP written by an encoder (it does not
    validate): a frame ends after ``content-length`` body bytes and a NUL
    when the first ``content-length`` header holds digits, else at the first
    NUL after the blank line. Whatever the bytes, every byte comes out once,
    in order, and the work is linear in the input.
    """

    __slots__ = ("_head", "_part", "_remaining")

    def __init__(self) -> None:
        self._part = _Part.BETWEEN
        self._head = bytearray()  # the header block so far, when cut across calls
        self._remaining = 0  # body bytes plus the NUL still to come (BODY_LENGTH)

    def split(self, data: bytes) -> list[tuple[bytes, bool]]:
        """Cut ``data``; see the class documentation."""
        pieces: list[tuple[bytes, bool]] = []
        start = pos = 0  # start: where the current piece began
        end = len(data)
        while pos < end:
            part = self._part
            if part is _Part.BETWEEN:
                byte = data[pos]
                if byte == 0x0A:  # a heart-beat: its own message
                    pieces.append((data[pos : pos + 1], True))
                    start = pos = pos + 1
                elif byte == 0x0D:
                    self._part = _Part.CR
                    pos += 1
                else:
                    self._part = _Part.HEAD
            elif part is _Part.CR:
                if data[pos] == 0x0A:
                    pos += 1
                pieces.append((data[start:pos], True))
                start = pos
                self._part = _Part.BETWEEN
            elif part is _Part.HEAD:
                pos = self._scan_head(data, pos)
            elif part is _Part.BODY_LENGTH:
                take = min(self._remaining, end - pos)
                pos += take
                self._remaining -= take
                if not self._remaining:
                    pieces.append((data[start:pos], True))
                    start = pos
                    self._part = _Part.BETWEEN
            else:  # BODY_NUL
                nul = data.find(b"\0", pos)
                if nul < 0:
                    pos = end
                else:
                    pos = nul + 1
                    pieces.append((data[start:pos], True))
                    start = pos
                    self._part = _Part.BETWEEN
        if start < end:
            pieces.append((data[start:end], False))
        return pieces

    def _scan_head(self, data: bytes, pos: int) -> int:
        """Look for the blank line ending the headers; return where scanning stopped."""
        head = self._head
        if head:
            # Cut across calls (rare): search the saved tail joined to the new bytes.
            seen = len(head)
            head += data[pos:]
            blank = find_blank_line(head, max(0, seen - 2), "1.2")
            if blank is None:
                return len(data)
            found = blank[1]
            body_at = found - seen + pos
            block = bytes(head[:found])
            head.clear()
        else:
            blank = find_blank_line(data, pos, "1.2")
            if blank is None:
                head += data[pos:]
                return len(data)
            body_at = found = blank[1]
            block = data[pos:found]
        length = _content_length(block)
        if length is None:
            self._part = _Part.BODY_NUL
        else:
            self._part = _Part.BODY_LENGTH
            self._remaining = length + 1
        return body_at


def _content_length(block: bytes) -> int | None:
    """The first content-length header of a header block, if it holds digits."""
    at = block.find(b"\ncontent-length:")
    if at < 0:
        return None
    start = at + len(b"\ncontent-length:")
    stop = block.find(b"\n", start)
    value = block[start : stop if stop >= 0 else len(block)].rstrip(b"\r")
    return int(value) if value.isdigit() else None
