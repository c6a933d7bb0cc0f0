"""Frames built by hand for the client's hot paths: SEND, and ACK/NACK of 1.2.

Each function gives exactly the bytes :func:`encode` gives for the same
frame (property tests hold them equal), with less work per frame: the
destination's line is encoded once and kept by the caller, a send's own
headers are checked with a few whole-string passes in C instead of one
escape per name and value, and no :class:`Frame` is built. What these
functions cannot give the encoder's bytes for, they decline (None), and the
caller takes the encoder's path, which says what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._encoder import encode
from ._escaping import escape
from ._frame import Frame
from ._spec import SEND_RESERVED_HEADERS


def send_head(destination: str, version: str) -> bytes:
    """The encoded start of ``SEND destination``: its command and destination lines.

    The encoder makes it, so it is the encoder's bytes (escaped as ``version``
    wants).

    Raises:
      LocalProtocolError: ``destination`` cannot be sent in ``version``.
    """
    head = encode(Frame("SEND", [("destination", destination)], b"\0"), version)
    return head[: head.rindex(b"content-length:")]


def plain_send_bytes(head: bytes, body: bytes) -> bytes:
    """A whole SEND from :func:`send_head`'s ``head`` and a non-empty ``body``."""
    return b"%scontent-length:%d\n\n%s\0" % (head, len(body), body)


def send_lines(headers: Mapping[str, str]) -> str | None:
    """The lines (each ended by LF) that STOMP 1.1 and 1.2 give a SEND's ``headers``
    after its destination, when none needs escaping or refusing; else None.

    The names and values are joined into the lines as they are, then the lines
    are checked whole: one colon and one LF per header (so no name or value
    holds either), no backslash, CR or NUL, no empty name, no name that
    :data:`SEND_RESERVED_HEADERS` keeps for the client, only ``str``. Text that
    passes reads the same escaped or not, in 1.1 and 1.2. Anything else is
    None: the encoder's path escapes it, or refuses it with a clear error.
    """
    try:
        lines = "\n".join(map(":".join, headers.items()))
    except TypeError:  # a name or value that is no str
        return None
    count = len(headers)
    if (
        lines.count(":") != count
        or lines.count("\n") != count - 1
        or lines.startswith(":")
        or "\n:" in lines
        or "\\" in lines
        or "\r" in lines
        or "\0" in lines
        or not SEND_RESERVED_HEADERS.isdisjoint(headers)
    ):
        return None
    return lines + "\n"


def send_bytes(head: bytes, lines: str, body: bytes) -> bytes | None:
    """A whole SEND from :func:`send_head`'s ``head``, :func:`send_lines`' ``lines`` and
    a non-empty ``body``; None when ``lines`` cannot be encoded as UTF-8 (a lone
    surrogate: the encoder's path refuses it)."""
    try:
        encoded = lines.encode()
    except UnicodeEncodeError:
        return None
    return b"%s%scontent-length:%d\n\n%s\0" % (head, encoded, len(body), body)


def ack_frame_bytes(command: str, ack_id: str) -> bytes:
    """An ACK or NACK of 1.2 with only the ``id`` header."""
    return f"{command}\nid:{escape(ack_id, '1.2')}\n\n\0".encode()


def ack_frames_bytes(command: str, ack_ids: list[str]) -> bytes:
    """:func:`ack_frame_bytes` of each of ``ack_ids``, joined, built in a few passes over
    all of them at once: the ids are joined on NUL (which no header holds), escaped
    together, and each NUL becomes the end of one frame and the start of the next."""
    joined = "\0".join(ack_ids)
    if joined.count("\0") != len(ack_ids) - 1:  # a NUL in an id: one by one
        return b"".join([ack_frame_bytes(command, ack_id) for ack_id in ack_ids])
    head = f"{command}\nid:"
    frames = escape(joined, "1.2").replace("\0", f"\n\n\0{head}")
    return f"{head}{frames}\n\n\0".encode()
