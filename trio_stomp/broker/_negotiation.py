"""What a CONNECT settles: the version, the heart-beats, the credentials.

Pure functions of header values, so each rule is tested on its own.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

import attrs

from ..frame import VERSIONS, Frame, LocalProtocolError, RemoteProtocolError, Version, encode
from ..frame._heartbeat import negotiate, parse_heartbeat
from ._transactions import ClientError

#: Ours, newest first: the order in which a version is preferred.
SUPPORTED: tuple[Version, ...] = tuple(reversed(VERSIONS))


class NegotiationError(Exception):
    """A CONNECT asks for something the broker cannot agree to."""


def choose_version(accept_version: str | None) -> Version | None:
    """The newest version both sides speak, or None when there is none.

    A CONNECT without ``accept-version`` comes from a 1.0 client (1.1 spec,
    "Protocol Negotiation").
    """
    if accept_version is None:
        return "1.0"
    offered = {item.strip() for item in accept_version.split(",")}
    for version in SUPPORTED:
        if version in offered:
            return version
    return None


@attrs.frozen
class Heartbeats:
    """The heart-beat agreement of one connection.

    Attributes:
      header: the ``(sx, sy)`` the broker puts in CONNECTED.
      send_ms: the broker sends something at least this often (0: never).
      receive_ms: the client sends something at least this often (0: never).
    """

    header: tuple[int, int]
    send_ms: int
    receive_ms: int


def agree_heartbeats(header: str | None, minimum_ms: int) -> Heartbeats:
    """:func:`negotiate_heartbeats` for a CONNECT's ``heart-beat`` header (None: none,
    as under 1.0, where RabbitMQ and ActiveMQ also send none).

    Raises:
      ClientError: the header is not ``cx,cy``.
    """
    try:
        client = parse_heartbeat(header)
    except RemoteProtocolError as exc:
        raise ClientError("invalid heart-beat header", str(exc)) from None
    return negotiate_heartbeats(client, minimum_ms)


def negotiate_heartbeats(client: tuple[int, int], minimum_ms: int) -> Heartbeats:
    """Agree on heart-beats with a client that sent ``heart-beat: cx,cy``.

    The broker can do whatever the client asks, down to ``minimum_ms``: it
    answers ``sx = max(cy, minimum_ms)`` when the client wants heart-beats
    (``cy > 0``) and ``sy = max(cx, minimum_ms)`` when the client can send them
    (``cx > 0``), else 0. By the 1.1 spec the broker then sends every
    ``max(sx, cy)`` ms and the client every ``max(cx, sy)`` ms.
    """
    cx, cy = client
    sx = max(cy, minimum_ms) if cy else 0
    sy = max(cx, minimum_ms) if cx else 0
    send, receive = negotiate((sx, sy), client)
    return Heartbeats(header=(sx, sy), send_ms=send, receive_ms=receive)


def check_credentials(
    users: Mapping[str, str] | None, login: str | None, passcode: str | None
) -> bool:
    """True when ``login``/``passcode`` may connect (always, when users is None)."""
    if users is None:
        return True
    if login is None or login not in users:
        # Compare anyway, so an unknown login takes as long as a wrong passcode.
        hmac.compare_digest(b"", (passcode or "").encode())
        return False
    return hmac.compare_digest(users[login].encode(), (passcode or "").encode())


def encode_message(headers: list[tuple[str, str]], body: bytes, version: str) -> bytes:
    """A MESSAGE frame's bytes for a client of ``version``.

    A header sent under another version that ours cannot carry (a line break
    for a 1.0 client) is left out rather than failing the delivery.
    """
    try:
        return encode(Frame("MESSAGE", headers, body), version)
    except LocalProtocolError:
        kept = [pair for pair in headers if _encodable(pair, version)]
        return encode(Frame("MESSAGE", kept, body), version)


def _encodable(pair: tuple[str, str], version: str) -> bool:
    try:
        encode(Frame("MESSAGE", [pair]), version)
    except LocalProtocolError:
        return False
    return True
