"""The JSON-lines record format: what the ``file`` sink writes and the tail reads back.

One message per line::

    {"id": "...", "destination": "...", "headers": {...}, "body": "..."}

``destination`` only when a transform set one; ``body`` when the body is
UTF-8 text (and ``body = "auto"`` or ``"text"``), else ``body_base64``.
Writer and reader live together so that the two cannot drift apart.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from json.encoder import encode_basestring

from ..._message import Message

_string = encode_basestring  # str -> JSON string literal (C), non-ASCII kept


def record_lines(messages: Iterable[Message], body: str = "auto") -> list[str]:
    """One JSON line (with its newline) per message, as text.

    Built by hand from the C string encoder: twice as fast as ``json.dumps``
    of a dict, and this runs for every message, so a batch per call. The
    result may hold lone surrogates (a file name that is not UTF-8):
    :func:`encode_record` copes.

    Raises:
      ValueError: ``body="text"`` and a body is not UTF-8.
    """
    string = _string
    lines = []
    for message in messages:
        if body == "base64":
            payload = f'"body_base64":"{base64.b64encode(message.body).decode("ascii")}"'
        else:
            try:
                payload = '"body":' + string(message.body.decode("utf-8"))
            except UnicodeDecodeError:
                if body == "text":
                    raise ValueError('the body is not UTF-8 text (body = "text")') from None
                payload = f'"body_base64":"{base64.b64encode(message.body).decode("ascii")}"'
        fields = []  # (a loop: a comprehension's own frame costs more than it saves here)
        for name, value in message.headers.items():
            fields.append(f"{string(name)}:{string(value)}")
        headers = ",".join(fields)
        if message.destination is None:
            lines.append(f'{{"id":{string(message.id)},"headers":{{{headers}}},{payload}}}\n')
        else:
            destination = string(message.destination)
            lines.append(
                f'{{"id":{string(message.id)},"destination":{destination},'
                f'"headers":{{{headers}}},{payload}}}\n'
            )
    return lines


def record_text(message: Message, body: str = "auto") -> str:
    """One JSON line (with its newline) for ``message``, as text: see :func:`record_lines`.

    Raises:
      ValueError: ``body="text"`` and the body is not UTF-8.
    """
    return record_lines((message,), body)[0]


def encode_record(message: Message, body: str = "auto") -> bytes:
    """One JSON line (with its newline) for ``message``, UTF-8.

    Raises:
      ValueError: ``body="text"`` and the body is not UTF-8.
    """
    text = record_text(message, body)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them, as JSON allows
        return json.dumps(json.loads(text), separators=(",", ":")).encode("ascii") + b"\n"


def parse_record(text: bytes) -> Message:
    """The message of one record line (without its newline).

    Raises:
      ValueError: not a JSON object of the record format.
    """
    record = json.loads(text)
    if not isinstance(record, dict):
        raise ValueError("a line must be a JSON object")
    headers = record.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ValueError("headers must be an object of strings")
    if "body_base64" in record:
        try:
            body = base64.b64decode(record["body_base64"], validate=True)
        except (binascii.Error, TypeError) as exc:
            raise ValueError(f"bad body_base64: {exc}") from None
    elif isinstance(record.get("body"), str):
        body = record["body"].encode("utf-8")
    else:
        raise ValueError("no body or body_base64")
    destination = record.get("destination")
    return Message(
        body,
        headers,
        str(record.get("id") or ""),
        destination if isinstance(destination, str) else None,
    )
