"""Frame heads: where one ends, and what it says (command, headers, content-length).

Shared by the parser and the WebSocket :class:`~trio_stomp.frame.FrameSplitter`:
:func:`find_blank_line` is the one scan for the end of a head.
"""

from __future__ import annotations

import re
from typing import Final, Protocol

from ._errors import RemoteProtocolError
from ._escaping import unescape
from ._frame import COMMANDS, UNESCAPED_COMMANDS
from ._headers import Headers, head_headers
from ._headers import trusted_headers as _headers

#: Exact spellings of the commands: one dict lookup on the hot path.
COMMAND_NAMES: Final = {command: command for command in COMMANDS}
#: The blank line that ends a 1.0 head: 1.0 strips trailing spaces and
#: carriage returns from every line, so a line of them is blank.
_BLANK_LINE_1_0: Final = re.compile(rb"\n[ \r]*\n")
#: Digits in the largest content-length compared as a number; longer ones
#: (after leading zeros) exceed any max_frame_size without calling int().
_MAX_LENGTH_DIGITS: Final = 18
_CONTENT_LENGTH_LINE: Final = "\ncontent-length:"
Pair = tuple[str, str]


def find_blank_line(buf: bytes | bytearray, pos: int, version: str) -> tuple[int, int] | None:
    """Where the blank line after the head starting at ``pos`` is: the position of the
    LF that ends the last header line, and where the body starts. None when the
    head goes on past ``buf``.

    1.1 ends a head with LF LF only; 1.2 also with LF CR LF; 1.0 with any line
    of spaces and carriage returns (it strips them from every line).
    """
    if version == "1.0":
        match = _BLANK_LINE_1_0.search(buf, pos)
        return (match.start(), match.end()) if match else None
    end = buf.find(b"\n\n", pos)
    if version == "1.2":
        # A CR LF blank line may come first; it may also end at `end` (a body
        # starting with LF), hence the + 1.
        crlf = buf.find(b"\n\r\n", pos, len(buf) if end < 0 else end + 1)
        if crlf >= 0:
            return crlf, crlf + 3
    return None if end < 0 else (end, end + 2)


def decode_head(head: bytes) -> str:
    try:
        return head.decode()
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"frame head is not valid UTF-8: {exc}") from None


def content_length(value: str) -> int:
    """A content-length value as a number; oversized ones compare as huge."""
    if not (value.isascii() and value.isdigit()):
        raise RemoteProtocolError(f"content-length is not a number: {value[:64]!r}")
    if len(value) > _MAX_LENGTH_DIGITS:
        # Longer than any length we could accept (int() would even refuse
        # some): keep only what leading zeros leave, and judge that.
        value = value.lstrip("0") or "0"
        if len(value) > _MAX_LENGTH_DIGITS:
            return 10**_MAX_LENGTH_DIGITS
    return int(value)


def command_named(line: str, version: str) -> str:
    """The command a command line names, other than by its exact spelling.

    Commands are case-insensitive on input; only ASCII case folds, so that
    ``"\\u017fend"`` (long s, which ``str.upper`` turns into S) is not SEND.
    """
    command = line.upper() if line.isascii() else line
    if command not in COMMANDS:
        if version == "1.1" and command[-1:] == "\r" and command[:-1] in COMMANDS:
            raise crlf_error()
        raise RemoteProtocolError(f"unknown command {line[:64]!r}")
    return command


def crlf_error() -> RemoteProtocolError:
    """The error for a STOMP 1.1 frame whose lines end in CR LF.

    Only 1.2 allows CR LF line ends; under 1.1 the CR belongs to the line, so
    the head looks broken in ways (a command ``SEND\\r``, a NUL inside the head
    where the CR LF blank line went unseen) that would not say what is wrong.
    """
    return RemoteProtocolError(
        "a line ends with CR LF, which only STOMP 1.2 allows (a STOMP 1.1 line ends with LF)"
    )


def malformed_line(line: str, version: str) -> RemoteProtocolError:
    """The error for a header line without a colon or a name."""
    if version == "1.1" and line == "\r":  # the CR LF blank line of 1.2
        return crlf_error()
    return RemoteProtocolError(f"malformed header line {line[:64]!r}")


class HeadRules(Protocol):
    """How a parser reads heads (a :class:`~trio_stomp.frame.FrameParser`): its version
    and limits, read at each call, so that they may change between frames."""

    @property
    def version(self) -> str: ...

    max_header_count: int
    max_header_length: int
    lenient: bool


def usual_head(
    raw: bytes, version: str, rules: HeadRules
) -> tuple[str, Headers, int | None] | None:
    """Parse the usual frame head, or return None for :func:`parse_head` to judge.

    ``raw`` is the head as sent, without its blank line, under STOMP 1.1 or
    1.2, of the shape :func:`~._shape.usual_head_end` checked: each header
    line ending in LF and holding exactly one raw colon after a non-empty
    name, no CR or NUL. The usual head is also valid UTF-8 within the limits,
    its command spelled exactly (and not one whose headers go unescaped), with
    valid escapes. Its headers are kept as text, split only when something
    reads them all (see :class:`Headers`). Anything else, valid or not,
    returns None.
    """
    size = len(raw)
    if size > rules.max_header_length:
        return None
    # A header line takes 3 bytes at least ("\nname:"): a short head cannot
    # hold too many, and only a long one is counted.
    count = rules.max_header_count
    if size > 3 * count and raw.count(b"\n") > count:
        return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    cut = text.find("\n")
    command = COMMAND_NAMES.get(text[:cut] if cut >= 0 else text)
    if command is None or command in UNESCAPED_COMMANDS:
        return None
    escapes = None
    if "\\" in text:
        lenient = rules.lenient
        if not lenient:
            try:
                unescape(text, version, lenient)  # the whole head: every escape is checked
            except RemoteProtocolError:
                return None
        escapes = (version, lenient)
    found = text.find(_CONTENT_LENGTH_LINE)
    if found < 0:
        return command, head_headers(text, escapes), None
    start = found + len(_CONTENT_LENGTH_LINE)
    stop = text.find("\n", start)
    value = text[start : stop if stop >= 0 else None]
    if len(value) < 10 and value.isdigit() and value.isascii():
        return command, head_headers(text, escapes), int(value)
    return command, head_headers(text, escapes), content_length(value)


