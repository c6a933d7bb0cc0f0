"""W3C trace context across a route: ``traceparent`` carried to the sink, one new span per hop.

A message that arrives with a ``traceparent`` header (and maybe
``tracestate``) leaves with both, so a trace follows it through the bridge.
The bridge is one hop: the ``traceparent`` it writes keeps the trace id and
flags and carries a new parent (span) id, as a W3C participant does
(https://www.w3.org/TR/trace-context/). ``tracestate`` is carried as is. A
malformed ``traceparent`` is left alone, as are messages without one.

Each endpoint family maps the message headers ``traceparent`` and
``tracestate`` to its own: STOMP frame headers, HTTP request headers (the
webhook source keeps them without the ``http-`` prefix; the HTTP sink sends
them), MQTT 5 user properties, AMQP and NATS message headers, Redis stream
fields, the ``headers`` of a JSON line. :func:`traced` wraps a route's sink so
that every family does it the same way; ``bridges run`` applies it to every
route.
"""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

from ._carry import CarryingWriter
from ._endpoint import Sink, Writer
from ._message import Envelope, Message

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
#: version 00 (or a later one read as 00): version, trace id, parent id, flags.
_TRACEPARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16

_random = random.SystemRandom()


def new_span_id() -> str:
    """16 lowercase hex digits, not all zero."""
    while True:
        span = f"{_random.getrandbits(64):016x}"
        if span != _ZERO_SPAN:
            return span


def next_hop(traceparent: str) -> str | None:
    """``traceparent`` with a new parent id for this hop, or None when it is not valid."""
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace, parent, flags = match.groups()
    if version == "ff" or trace == _ZERO_TRACE or parent == _ZERO_SPAN:
        return None
    return f"00-{trace}-{new_span_id()}-{flags}"


def hop(messages: Sequence[Message]) -> Sequence[Message]:
    """``messages`` with each valid ``traceparent`` given a new span id (others unchanged).

    Without any, ``messages`` itself: the common case copies nothing.
    """
    out: Sequence[Message] | list[Message] = messages
    changed: list[Message] | None = None
    for index, message in enumerate(messages):
        traceparent = message.headers.get(TRACEPARENT)
        if traceparent is None:
            continue
        moved = next_hop(traceparent)
        if moved is None:
            continue
        if changed is None:
            out = changed = list(messages)
        headers = {**message.headers, TRACEPARENT: moved}
        changed[index] = Message(message.body, headers, message.id, message.destination)
    return out


class _TracedWriter:
    __slots__ = ("_writer",)

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def write(self, batch: Sequence[Message]) -> None:
        await self._writer.write(hop(batch))


class _TracedCarryingWriter(_TracedWriter):
    __slots__ = ()

    async def write_carrying(self, batch: Sequence[Message], envelopes: Sequence[Envelope]) -> None:
        writer = self._writer
        assert isinstance(writer, CarryingWriter)
        await writer.write_carrying(hop(batch), envelopes)


class TracedSink:
    """A sink whose writes carry each message's trace context to the next hop.

    Everything else (``describe``, warnings, ...) is the wrapped sink's.
    """

    def __init__(self, sink: Sink) -> None:
        self.wrapped = sink

    def describe(self) -> str:
        """The wrapped sink's description."""
        return self.wrapped.describe()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Writer]:
        """The wrapped sink's writer, with :func:`hop` applied to each batch."""
        async with self.wrapped.open() as writer:
            if isinstance(writer, CarryingWriter):  # (the engine hands it envelopes too)
                yield _TracedCarryingWriter(writer)
            else:
                yield _TracedWriter(writer)


def traced(sink: Sink) -> Sink:
    """``sink`` with trace context carried (see :class:`TracedSink`)."""
    return TracedSink(sink)
