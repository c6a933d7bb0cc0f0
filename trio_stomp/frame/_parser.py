"""The sans-IO frame parser: bytes in, frames and heart-beats out."""

from __future__ import annotations

from typing import Final

from ._errors import RemoteProtocolError
from ._frame import (
    BODY_COMMANDS,
    HEARTBEAT,
    Frame,
    Heartbeat,
    Version,
    check_version,
    trusted_frame,
)
from ._head import (
    COMMAND_NAMES,
    command_named,
    crlf_error,
    decode_head,
    find_blank_line,
    parse_head,
    usual_head,
)
from ._headers import Headers
from ._shape import usual_head_end

#: The largest frame a parser accepts unless told otherwise (``max_frame_size``), bytes.
DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024
#: The most headers in one frame a parser accepts unless told otherwise.
DEFAULT_MAX_HEADER_COUNT: Final = 1000
#: The longest header line a parser accepts unless told otherwise, bytes.
DEFAULT_MAX_HEADER_LENGTH: Final = 64 * 1024

Event = Frame | Heartbeat

_NO_BODY: Final = -2  # no frame head parsed: looking for the next head
_UNTIL_NUL: Final = -1  # body without content-length: runs to the first NUL

#: No command line is longer than this (the longest command has 11
#: characters), so a longer partial one fails at once instead of waiting.
_MAX_COMMAND_LINE: Final = 32


