"""Frame and Heartbeat: the two events of the wire format."""

from __future__ import annotations

from typing import Final, Literal

from ._headers import Headers, HeadersLike

Version = Literal["1.0", "1.1", "1.2"]
VERSIONS: Final[tuple[Version, ...]] = ("1.0", "1.1", "1.2")

CLIENT_COMMANDS: Final = frozenset(
    {
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "ACK",
        "NACK",
        "DISCONNECT",
        "CONNECT",
        "STOMP",
    }
)
SERVER_COMMANDS: Final = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
COMMANDS: Final = CLIENT_COMMANDS | SERVER_COMMANDS
#: Only these frames may carry a body (STOMP 1.1 and 1.2, "Frames and Headers").
BODY_COMMANDS: Final = frozenset({"SEND", "MESSAGE", "ERROR"})
#: Frames whose headers are never escaped: they are exchanged before the
#: version (and so the escaping rules) is known.
UNESCAPED_COMMANDS: Final = frozenset({"CONNECT", "STOMP", "CONNECTED"})


def check_version(version: str) -> Version:
    """Return ``version`` if it is a STOMP version we speak, else raise ValueError."""
    if version not in VERSIONS:
        raise ValueError(f"unknown STOMP version {version!r}; expected one of {VERSIONS}")
    return version


def _to_headers(value: HeadersLike) -> Headers:
    return value if isinstance(value, Headers) else Headers(value)


def _to_command(value: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"command must be str, got {value!r}")
    return value.upper()


def _to_body(value: bytes | bytearray | memoryview) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"body must be bytes, got {type(value).__name__}")


class Frame:
    """One STOMP frame: a command, its headers and a body.

    The command is stored upper-case. ``headers`` accepts a mapping or a
    sequence of pairs and is kept as :class:`Headers` (order and repeats
    preserved). Frames are values: compare and hash them freely; their
    attributes are read-only.
    """

    __slots__ = ("_body", "_command", "_headers")

    _command: str
    _headers: Headers
    _body: bytes

    def __init__(
        self,
        command: str,
        headers: HeadersLike = (),
        body: bytes | bytearray | memoryview = b"",
    ) -> None:
        self._command = _to_command(command)
        self._headers = _to_headers(headers)
        self._body = _to_body(body)

    @property
    def command(self) -> str:
        """The command, upper-case (``"SEND"``, ``"MESSAGE"``...)."""
        return self._command

    @property
    def headers(self) -> Headers:
        """The headers, in wire order, repeats kept."""
        return self._headers

    @property
    def body(self) -> bytes:
        """The body (empty for frames that carry none)."""
        return self._body

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Frame):
            return (
                self._command == other._command
                and self._body == other._body
                and self._headers == other._headers
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._command, self._headers, self._body))

    def __repr__(self) -> str:
        body = self._body if len(self._body) <= 64 else self._body[:64] + b"..."
        return f"Frame({self._command!r}, {list(self._headers.items())!r}, {body!r})"


class _Parsed(Frame):
    """A frame the parser built from parts it has checked: no conversion."""

    __slots__ = ()

    def __init__(self, command: str, headers: Headers, body: bytes) -> None:
        self._command = command
        self._headers = headers
        self._body = body


def trusted_frame(command: str, headers: Headers, body: bytes) -> Frame:
    """Build a Frame from parts the parser has already validated.

    Skips the conversions: this is the parser's hot path.
    """
    return _Parsed(command, headers, body)


class Heartbeat:
    """An end-of-line between frames: the peer is alive and had nothing to say."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Heartbeat):
            return True
        return NotImplemented

    def __hash__(self) -> int:
        return hash(Heartbeat)

    def __repr__(self) -> str:
        return "Heartbeat()"


#: The one Heartbeat the parser hands out (they are all equal).
HEARTBEAT: Final = Heartbeat()