def parse_head(
    text: str, size: int, version: str, rules: HeadRules
) -> tuple[str, Headers, int | None]:
    """Parse a frame head of ``size`` bytes: command, headers, content-length.

    ``text`` is the head without its blank line (nor the LF that ends its
    last line). The common frame (1.1 or 1.2, LF lines, escaped headers, no
    backslash) is read inline; everything else takes a helper.
    """
    as_sent = version != "1.0" and (version == "1.1" or "\r" not in text)
    lines = text.split("\n") if as_sent else _cleaned_lines(text, version)
    command = COMMAND_NAMES.get(lines[0]) or command_named(lines[0], version)
    count = len(lines) - 1
    if count > rules.max_header_count:
        raise RemoteProtocolError(
            f"a frame has more than max_header_count={rules.max_header_count} headers"
        )
    if size > rules.max_header_length:
        _check_line_lengths(text.split("\n")[1:], version, rules.max_header_length)
    # The usual frame: escaped headers, and in strict 1.2 as many colons as
    # lines, which (since every line needs one) rules out a raw colon in a
    # value without looking at each.
    usual = version == "1.1" or rules.lenient or text.count(":") == count
    if not usual or version == "1.0" or command in UNESCAPED_COMMANDS:
        pairs = _other_headers(lines, version, command, rules.lenient)
    elif "\\" in text:
        pairs = _escaped_headers(lines, version, rules.lenient)
    else:
        pairs = []
        append = pairs.append
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name:
                raise malformed_line(line, version)
            append((name, value))
    if not as_sent:
        return command, _headers(tuple(pairs)), _folded_length(text, pairs, version)
    # An escaped name cannot spell content-length (escapes only make newline,
    # colon, backslash and CR), and a value that is all digits as sent is all
    # digits unescaped: read it from the text.
    found = text.find(_CONTENT_LENGTH_LINE)
    if found < 0:
        return command, _headers(tuple(pairs)), None
    start = found + len(_CONTENT_LENGTH_LINE)
    stop = text.find("\n", start)
    value = text[start : stop if stop >= 0 else None]
    # The usual value inline (short ASCII digits); content_length() judges the rest.
    if len(value) < 10 and value.isdigit() and value.isascii():
        return command, _headers(tuple(pairs)), int(value)
    return command, _headers(tuple(pairs)), content_length(value)


def _cleaned_lines(text: str, version: str) -> list[str]:
    """The head's lines without their end-of-line padding (1.0: spaces and CRs; 1.2: CR)."""
    lines = text.split("\n")
    if version == "1.0":
        return [line.rstrip(" \r") for line in lines]
    lines = [line[:-1] if line[-1:] == "\r" else line for line in lines]
    if any("\r" in line for line in lines):
        raise RemoteProtocolError("a raw carriage return inside a header line")
    return lines


def _escaped_headers(lines: list[str], version: str, lenient: bool) -> list[Pair]:
    pairs = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name:
            raise malformed_line(line, version)
        if "\\" in name:
            name = unescape(name, version, lenient)
        if "\\" in value:
            value = unescape(value, version, lenient)
        pairs.append((name, value))
    return pairs


def _other_headers(lines: list[str], version: str, command: str, lenient: bool) -> list[Pair]:
    """Parse header lines that are unescaped (1.0, CONNECT...) or suspect."""
    escaped = version != "1.0" and command not in UNESCAPED_COMMANDS
    pairs: list[Pair] = []
    append = pairs.append
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name:
            raise malformed_line(line, version)
        if version == "1.0":
            value = value.lstrip(" ")
        elif escaped:
            if version == "1.2" and not lenient and ":" in value:
                raise RemoteProtocolError(f"a raw colon in the value of header {name!r}")
            if "\\" in name:
                name = unescape(name, version, lenient)
            if "\\" in value:
                value = unescape(value, version, lenient)
        append((name, value))
    return pairs


def _folded_length(text: str, pairs: list[Pair], version: str) -> int | None:
    """The first content-length header as a number (None when absent), from the parsed
    headers: for heads whose lines were cleaned up, and for 1.0, whose header names
    are case-insensitive (and framing must be too)."""
    fold = version == "1.0"
    if "content-length" not in (text.lower() if fold else text):
        return None
    for name, value in pairs:
        if (name.lower() if fold else name) == "content-length":
            return content_length(value)
    return None


def _check_line_lengths(lines: list[str], version: str, limit: int) -> None:
    # In bytes as sent, less the CR of a CR LF: as the parser's head walk counts them.
    crlf = version != "1.1"
    for line in lines:
        if len(line) * 4 > limit:  # else its UTF-8 cannot be too long
            length = len(line.encode())
            if crlf and line[-1:] == "\r":
                length -= 1
            if length > limit:
                raise RemoteProtocolError(f"a header line is longer than max_header_length={limit}")
