"""The sans-IO frame parser: bytes in, frames and heart-beats out."""

from __future__ import annotations

from typing import Final

from .._errors import RemoteProtocolError
from ._escaping import DECODE, unescape
from ._frame import (
    BODY_COMMANDS,
    COMMANDS,
    HEARTBEAT,
    UNESCAPED_COMMANDS,
    Frame,
    Heartbeat,
    Version,
    check_version,
    trusted_frame,
)
from ._headers import Headers

DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024
DEFAULT_MAX_HEADER_COUNT: Final = 1000
DEFAULT_MAX_HEADER_LENGTH: Final = 64 * 1024

Event = Frame | Heartbeat

_NO_BODY: Final = -2  # no frame head parsed: looking for the next head
_UNTIL_NUL: Final = -1  # body without content-length: runs to the first NUL


class FrameParser:
    """Incremental, sans-IO STOMP parser.

    Feed it whatever bytes arrive; it returns every complete event so far. It
    does no I/O and reads no clock, so it behaves the same whether the stream
    arrives whole or one byte at a time.

    Args:
      version: the STOMP version whose rules apply ("1.0", "1.1" or "1.2").
        CONNECT and CONNECTED parse the same under every version, so a server
        or client can start at the default and set :attr:`version` once the
        version is negotiated.
      max_frame_size: the largest frame (head and body) accepted, in bytes.
      max_header_count: the most headers one frame may carry.
      max_header_length: the longest header line, in bytes.
      lenient: accept undefined escape sequences literally and, in 1.2, raw
        colons in header values, for peers that do not escape. Off by default:
        the 1.2 spec makes both fatal.

    Limits are enforced as soon as a violation is certain (a content-length
    too large fails before the body arrives), so a peer cannot make the parser
    buffer more than the limits allow.
    """

    def __init__(
        self,
        version: str = "1.2",
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_header_count: int = DEFAULT_MAX_HEADER_COUNT,
        max_header_length: int = DEFAULT_MAX_HEADER_LENGTH,
        lenient: bool = False,
    ) -> None:
        for name, limit in (
            ("max_frame_size", max_frame_size),
            ("max_header_count", max_header_count),
            ("max_header_length", max_header_length),
        ):
            if limit < 1:
                raise ValueError(f"{name} must be at least 1, got {limit}")
        self.max_frame_size = max_frame_size
        self.max_header_count = max_header_count
        self.max_header_length = max_header_length
        self.lenient = lenient
        self._version: Version = check_version(version)
        self._buf = b""
        self._failed: str | None = None
        # While a body is incomplete: what we know of its frame so far.
        self._need = _NO_BODY  # body bytes + NUL still to gather, or _UNTIL_NUL
        self._parts: list[bytes | memoryview] = []
        self._have = 0
        self._budget = 0  # body bytes still allowed by max_frame_size
        self._command = ""
        self._headers = Headers()

    @property
    def version(self) -> Version:
        """The STOMP version whose rules apply to the frames parsed next."""
        return self._version

    @version.setter
    def version(self, version: str) -> None:
        self._version = check_version(version)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Add ``data`` and return every event completed by it, in order.

        ``feed(b"")`` says the stream has ended: a partial frame then is a
        :class:`RemoteProtocolError`.

        Raises:
          RemoteProtocolError: the bytes are not valid STOMP, or break a limit.
            The parser stays failed: every later call raises again.
        """
        if self._failed is not None:
            raise RemoteProtocolError(f"parser failed earlier: {self._failed}")
        try:
            if not data:
                self._end_of_stream()
                return []
            return self._feed(bytes(data))
        except RemoteProtocolError as exc:
            self._failed = str(exc)
            raise

    @property
    def in_frame(self) -> bool:
        """True when part of a frame is buffered (EOF now would be an error)."""
        return self._need != _NO_BODY or bool(self._buf.strip(b"\r\n"))

    def _end_of_stream(self) -> None:
        if self.in_frame or self._buf:
            raise RemoteProtocolError("the stream ended in the middle of a frame")

    def _feed(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        if self._need != _NO_BODY:
            rest = self._continue_body(data, events)
            if rest is None:
                return events
            data = rest
        buf = self._buf + data if self._buf else data
        self._buf = b""
        pos = 0
        size = len(buf)
        crlf = self._version != "1.1"
        while pos < size:
            first = buf[pos]
            if first == 10:  # LF: a heart-beat
                events.append(HEARTBEAT)
                pos += 1
                continue
            if first == 13:
                if pos + 1 == size:
                    break
                if buf[pos + 1] != 10:
                    raise RemoteProtocolError("a carriage return not followed by a newline")
                events.append(HEARTBEAT)
                pos += 2
                continue
            end = buf.find(b"\n\n", pos)
            head_end = end + 2
            if crlf:
                crlf_end = buf.find(b"\n\r\n", pos, size if end < 0 else end)
                if crlf_end >= 0:
                    end, head_end = crlf_end, crlf_end + 3
            if end < 0:
                self._check_partial_head(buf, pos)
                break
            command, headers = self._parse_head(buf, pos, end)
            pos = self._parse_body(buf, head_end, command, headers, events, head_end - pos)
            if pos < 0:
                return events
        self._buf = buf[pos:]
        return events

    def _check_partial_head(self, buf: bytes, pos: int) -> None:
        pending = len(buf) - pos
        if pending > self.max_frame_size:
            raise RemoteProtocolError(
                f"a frame head is larger than max_frame_size={self.max_frame_size}"
            )
        if pending <= self.max_header_length:
            return
        last_line = len(buf) - buf.rfind(b"\n", pos) - 1
        if last_line > self.max_header_length:
            raise RemoteProtocolError(
                f"a header line is longer than max_header_length={self.max_header_length}"
            )
        if buf.count(b"\n", pos) > self.max_header_count + 1:
            raise RemoteProtocolError(
                f"a frame has more than max_header_count={self.max_header_count} headers"
            )

    def _parse_head(self, buf: bytes, start: int, end: int) -> tuple[str, Headers]:
        block = buf[start:end]
        if b"\0" in block:
            raise RemoteProtocolError("a NUL byte inside a frame head")
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(f"frame head is not valid UTF-8: {exc}") from None
        lines = text.split("\n")
        version = self._version
        if version == "1.0":
            lines = [line.rstrip(" \r") for line in lines]
        elif "\r" in text:
            if version == "1.2":
                lines = [line[:-1] if line[-1:] == "\r" else line for line in lines]
            if any("\r" in line for line in lines):
                raise RemoteProtocolError("a raw carriage return inside a header line")
        command = lines[0]
        if not command.isupper():
            command = command.upper()
        if command not in COMMANDS:
            raise RemoteProtocolError(f"unknown command {lines[0][:64]!r}")
        del lines[0]
        count = len(lines)
        if count > self.max_header_count:
            raise RemoteProtocolError(
                f"a frame has more than max_header_count={self.max_header_count} headers"
            )
        if len(block) > self.max_header_length:
            longest = max(len(line.encode()) for line in lines) if lines else 0
            if longest > self.max_header_length:
                raise RemoteProtocolError(
                    f"a header line is longer than max_header_length={self.max_header_length}"
                )
        pairs: list[tuple[str, str]] = []
        append = pairs.append
        escaped = version != "1.0" and command not in UNESCAPED_COMMANDS
        simple = not escaped or (
            "\\" not in text and (version != "1.2" or self.lenient or text.count(":") == count)
        )
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon or not name:
                raise RemoteProtocolError(f"malformed header line {line[:64]!r}")
            if not simple:
                name, value = self._decode_header(name, value)
            elif version == "1.0":
                value = value.lstrip(" ")
            append((name, value))
        return command, Headers._trusted(tuple(pairs))

    def _decode_header(self, name: str, value: str) -> tuple[str, str]:
        if self._version == "1.2" and not self.lenient and ":" in value:
            raise RemoteProtocolError(f"a raw colon in the value of header {name!r}")
        table = DECODE[self._version]
        if "\\" in name:
            name = unescape(name, table, self.lenient)
        if "\\" in value:
            value = unescape(value, table, self.lenient)
        return name, value

    def _parse_body(
        self,
        buf: bytes,
        start: int,
        command: str,
        headers: Headers,
        events: list[Event],
        head_size: int,
    ) -> int:
        """Parse the body starting at ``start``; return the position after it.

        Returns -1 when the body is incomplete: the parser then keeps what it
        has and waits for more in :meth:`_continue_body`.
        """
        budget = self.max_frame_size - head_size
        length_text = headers.get("content-length")
        size = len(buf)
        if length_text is not None:
            if not (length_text.isascii() and length_text.isdigit()):
                raise RemoteProtocolError(f"content-length is not a number: {length_text!r}")
            length = int(length_text)
            if length > budget:
                raise RemoteProtocolError(
                    f"content-length {length} exceeds max_frame_size={self.max_frame_size}"
                )
            if length and command not in BODY_COMMANDS:
                raise RemoteProtocolError(f"a {command} frame may not have a body")
            stop = start + length
            if stop < size:
                if buf[stop] != 0:
                    raise RemoteProtocolError("content-length bytes are not followed by NUL")
                events.append(trusted_frame(command, headers, buf[start:stop]))
                return stop + 1
            need = length + 1
        else:
            stop = buf.find(b"\0", start)
            if stop >= 0:
                if stop - start > budget:
                    raise RemoteProtocolError(
                        f"a body exceeds max_frame_size={self.max_frame_size}"
                    )
                if stop > start and command not in BODY_COMMANDS:
                    raise RemoteProtocolError(f"a {command} frame may not have a body")
                events.append(trusted_frame(command, headers, buf[start:stop]))
                return stop + 1
            need = _UNTIL_NUL
        self._command, self._headers, self._need, self._budget = command, headers, need, budget
        self._parts = [memoryview(buf)[start:]]
        self._have = size - start
        self._check_body_budget()
        return -1

    def _check_body_budget(self) -> None:
        if self._need == _UNTIL_NUL:
            if self._have > self._budget:
                raise RemoteProtocolError(f"a body exceeds max_frame_size={self.max_frame_size}")
            if self._have and self._command not in BODY_COMMANDS:
                raise RemoteProtocolError(f"a {self._command} frame may not have a body")

    def _continue_body(self, data: bytes, events: list[Event]) -> bytes | None:
        """Add ``data`` to an incomplete body; return what follows the frame, if complete."""
        if self._need == _UNTIL_NUL:
            stop = data.find(b"\0")
            if stop < 0:
                self._parts.append(data)
                self._have += len(data)
                self._check_body_budget()
                return None
            self._have += stop
            self._check_body_budget()
            last = memoryview(data)[:stop]
        else:
            missing = self._need - self._have
            if len(data) < missing:
                self._parts.append(data)
                self._have += len(data)
                return None
            stop = missing - 1
            if data[stop] != 0:
                raise RemoteProtocolError("content-length bytes are not followed by NUL")
            last = memoryview(data)[:stop]
        self._parts.append(last)
        body = b"".join(self._parts)
        events.append(trusted_frame(self._command, self._headers, body))
        self._parts = []
        self._need = _NO_BODY
        self._headers = Headers()
        return data[stop + 1 :]
