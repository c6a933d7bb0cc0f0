"""Heart-beat negotiation (STOMP 1.1 "Heart-beating"), sans-IO.

Each side states ``cx,cy``: the smallest interval at which it can *send*
heart-beats, and the interval at which it *wants* to receive them, in ms
(0 meaning cannot / does not want). The effective intervals are:

- we send every ``max(our cx, their cy)`` ms, if neither is 0;
- we expect something every ``max(their cx, our cy)`` ms, if neither is 0.

A missing ``heart-beat`` header means ``0,0``.
"""

from __future__ import annotations

from typing import Final

from ._errors import RemoteProtocolError

#: The longest heart-beat interval either side may state, ms (about 24.8 days,
#: a signed 32-bit count, what Java brokers hold it in). A longer one is not a
#: real interval but a peer testing us: a protocol error, not an overflow.
MAX_HEARTBEAT_MS: Final = 2**31 - 1


def parse_heartbeat(value: str | None) -> tuple[int, int]:
    """Parse a ``heart-beat`` header value; None (absent) means ``(0, 0)``.

    Raises:
      RemoteProtocolError: the value is not two non-negative integers of at
        most :data:`MAX_HEARTBEAT_MS`.
    """
    if value is None:
        return (0, 0)
    first, comma, second = value.partition(",")
    first, second = first.strip(), second.strip()
    if not comma or not (first + second).isascii() or not first.isdigit() or not second.isdigit():
        raise RemoteProtocolError(f"malformed heart-beat header {value[:40]!r}")
    # (the length first: int() of thousands of digits costs time, and Python refuses it)
    if max(len(first), len(second)) > 10 or max(int(first), int(second)) > MAX_HEARTBEAT_MS:
        raise RemoteProtocolError(
            f"heart-beat header {value[:40]!r} states an interval over {MAX_HEARTBEAT_MS} ms"
        )
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
