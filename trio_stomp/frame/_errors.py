"""The protocol error family, shared by the codec, the client and the broker.

Protocol errors are split the way h11 splits them: a :class:`LocalProtocolError`
means *we* were asked to produce something invalid (the caller's bug, nothing
was sent); a :class:`RemoteProtocolError` means the *peer* sent something
invalid (the connection cannot be trusted any more). They live here, in the
sans-IO layer, because the codec raises them; :class:`StompError`, the base of
every error trio_stomp raises on purpose, comes with them. ``trio_stomp``
re-exports all four.
"""

from __future__ import annotations


class StompError(Exception):
    """Base class of every error raised by trio_stomp."""


class ProtocolError(StompError):
    """A frame or a byte stream broke the STOMP protocol."""


class LocalProtocolError(ProtocolError):
    """We were asked to produce something the protocol cannot carry.

    Raised before any byte is produced: the frame was not encoded or sent.
    """


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not valid STOMP.

    The only exception that :meth:`trio_stomp.frame.FrameParser.feed` ever raises,
    whatever bytes arrive. The parser is unusable afterwards.

    Attributes:
      events: from ``feed``, the frames and heart-beats (``Frame`` and
        ``Heartbeat``) completed in the same call before the bad bytes, in
        order; empty otherwise.
    """

    events: tuple[object, ...] = ()
