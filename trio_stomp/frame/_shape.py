"""Where the usual frame head ends: the one check :func:`~._head.usual_head` builds on.

The usual head (see :func:`~._head.usual_head`) is a command line without a
colon, then header lines that each hold exactly one colon after a non-empty
name, no CR or NUL anywhere, at most :data:`MAX_USUAL_LINES` header lines,
and a blank line (LF LF). :func:`usual_head_end` finds that blank line and
checks the shape in one step, two ways with one result: with a few
whole-head passes of CPython's C string methods (fastest in pure Python),
or, when the codec runs compiled, in one walk over the bytes (fastest in C).
A property test holds them equal.
"""

from __future__ import annotations

from typing import Final

#: More header lines than this take the exact path.
MAX_USUAL_LINES: Final = 256
#: Every byte but the ones that shape a head (LF, colon) or take it off the
#: usual path (CR, NUL): what :func:`find_usual_end` deletes to see its shape.
_NOT_SHAPE: Final = bytes(byte for byte in range(256) if byte not in b"\n:\r\0")
#: The shape of a usual head: LF colon for each header line.
_USUAL_SHAPE: Final = b"\n:" * MAX_USUAL_LINES
#: True when this module runs compiled (mypyc): the byte walk is then the fast way.
_COMPILED: Final = not __file__.endswith((".py", ".pyc"))


def usual_head_end(buf: bytes, pos: int) -> int:
    """Where the usual head starting at ``pos`` ends: the position of the LF LF after
    its last line. -1 when there is no blank line yet, or the head is not usual."""
    if _COMPILED:
        return walk_usual_end(buf, pos)
    return find_usual_end(buf, pos)


def find_usual_end(buf: bytes, pos: int) -> int:
    """:func:`usual_head_end` in whole-head passes: find, translate, compare."""
    end = buf.find(b"\n\n", pos)
    if end < 0:
        return -1
    raw = buf[pos:end]
    shape = raw.translate(None, _NOT_SHAPE)
    if len(shape) & 1 or not _USUAL_SHAPE.startswith(shape) or raw.find(b"\n:") >= 0:
        return -1  # CR, NUL, a line without one colon, an empty name, or many lines
    return end


def walk_usual_end(buf: bytes, pos: int) -> int:
    """:func:`usual_head_end` in one walk over the bytes."""
    size = len(buf)
    end = _line_end(buf, pos, size, 0)  # the command line: no colon
    lines = 0
    while end >= 0:  # at the LF that ends a line
        start = end + 1
        if start >= size:
            return -1
        byte = buf[start]
        if byte == 10:
            return end
        if byte == 58 or lines == MAX_USUAL_LINES:
            return -1  # an empty name, or too many lines
        lines += 1
        end = _line_end(buf, start, size, 1)
    return -1


def _line_end(buf: bytes, start: int, size: int, colons: int) -> int:
    """The LF that ends the line at ``start`` if the line holds ``colons`` colons and no CR
    or NUL; else -1 (also when ``buf`` ends first)."""
    seen = 0
    for i in range(start, size):
        byte = buf[i]
        if byte == 10:
            return i if seen == colons else -1
        if byte == 58:
            seen += 1
        elif byte == 13 or byte == 0:
            return -1
    return -1
