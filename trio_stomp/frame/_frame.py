"""Frame and Heartbeat: the two events of the wire format."""

from __future__ import annotations

from typing import Final, Literal

import attrs

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


@attrs.frozen(repr=False)
class Frame:
    """One STOMP frame: a command, its headers and a body.

    The command is stored upper-case. ``headers`` accepts a mapping or a
    sequence of pairs and is kept as :class:`Headers` (order and repeats
    preserved). Frames are values: compare and hash them freely.
    """

    command: str = attrs.field(converter=_to_command)
    headers: Headers = attrs.field(factory=Headers, converter=_to_headers)
    body: bytes = attrs.field(default=b"", converter=_to_body)

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 64 else self.body[:64] + b"..."
        return f"Frame({self.command!r}, {list(self.headers.items())!r}, {body!r})"


@attrs.frozen
class Heartbeat:
    """An end-of-line between frames: the peer is alive and had nothing to say."""


#: The one Heartbeat the parser hands out (they are all equal).
HEARTBEAT: Final = Heartbeat()
