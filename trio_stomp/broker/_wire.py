"""MESSAGE frames in parts: what a message says once, what each delivery adds.

A message is delivered at least once and often more (a topic's subscribers,
redeliveries), and what its MESSAGE frame says about it never changes: its
``destination`` and ``message-id``, its own headers, its ``content-length``.
:func:`message_parts` encodes those once, when the broker accepts the SEND;
:func:`delivery` puts a MESSAGE together from them and the little a delivery
adds (``subscription``, ``ack``, ``redelivered``): byte joins, no escaping, no
header objects.

The parts are the wire form of STOMP 1.1 and 1.2, which escape headers alike
except for a carriage return (1.2 escapes it, 1.1 cannot carry one). A
message whose headers hold a carriage return, a line feed or a NUL, or an
empty name, has no parts (``b""``); neither has a message restored from the
store. Those, and every delivery to a 1.0 client, take the careful way,
:func:`~trio_stomp.broker._negotiation.encode_message`, whose bytes the
parts equal wherever both apply (a property test holds them equal).

This module is compiled with mypyc beside the codec when the build can (see
setup.py); it imports nothing that is not.
"""

from __future__ import annotations

from typing import Final

#: What a header line may not hold for the parts to be its wire form.
_CAREFUL: Final = ("\r", "\n", "\0")


def escape_line(name: str, value: str) -> str | None:
    """``name:value`` and a line feed, escaped as 1.1 and 1.2 both read it; None when
    the pair needs the careful way (a CR, LF or NUL in it, or an empty name)."""
    text = f"{name}\0{value}"
    if not name or text.count("\0") != 1 or "\r" in text or "\n" in text:
        return None
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if ":" in text:
        text = text.replace(":", "\\c")
    return text.replace("\0", ":") + "\n"


def kept_headers(
    headers: tuple[tuple[str, str], ...], reserved: frozenset[str]
) -> tuple[tuple[str, str], ...]:
    """``headers`` without the ``reserved`` ones (a SEND's own headers, as a message keeps them)."""
    for name, _ in headers:
        if name in reserved:
            return tuple([pair for pair in headers if pair[0] not in reserved])
    return headers


def message_parts(
    destination: str, message_id: str, headers: tuple[tuple[str, str], ...], size: int
) -> tuple[bytes, bytes]:
    """The two parts of a message's MESSAGE frames, for a body of ``size`` bytes.

    Returns:
      ``(head, tail)``: ``head`` is the command line and the ``destination``
      and ``message-id`` lines; ``tail`` the message's own header lines, its
      ``content-length`` line (none for an empty body, as
      :func:`~trio_stomp.frame.encode` has it) and the blank line. A
      delivery's lines go between them, the body after. ``(b"", b"")`` when
      the message needs the careful way.
    """
    destination_line = escape_line("destination", destination)
    id_line = escape_line("message-id", message_id)
    if destination_line is None or id_line is None:
        return b"", b""
    lines = [f"MESSAGE\n{destination_line}{id_line}"]
    for name, value in headers:
        line = escape_line(name, value)
        if line is None:
            return b"", b""
        lines.append(line)
    lines.append(f"content-length:{size}\n\n" if size else "\n")
    try:
        head = lines[0].encode()
        tail = "".join(lines[1:]).encode()
    except UnicodeEncodeError:  # (a lone surrogate: the careful way says what is wrong)
        return b"", b""
    return head, tail


def subscription_line(sub_id: str) -> bytes:
    """The ``subscription`` line of a subscription's deliveries; b"" when its id
    needs the careful way."""
    line = escape_line("subscription", sub_id)
    if line is None:
        return b""
    try:
        return line.encode()
    except UnicodeEncodeError:
        return b""


def delivery(
    head: bytes, subscription: bytes, ack_id: str, redelivered: bool, tail: bytes, body: bytes
) -> bytes:
    """One MESSAGE frame from a message's parts (:func:`message_parts`), its
    subscription's line (:func:`subscription_line`), the delivery's ``ack``
    id ("" for none) and whether it is redelivered."""
    if ack_id:
        if redelivered:
            middle = b"ack:" + ack_id.encode() + b"\nredelivered:true\n"
        else:
            middle = b"ack:" + ack_id.encode() + b"\n"
        return b"".join((head, subscription, middle, tail, body, b"\0"))
    if redelivered:
        return b"".join((head, subscription, b"redelivered:true\n", tail, body, b"\0"))
    return b"".join((head, subscription, tail, body, b"\0"))