class FrameParser:
    """Incremental, sans-IO STOMP parser.

    Feed it whatever bytes arrive; it returns every complete event so far. It
    does no I/O and reads no clock, so it behaves the same whether the stream
    arrives whole or one byte at a time.

    Args:
      version: the STOMP version whose rules apply ("1.0", "1.1" or "1.2").
        CONNECT, STOMP and CONNECTED headers are never unescaped, in any
        version, so a server or client can start at the default and set
        :attr:`version` once the version is negotiated. The version in force
        when :meth:`feed` is called applies to every frame that call returns;
        ``feed(data, pause_after_frame=True)`` stops after the first frame,
        so the frames that arrive in the same chunk as CONNECTED are parsed
        (by :meth:`resume`) under the version it negotiated.
      max_frame_size: the largest frame accepted, in bytes: from the first
        byte of the command to the last byte of the body (the NUL that ends
        the frame, and any end-of-lines after it, do not count).
      max_header_count: the most header lines one frame may carry.
      max_header_length: the longest header line, in bytes, not counting its
        end-of-line (LF, or CR LF where the version allows it).
      lenient: accept undefined escape sequences literally and, in 1.2, raw
        colons in header values, for peers that do not escape. Off by default:
        the 1.2 spec makes both fatal.

    Limits are enforced as soon as a violation is certain (a content-length
    too large fails before the body arrives, an over-long header line fails
    before its end-of-line), so a peer cannot make the parser buffer more than
    the limits allow. A partial frame head is scanned incrementally, so even a
    head trickled one byte per :meth:`feed` costs linear time.

    Beyond the grammar, two things the specs' own examples do are accepted: a
    head ended by the NUL right after its last line, with no blank line (the
    1.1 and 1.2 DISCONNECT and RECEIPT examples), and in 1.0 a blank line
    holding spaces (1.0 strips trailing spaces from every line).
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
        self._failed: str | None = None
        # A partial frame head (or a lone CR that may start a CR LF), and how
        # far it has been checked: it is walked once, line by line, as it grows.
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already looked at
        self._line_start = 0  # where the line being received starts in _buf
        self._lines = 0  # complete lines (command line included) in _buf
        # While a body is incomplete: what we know of its frame so far.
        self._need = _NO_BODY  # body bytes + NUL still to gather, or _UNTIL_NUL
        self._parts: list[bytes | memoryview] = []
        self._have = 0  # body bytes in _parts
        self._budget = 0  # body bytes allowed by max_frame_size
        self._command = ""
        self._headers = Headers()
        # Bytes after a frame that ended a pause_after_frame feed, unparsed.
        self._held = b""
        self._pause = False
        self._ended = False

    @property
    def buffered(self) -> int:
        """Bytes held for the frame not yet complete (its head or body so far)."""
        return len(self._buf) + self._have + len(self._held)

    @property
    def version(self) -> Version:
        """The STOMP version whose rules apply to the frames parsed next."""
        return self._version

    @version.setter
    def version(self, version: str) -> None:
        self._version = check_version(version)

    def feed(
        self, data: bytes | bytearray | memoryview, *, pause_after_frame: bool = False
    ) -> list[Event]:
        """Add ``data`` and return every event completed by it, in order.

        ``feed(b"")`` says the stream has ended: a partial frame then is a
        :class:`RemoteProtocolError`, and feeding more data after it is a
        :class:`RuntimeError`.

        Args:
          pause_after_frame: return as soon as one frame is complete, keeping
            the bytes after it unparsed until :meth:`resume` or the next
            :meth:`feed`: for a reply whose content (CONNECTED's version)
            decides how the rest of the stream parses.

        Raises:
          RemoteProtocolError: the bytes are not valid STOMP, or break a limit.
            Its ``events`` are those this call completed before the bad
            bytes: valid, in order, for the caller to act on before failing
            (a message the broker counts as delivered is not lost). The
            parser stays failed: every later call raises again.
        """
        if self._failed is not None:
            raise RemoteProtocolError(f"parser failed earlier: {self._failed}")
        if self._ended:
            raise RuntimeError("feed() after the end of the stream (feed(b''))")
        end = not data
        self._pause = pause_after_frame and not end
        events: list[Event] = []
        try:
            if self._held:
                data, self._held = self._held + data, b""
            if end:
                self._ended = True
                if data:
                    self._feed(bytes(data), events)
                self._end_of_stream()
                return events
            # bytes() of bytes is free; anything mutable is copied, since
            # the parser may keep a view of it until the frame completes.
            self._feed(bytes(data), events)
            return events
        except RemoteProtocolError as exc:
            self._failed = str(exc)
            exc.events = tuple(events)
            raise

    def resume(self, *, pause_after_frame: bool = False) -> list[Event]:
        """Parse what a paused :meth:`feed` kept, under the current :attr:`version`.

        Returns the events in it (none if nothing was kept); does not end
        the stream. Call it before feeding more: the kept bytes are checked
        against the limits only as they are parsed.

        Raises:
          RemoteProtocolError: as :meth:`feed`, also when the parser failed
            earlier.
        """
        if self._failed is not None:
            raise RemoteProtocolError(f"parser failed earlier: {self._failed}")
        if not self._held:
            return []
        held, self._held = self._held, b""
        return self.feed(held, pause_after_frame=pause_after_frame)

    @property
    def in_frame(self) -> bool:
        """True when part of a frame is buffered (EOF now would be an error), or
        bytes that a paused :meth:`feed` kept hold more than end-of-lines."""
        return (
            self._need != _NO_BODY
            or bool(self._buf.strip(b"\r\n"))
            or bool(self._held.strip(b"\r\n"))
        )

    def _end_of_stream(self) -> None:
        if self.in_frame or self._buf:
            raise RemoteProtocolError("the stream ended in the middle of a frame")

    def _feed(self, data: bytes, events: list[Event]) -> None:
        pos = 0
        if self._need != _NO_BODY:
            after = self._continue_body(data, events)
            if after is None:
                return
            pos = after
            if self._pause:
                self._held = data[pos:]
                return
        elif self._buf:
            merged = self._continue_head(data)
            if merged is None:
                return
            data = merged
        self._parse_frames(data, pos, events)

    def _parse_frames(self, buf: bytes, pos: int, events: list[Event]) -> None:
        """Parse every complete event in ``buf[pos:]``; keep what remains.

        One event per iteration: a heart-beat, or a frame whose head
        :func:`usual_head` reads (where :func:`usual_head_end` finds it) or else
        :meth:`_exact_head`, and whose body :meth:`_body_end` bounds. The
        common case (a whole frame in ``buf``) copies the body once.
        """
        size = len(buf)
        append = events.append
        version = self._version
        usual = version != "1.0"
        while pos < size:
            first = buf[pos]
            if first == 10:  # LF: a heart-beat
                append(HEARTBEAT)
                pos += 1
                continue
            if first == 13:  # CR LF: a heart-beat too
                if pos + 1 == size:
                    break
                if buf[pos + 1] != 10:
                    raise RemoteProtocolError("a carriage return not followed by a newline")
                append(HEARTBEAT)
                pos += 2
                continue
            end = usual_head_end(buf, pos) if usual else -1
            head = usual_head(buf[pos:end], version, self) if end >= 0 else None
            if head is not None:
                command, headers, length = head
                body_start = end + 2
                nul_ended = False
            else:
                exact = self._exact_head(buf, pos)
                if exact is None:
                    break
                command, headers, length, body_start, nul_ended = exact
            budget = self.max_frame_size - (body_start - pos)
            if budget < 0:
                raise RemoteProtocolError(
                    f"a frame head is larger than max_frame_size={self.max_frame_size}"
                )
            stop = self._body_end(buf, body_start, command, length, budget, nul_ended)
            if stop is None:
                self._start_body(command, headers, length, budget, buf, body_start)
                return
            append(trusted_frame(command, headers, buf[body_start:stop]))
            pos = stop + 1
            if self._pause:
                self._held = buf[pos:]
                return
        if pos < size:
            self._buffer_head(buf, pos)

    def _exact_head(
        self, buf: bytes, pos: int
    ) -> tuple[str, Headers, int | None, int, bool] | None:
        """The head starting at ``pos`` if it is all in ``buf``, by the exact rules:
        its command, headers and content-length, where the body starts, and
        whether the frame's NUL ended it. None if incomplete.

        For what :func:`usual_head` leaves: a partial head, CR LF lines,
        1.0, a NUL right after the headers, bad UTF-8, every error.
        """
        found = self._find_head(buf, pos)
        if found is None:
            return None
        end, body_start, nul_ended = found
        text = decode_head(buf[pos:end])
        command, headers, length = parse_head(text, end - pos, self._version, self)
        return command, headers, length, body_start, nul_ended

    def _body_end(
        self,
        buf: bytes,
        body_start: int,
        command: str,
        length: int | None,
        budget: int,
        nul_ended: bool,
    ) -> int | None:
        """Where the NUL ending the body that starts at ``body_start`` is; None when the
        body goes on past ``buf``. Checks it against ``budget`` and the command."""
        if length is None:
            stop = buf.find(b"\0", body_start)
            if stop < 0:
                return None
            if stop - body_start > budget:
                raise RemoteProtocolError(f"a body exceeds max_frame_size={self.max_frame_size}")
            if stop > body_start and command not in BODY_COMMANDS:
                raise RemoteProtocolError(f"a {command} frame may not have a body")
            return stop
        if length > budget:
            raise RemoteProtocolError(
                f"content-length {length} exceeds max_frame_size={self.max_frame_size}"
            )
        if length and command not in BODY_COMMANDS:
            raise RemoteProtocolError(f"a {command} frame may not have a body")
        if length and nul_ended:
            raise RemoteProtocolError(
                "a frame with a content-length ended by NUL right after its headers"
            )
        stop = body_start + length
        if stop >= len(buf):
            return None
        if buf[stop] != 0:
            raise RemoteProtocolError("content-length bytes are not followed by NUL")
        return stop

    def _find_head(self, buf: bytes, pos: int) -> tuple[int, int, bool] | None:
        """Find the end of the frame head starting at ``pos``, if it is all there.

        Returns the position of the LF that ends its last line, where the
        body starts, and whether the frame's NUL ended the head (True) or a
        blank line did; None when the head is still incomplete.

        Beyond the grammar, a head that the frame's NUL ends right after its
        last line is accepted: the 1.1 and 1.2 specs show DISCONNECT and
        RECEIPT that way, and it is unambiguous (the frame has no body). A
        NUL anywhere else in a head is an error.
        """
        blank = find_blank_line(buf, pos, self._version)
        nul = buf.find(b"\0", pos, len(buf) if blank is None else blank[0])
        if nul < 0:
            return None if blank is None else (*blank, False)
        line_end = buf.rfind(b"\n", pos, nul)
        rest = buf[line_end + 1 : nul]
        if self._version == "1.0":
            rest = rest.strip(b" \r")
        if line_end < 0 or rest:
            if self._version == "1.1" and buf.find(b"\r\n", pos, nul) >= 0:
                raise crlf_error()  # its CR LF blank line went unseen: not 1.1's
            raise RemoteProtocolError("a NUL byte inside a frame head")
        return line_end, nul, True

    def _start_body(
        self,
        command: str,
        headers: Headers,
        length: int | None,
        budget: int,
        buf: bytes,
        start: int,
    ) -> None:
        """Keep the start of a body that ``buf`` does not complete."""
        need = _UNTIL_NUL if length is None else length + 1
        self._command, self._headers, self._need, self._budget = command, headers, need, budget
        # A view, not a copy: the body is copied once, when it is complete.
        self._parts = [memoryview(buf)[start:]]
        self._have = len(buf) - start
        if need == _UNTIL_NUL:
            self._check_body_budget()

    def _check_body_budget(self) -> None:
        if self._have > self._budget:
            raise RemoteProtocolError(f"a body exceeds max_frame_size={self.max_frame_size}")
        if self._have and self._command not in BODY_COMMANDS:
            raise RemoteProtocolError(f"a {self._command} frame may not have a body")

    def _continue_body(self, data: bytes, events: list[Event]) -> int | None:
        """Add ``data`` to an incomplete body.

        Returns the position in ``data`` after the frame once it is complete,
        else None.
        """
        if self._need == _UNTIL_NUL:
            stop = data.find(b"\0")
            self._have += len(data) if stop < 0 else stop
            self._check_body_budget()
            if stop < 0:
                self._parts.append(data)
                return None
        else:
            missing = self._need - self._have
            if len(data) < missing:
                self._parts.append(data)
                self._have += len(data)
                return None
            stop = missing - 1
            if data[stop] != 0:
                raise RemoteProtocolError("content-length bytes are not followed by NUL")
        self._parts.append(memoryview(data)[:stop])
        events.append(trusted_frame(self._command, self._headers, b"".join(self._parts)))
        self._parts = []
        self._have = 0
        self._need = _NO_BODY
        self._headers = Headers()
        return stop + 1

    def _buffer_head(self, buf: bytes, pos: int) -> None:
        """Keep the partial head ``buf[pos:]`` and check what is there of it."""
        self._buf = bytearray(memoryview(buf)[pos:])
        self._scanned = self._line_start = self._lines = 0
        self._walk_head()

    def _continue_head(self, data: bytes) -> bytes | None:
        """Add ``data`` to a partial head.

        Returns the buffered bytes with ``data`` once the head may be complete
        (a blank line or a NUL arrived), for :meth:`_parse_frames` to parse
        from the start; else checks the limits on what arrived and returns None.
        """
        buf = self._buf
        old = len(buf)
        buf += data
        if buf[0] == 13 or buf.find(b"\0", old) >= 0 or self._walk_head():
            merged = bytes(buf)
            self._buf = bytearray()
            return merged
        return None

    def _walk_head(self) -> bool:
        """Check the lines of the partial head that arrived since the last call.

        Returns True when a blank line ends the head. Each byte is looked at
        once however the head is chunked: this is what keeps a trickled head
        from costing quadratic time.
        """
        buf = self._buf
        version = self._version
        crlf = version != "1.1"
        line_start = self._line_start
        line_end = buf.find(b"\n", self._scanned)
        while line_end >= 0:
            length = line_end - line_start
            if crlf and length and buf[line_end - 1] == 13:
                length -= 1
            if self._lines == 0:
                # The command line is complete: an unknown command fails now.
                self._check_command(buf[line_start:line_end])
            elif length == 0 or (version == "1.0" and not buf[line_start:line_end].strip(b" \r")):
                return True
            elif length > self.max_header_length:
                raise RemoteProtocolError(
                    f"a header line is longer than max_header_length={self.max_header_length}"
                )
            self._lines += 1
            if self._lines - 1 > self.max_header_count:
                raise RemoteProtocolError(
                    f"a frame has more than max_header_count={self.max_header_count} headers"
                )
            line_start = line_end + 1
            line_end = buf.find(b"\n", line_start)
        self._line_start = line_start
        self._scanned = len(buf)
        # The line still arriving: fail as soon as it is certainly too long.
        length = len(buf) - line_start
        if crlf and length and buf[-1] == 13:
            length -= 1
        if self._lines == 0 and length > _MAX_COMMAND_LINE:
            raise RemoteProtocolError(f"unknown command {bytes(buf[:64])!r}...")
        if self._lines and length > self.max_header_length:
            raise RemoteProtocolError(
                f"a header line is longer than max_header_length={self.max_header_length}"
            )
        # (A NUL right after the headers could still end a head of this size.)
        if len(buf) > self.max_frame_size:
            raise RemoteProtocolError(
                f"a frame head is larger than max_frame_size={self.max_frame_size}"
            )
        return False

    def _check_command(self, raw: bytearray) -> None:
        try:
            line = raw.decode()
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(f"frame head is not valid UTF-8: {exc}") from None
        if self._version == "1.0":
            line = line.rstrip(" \r")
        elif self._version == "1.2" and line[-1:] == "\r":
            line = line[:-1]
        if line not in COMMAND_NAMES:
            command_named(line, self._version)
