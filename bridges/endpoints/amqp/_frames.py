"""AMQP 0-9-1 frames <-> bytes: the sans-I/O half of the amqp family's own client.

pamqp (the codec aiormq itself is built on) encodes and decodes each method
and content header; this module cuts the byte stream into frames, checks
every limit before it keeps anything (a frame over the connection's
``frame_max``, a broken frame end), and puts
a delivered message's three parts (method, content header, body frames) back
together, per channel. A message whose header announces a body over
``max_body`` is not an error of the peer (a broker's ``max_message_size`` may
be larger): its body frames are counted and dropped as they come, and it ends
as a :class:`Content` with an empty body and :attr:`Content.oversize` set, so
the source can settle it (no loop, nothing kept). It does no I/O and reads
no clock (:mod:`._client` does), so it is tested with bytes alone.

Whatever bytes arrive, the only error :meth:`FrameReader.feed` raises is
:class:`ProtocolError` (what the peer did wrong).
"""

from __future__ import annotations

import struct
from typing import Final

import attrs
from pamqp import commands, header
from pamqp.base import Frame

__all__ = [
    "PROTOCOL_HEADER",
    "Content",
    "FrameReader",
    "Heartbeat",
    "ProtocolError",
    "content_frames",
    "heartbeat_frame",
    "method_frame",
]

#: What a client sends first: AMQP 0-9-1.
PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
#: A frame's type, channel and payload size.
_HEAD: Final = struct.Struct(">BHI")
_METHOD, _HEADER, _BODY, _HEARTBEAT = 1, 2, 3, 8
_FRAME_END: Final = 0xCE
_END: Final = b"\xce"
#: A frame's own bytes around its payload (head and end).
OVERHEAD: Final = 8
#: The methods that a content (header and body frames) follows.
_CARRIERS: Final = (commands.Basic.Deliver, commands.Basic.Return, commands.Basic.GetOk)


class ProtocolError(ConnectionError):
    """The peer broke AMQP 0-9-1 (a bad frame, a limit passed): the connection cannot go on."""


@attrs.frozen
class Heartbeat:
    """A heartbeat frame arrived (it says only that the peer is alive)."""


@attrs.define(slots=True)
class Content:
    """A message as it came: the method that carried it, its properties, its body.

    ``oversize``: the body size its header announced when that was over
    ``max_body`` (then ``body`` is empty: its frames were dropped), else 0.
    """

    method: Frame
    properties: commands.Basic.Properties
    body: bytes
    oversize: int = 0


@attrs.define(slots=True)
class _Partial:
    method: Frame
    properties: commands.Basic.Properties | None = None
    size: int = 0
    got: int = 0
    parts: list[bytes] = attrs.field(factory=list)
    #: Over ``max_body``: its body frames are counted, not kept.
    skip: bool = False


