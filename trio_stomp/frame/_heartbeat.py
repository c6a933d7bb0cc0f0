"""Heart-beat negotiation (STOMP 1.1 "Heart-beating"), sans-IO.

Each side states ``cx,cy``: the smallest interval at which it can *send*
heart-beats, and the interval at which it *wants* to receive them, in ms
(0 meaning cannot / does not want). The effective intervals are:

- we send every ``max(our cx, their cy)`` ms, if neither is 0;
- we expect something every ``max(their cx, our cy)`` ms, if neither is 0.

A missing ``heart-beat`` header means ``0,0``.
"""

from __future__ import annotations

from ._errors import RemoteProtocolError


def parse_heartbeat(value: str | None) -> tuple[int, int]:
    """Parse a ``heart-beat`` header value; None (absent) means ``(0, 0)``.

    Raises:
      RemoteProtocolError: the value is not two non-negative integers.
    """
    if value is None:
        return (0, 0)
    first, comma, second = value.partition(",")
    first, second = first.strip(), second.strip()
    if not comma or not (first + second).isascii() or not first.isdigit() or not second.isdigit():
        raise RemoteProtocolError(f"malformed heart-beat header {value!r}")
    return (int(first), int(second))


def format_heartbeat(heartbeat: tuple[int, int]) -> str:
    """The ``heart-beat`` header value for ``(cx, cy)``."""
    send, receive = heartbeat
    if send < 0 or receive < 0:
        raise ValueError(f"heart-beat intervals must be >= 0 ms, got {heartbeat}")
    return f"{send},{receive}"


def negotiate(ours: tuple[int, int], theirs: tuple[int, int]) -> tuple[int, int]:
    """Return ``(send_every, expect_every)`` in ms; 0 means off.

    ``ours`` is the ``heart-beat`` we sent, ``theirs`` the peer's. The same
    rule serves the client and the broker: each side passes its own first.
    """
    our_send, our_receive = ours
    their_send, their_receive = theirs
    send_every = max(our_send, their_receive) if our_send and their_receive else 0
    expect_every = max(their_send, our_receive) if their_send and our_receive else 0
    return (send_every, expect_every)
