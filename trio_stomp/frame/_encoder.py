"""The frame encoder: Frame in, bytes out (or LocalProtocolError, and no bytes)."""

from __future__ import annotations

from typing import Final

from ._errors import LocalProtocolError
from ._escaping import escape
from ._frame import BODY_COMMANDS, COMMANDS, UNESCAPED_COMMANDS, VERSIONS, Frame, check_version
from ._headers import Headers

_Pairs = tuple[tuple[str, str], ...]
_VERSIONS: Final = frozenset(VERSIONS)


def encode(frame: Frame, version: str = "1.2", *, content_length: bool = True) -> bytes:
    """Encode ``frame`` for the wire under the rules of ``version``.

    A frame with a body gets a ``content-length`` header (after its own
    headers) unless it already carries a correct one. ``content_length=False``
    leaves it off, for text bodies that a broker should map to a text message
    (ActiveMQ's TextMessage); a body containing NUL cannot go without it.

    Raises:
      LocalProtocolError: the frame cannot be represented in ``version``: an
        unknown command, a body on a frame that may not carry one, a header
        with NUL, an empty name, a content-length that disagrees with the
        body, or a newline, carriage return, colon or padding that ``version``
        (or an unescaped CONNECT, STOMP or CONNECTED frame) cannot carry.
        Nothing is encoded.
      ValueError: ``version`` is not a STOMP version.
    """
    if version not in _VERSIONS:
        check_version(version)
    command = frame.command
    body = frame.body
    if command not in BODY_COMMANDS:
        _check_bodiless(command, body)
    headers = frame.headers
    pairs = headers.items()
    lines = _header_lines(pairs, version, command) if pairs else ""
    # The name has no character that escaping changes, so a content-length header
    # shows in the escaped lines as is (1.0 names are case-insensitive).
    mentioned = "content-length" in (lines if version != "1.0" else lines.lower())
    if mentioned and _states_length(headers, version, len(body)):
        head = f"{command}\n{lines}\n"
    elif body and content_length:
        head = f"{command}\n{lines}content-length:{len(body)}\n\n"
    elif body and b"\0" in body:
        raise LocalProtocolError("a body containing NUL needs a content-length header")
    else:
        head = f"{command}\n{lines}\n"
    try:
        encoded = head.encode()
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"a header cannot be encoded as UTF-8: {exc}") from None
    return b"".join((encoded, body, b"\0"))


def _check_bodiless(command: str, body: bytes) -> None:
    if command not in COMMANDS:
        raise LocalProtocolError(f"unknown command {command!r}")
    if body:
        raise LocalProtocolError(f"a {command} frame may not have a body")


def _header_lines(pairs: _Pairs, version: str, command: str) -> str:
    """The header lines, each ended by a newline, escaped as ``version`` wants."""
    if version == "1.0" or command in UNESCAPED_COMMANDS:
        return _raw_lines(pairs, version, command) + "\n"
    # The hot path: escape all names and values as one string instead of one by
    # one. Pairs are joined with newlines and names to values with NUL (which no
    # header may hold); when the counts show neither inside a header and no name
    # is empty (nor, in 1.1, a CR), escaping the rest and turning NUL into ":"
    # gives the lines.
    # Anything else takes the careful path.
    lines = "\n".join(map("\0".join, pairs))
    count = len(pairs)
    if (
        lines.count("\0") != count
        or lines.count("\n") != count - 1
        or lines[0] == "\0"
        or "\n\0" in lines
        or (version == "1.1" and "\r" in lines)
    ):
        return _escaped_lines(pairs, version) + "\n"
    if "\\" in lines:
        lines = lines.replace("\\", "\\\\")
    if ":" in lines:
        lines = lines.replace(":", "\\c")
    if version == "1.2" and "\r" in lines:
        lines = lines.replace("\r", "\\r")
    return lines.replace("\0", ":") + "\n"


def _states_length(headers: Headers, version: str, size: int) -> bool:
    """Whether the headers state a content-length; it must be ``size``.

    Raises:
      LocalProtocolError: the stated length disagrees with the body.
    """
    if version != "1.0":
        stated = headers.get("content-length")
    else:
        # 1.0 header names are case-insensitive, and so is its parser's framing.
        stated = next((v for n, v in headers.items() if n.lower() == "content-length"), None)
    if stated is None:
        return False
    if stated != str(size):
        raise LocalProtocolError(
            f"content-length header {stated!r} disagrees with a body of {size} bytes"
        )
    return True


def _escaped_lines(pairs: _Pairs, version: str) -> str:
    """The header lines of an escaped frame, one header at a time.

    The careful path of :func:`encode`: for headers holding a newline or
    NUL, a carriage return under 1.1, or an empty name (these last three
    refused here).
    """
    return "\n".join([_escaped_line(name, value, version) for name, value in pairs])


def _escaped_line(name: str, value: str, version: str) -> str:
    _check_pair(name, value)
    if version == "1.1" and ("\r" in name or "\r" in value):
        # Sent raw, a peer reads it as the CR of a CR LF line end: RabbitMQ closes
        # the connection, others drop a trailing one. Only 1.2 escapes it (\r).
        raise LocalProtocolError(
            f"header {name!r} has a carriage return, which STOMP 1.1 cannot carry "
            "(it has no escape for it; 1.2 has)"
        )
    return f"{escape(name, version)}:{escape(value, version)}"


def _raw_lines(pairs: _Pairs, version: str, command: str) -> str:
    """The header lines of a frame whose headers are not escaped.

    That is every frame in 1.0, and CONNECT, STOMP and CONNECTED in 1.1 and
    1.2. What the parser could not give back must not be sent.
    """
    for name, value in pairs:
        _check_pair(name, value)
        for text in (name, value):
            if "\n" in text or "\r" in text:
                raise LocalProtocolError(
                    f"header {name!r} has a line break, which {command} in STOMP {version} "
                    "cannot carry (no escaping)"
                )
        if ":" in name:
            raise LocalProtocolError(
                f"header name {name!r} has a colon, which cannot be escaped here"
            )
        if version == "1.0" and value != value.strip(" "):
            raise LocalProtocolError(
                f"header {name!r} has leading or trailing spaces, which STOMP 1.0 strips"
            )
    return "\n".join(map(":".join, pairs))


def _check_pair(name: str, value: str) -> None:
    if not name:
        raise LocalProtocolError("a header name may not be empty")
    if "\0" in name or "\0" in value:
        raise LocalProtocolError(f"header {name!r} contains a NUL byte")
