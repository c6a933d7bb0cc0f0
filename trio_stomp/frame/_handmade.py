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

from collections.abc import Iterable, Mapping
from typing import Final

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

    Names and values go in as they are when they are ``str`` and hold no
    colon, LF, CR, backslash or NUL (text that reads the same escaped or not,
    in 1.1 and 1.2), and no name is empty or one :data:`SEND_RESERVED_HEADERS`
    keeps for the client. Names checked once are remembered (a sender uses a
    few names over and over; up to :data:`_NAMES_KEPT` of them), and a value
    of letters and digits alone needs one test. Anything else is None: the
    encoder's path escapes it, or refuses it with a clear error.
    """
    lines = []
    # Typed as objects: the caller's dict may hold anything (compiled, a str
    # annotation would be checked, and raise, before the test below).
    pairs: Iterable[tuple[object, object]] = headers.items()
    for name, value in pairs:
        if type(name) is not str or type(value) is not str:
            return None  # the general path says what is wrong, or takes a str subclass
        if name not in _PLAIN_NAMES:
            if not name or not _plain(name) or name in SEND_RESERVED_HEADERS:
                return None
            if len(_PLAIN_NAMES) < _NAMES_KEPT:
                _PLAIN_NAMES.add(name)
        if not (value.isalnum() or _plain(value)):
            return None
        lines.append(f"{name}:{value}\n")
    return "".join(lines)


#: Header names :func:`send_lines` found plain, and how many it remembers.
_PLAIN_NAMES: Final[set[str]] = set()
_NAMES_KEPT: Final = 256


def _plain(text: str) -> bool:
    """True when ``text`` holds nothing that escaping changes, nor CR or NUL."""
    return not ("\n" in text or ":" in text or "\\" in text or "\r" in text or "\0" in text)


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