class FrameReader:
    """Bytes in, ``(channel, event)`` out: a method, a :class:`Content` or a :class:`Heartbeat`.

    Args:
      frame_max: the largest frame accepted, its 8 bytes of framing
        included (the client's offer until the broker's ``Connection.Tune``
        settles it; set :attr:`frame_max` then).
      max_body: the largest message body accepted, bytes.
    """

    def __init__(self, frame_max: int, max_body: int) -> None:
        self.frame_max = frame_max
        self.max_body = max_body
        self._buffer = bytearray()
        self._partial: dict[int, _Partial] = {}

    def feed(self, data: bytes) -> list[tuple[int, object]]:
        """The events that ``data`` completes (what is left waits for more).

        Raises:
          ProtocolError: a frame over ``frame_max``, an unknown frame type or
            method, a frame that does not end with 0xCE, a content out of
            place or longer than its header said, a method pamqp cannot decode.
        """
        buffer = self._buffer
        buffer += data
        events: list[tuple[int, object]] = []
        position = 0
        end = len(buffer)
        limit = self.frame_max - OVERHEAD
        while end - position >= 7:
            kind, channel, size = _HEAD.unpack_from(buffer, position)
            if size > limit:
                raise ProtocolError(
                    f"the broker sent a frame of {size + OVERHEAD} bytes, over frame_max "
                    f"({self.frame_max}, as agreed at connection.tune)"
                )
            if end - position < size + OVERHEAD:
                break
            start = position + 7
            position = start + size + 1
            if buffer[position - 1] != _FRAME_END:
                raise ProtocolError("the broker sent a frame that does not end with 0xCE")
            payload = bytes(buffer[start : start + size])
            event = self._event(kind, channel, payload)
            if event is not None:
                events.append((channel, event))
        del buffer[:position]
        return events

    def _event(self, kind: int, channel: int, payload: bytes) -> object | None:
        partial = self._partial.get(channel)
        if kind == _BODY:
            if partial is None or partial.properties is None:
                raise ProtocolError(f"a content body frame out of place on channel {channel}")
            partial.got += len(payload)
            if partial.got > partial.size:
                raise ProtocolError(
                    f"a content body longer than its header said on channel {channel}"
                )
            if not partial.skip:
                partial.parts.append(payload)
            return self._done(channel, partial) if partial.got == partial.size else None
        if kind == _METHOD:
            if partial is not None:
                raise ProtocolError(
                    f"a method frame in the middle of a content on channel {channel}"
                )
            method = _method(payload)
            if isinstance(method, _CARRIERS):
                self._partial[channel] = _Partial(method)
                return None
            return method
        if kind == _HEADER:
            return self._header(channel, partial, payload)
        if kind == _HEARTBEAT:
            if channel:
                raise ProtocolError(f"a heartbeat frame on channel {channel}, not 0")
            return Heartbeat()
        raise ProtocolError(f"a frame of unknown type {kind}")

    def _header(self, channel: int, partial: _Partial | None, payload: bytes) -> Content | None:
        if partial is None or partial.properties is not None:
            raise ProtocolError(f"a content header frame out of place on channel {channel}")
        content = header.ContentHeader()
        try:
            content.unmarshal(payload)
        except Exception as exc:
            raise ProtocolError(f"a content header pamqp cannot decode ({exc})") from None
        partial.skip = content.body_size > self.max_body
        partial.properties, partial.size = content.properties, content.body_size
        return self._done(channel, partial) if not partial.size else None

    def _done(self, channel: int, partial: _Partial) -> Content:
        del self._partial[channel]
        assert partial.properties is not None
        if partial.skip:
            return Content(partial.method, partial.properties, b"", partial.size)
        parts = partial.parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return Content(partial.method, partial.properties, body)


def _method(payload: bytes) -> Frame:
    if len(payload) < 4:
        raise ProtocolError("a method frame too short to name its method")
    index = int.from_bytes(payload[:4], "big")
    kind = commands.INDEX_MAPPING.get(index)
    if kind is None:
        raise ProtocolError(f"an unknown AMQP method 0x{index:08x}")
    method: Frame = kind()
    try:
        method.unmarshal(payload[4:])
    except Exception as exc:
        raise ProtocolError(f"a {method.name} frame pamqp cannot decode ({exc})") from None
    return method


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return _HEAD.pack(kind, channel, len(payload)) + payload + _END


def method_frame(channel: int, method: Frame) -> bytes:
    """One method frame."""
    return _frame(_METHOD, channel, method.index.to_bytes(4, "big") + method.marshal())


def content_frames(
    channel: int, properties: commands.Basic.Properties, body: bytes, frame_max: int
) -> list[bytes]:
    """A content header frame and the body frames (each within ``frame_max``) of one message."""
    frames = [_frame(_HEADER, channel, header.ContentHeader(0, len(body), properties).marshal())]
    step = frame_max - OVERHEAD
    for start in range(0, len(body), step):
        frames.append(_frame(_BODY, channel, body[start : start + step]))
    return frames


def heartbeat_frame() -> bytes:
    """A heartbeat frame."""
    return _frame(_HEARTBEAT, 0, b"")
