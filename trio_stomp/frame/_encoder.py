"""The frame encoder: Frame in, bytes out (or LocalProtocolError, and no bytes)."""

from __future__ import annotations

from .._errors import LocalProtocolError
from ._escaping import ENCODE
from ._frame import BODY_COMMANDS, COMMANDS, UNESCAPED_COMMANDS, Frame, check_version

_SPECIAL = ("\n", "\r", ":", "\\", "\0")


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
        body, or a newline, colon or padding that ``version`` cannot escape.
        Nothing is encoded.
    """
    check_version(version)
    command = frame.command
    if command not in COMMANDS:
        raise LocalProtocolError(f"unknown command {command!r}")
    body = frame.body
    if body and command not in BODY_COMMANDS:
        raise LocalProtocolError(f"a {command} frame may not have a body")
    pairs = frame.headers.items()
    if pairs:
        blob = "\x01".join([item for pair in pairs for item in pair])
        if any(char in blob for char in _SPECIAL) or (version == "1.0" and " " in blob):
            lines = [_header_line(name, value, version, command) for name, value in pairs]
            text = "\n".join(lines)
        else:
            text = "\n".join(map(":".join, pairs))
            if text[0] == ":" or "\n:" in text:
                raise LocalProtocolError("a header name may not be empty")
        head = f"{command}\n{text}\n"
    else:
        head = f"{command}\n"
    stated = frame.headers.get("content-length")
    if stated is not None:
        if stated != str(len(body)):
            raise LocalProtocolError(
                f"content-length header {stated!r} disagrees with a body of {len(body)} bytes"
            )
    elif body:
        if content_length:
            head = f"{head}content-length:{len(body)}\n"
        elif b"\0" in body:
            raise LocalProtocolError("a body containing NUL needs a content-length header")
    try:
        encoded = head.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"a header cannot be encoded as UTF-8: {exc}") from None
    return b"".join((encoded, b"\n", body, b"\0"))


def _header_line(name: str, value: str, version: str, command: str) -> str:
    if not name:
        raise LocalProtocolError("a header name may not be empty")
    if "\0" in name or "\0" in value:
        raise LocalProtocolError(f"header {name!r} contains a NUL byte")
    if version != "1.0" and command not in UNESCAPED_COMMANDS:
        table = ENCODE[version]
        return f"{name.translate(table)}:{value.translate(table)}"
    # No escaping here: what the parser cannot give back must not be sent.
    for text in (name, value):
        if "\n" in text or "\r" in text:
            raise LocalProtocolError(
                f"header {name!r} has a line break, which {command} in STOMP {version} "
                "cannot carry (no escaping)"
            )
    if ":" in name:
        raise LocalProtocolError(f"header name {name!r} has a colon, which cannot be escaped here")
    if version == "1.0" and value != value.strip(" "):
        raise LocalProtocolError(
            f"header {name!r} has leading or trailing spaces, which STOMP 1.0 strips"
        )
    return f"{name}:{value}"
