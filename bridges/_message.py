"""What moves through a route: :class:`Message` values and the :class:`Envelope` around them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

import attrs

#: An ack callback: settles the envelope as done.
AckFn = Callable[[], Awaitable[None]]
#: A nack callback: ``error`` says why, or is None when the engine did not get
#: to process the message (shutdown, route restart): then a source should make
#: it available again without counting a failed delivery.
NackFn = Callable[[BaseException | None], Awaitable[None]]

OPEN: Final = "open"
ACKED: Final = "acked"
NACKED: Final = "nacked"


@attrs.frozen
class Message:
    """One message as transforms and sinks see it: a value, never changed in place.

    Attributes:
      body: the payload.
      headers: name -> value; transforms build a new mapping rather than
        editing this one.
      id: a stable identifier, the same each time the message is delivered
        again (a file's name and mtime, a line's offset, the ``bridge-id``
        header a STOMP sink adds): what a consumer de-duplicates on.
      destination: where a sink should send it, when a transform chose; None
        lets the sink use its own setting.
    """

    body: bytes
    headers: Mapping[str, str] = attrs.field(factory=dict)
    id: str = ""
    destination: str | None = None


_new = object.__new__
_set_body, _set_headers, _set_id, _set_destination = (
    Message.__dict__[name].__set__ for name in ("body", "headers", "id", "destination")
)


def trusted_message(body: bytes, headers: Mapping[str, str], id: str) -> Message:
    """``Message(body, headers, id)`` for a source's hot path: the same value, built faster.

    It fills the slots directly instead of through the frozen class's
    ``__setattr__`` guard, which costs half of ``Message()``. Message has no
    validators, converters or other fields to skip (a test checks).
    """
    message: Message = _new(Message)
    _set_body(message, body)
    _set_headers(message, headers)
    _set_id(message, id)
    _set_destination(message, None)
    return message


class Envelope:
    """A message as a source handed it out, with the means to settle it.

    The engine settles every envelope exactly once: :meth:`ack` when the sink
    (or the dead-letter sink) holds the message durably, :meth:`nack`
    otherwise. Later calls do nothing, so a source need not guard against
    them. ``origin`` says where the message came from (for dead letters and
    logs), e.g. ``"stomp /queue/in"`` or ``"file inbox/a.txt"``.

    A push source (an HTTP webhook, say) builds envelopes whose ``ack``
    sends its 2xx answer and whose ``nack`` an error: the engine needs nothing
    else from it.

    A source that can ack many messages at once (one write for a run of them)
    sets :attr:`settle_key` and overrides :meth:`ack_all`: the engine hands
    each run of consecutive envelopes with the same key to the first one's
    :meth:`ack_all`, in one call.
    """

    __slots__ = ("_ack", "_nack", "message", "origin", "state")

    #: Why the source could not read this message whole, or None (the class
    #: default, so that subclasses need not set it): see :class:`UnreadableEnvelope`.
    error: BaseException | None = None
    #: Envelopes whose keys are the same object (not None) may be acked
    #: together by :meth:`ack_all`; None (the class default): one at a time.
    settle_key: object = None

    def __init__(self, message: Message, *, ack: AckFn, nack: NackFn, origin: str = "") -> None:
        self.message = message
        self.origin = origin
        self._ack = ack
        self._nack = nack
        #: "open", "acked" or "nacked".
        self.state = OPEN

    def __repr__(self) -> str:
        return f"<Envelope {self.message.id!r} from {self.origin or '?'} ({self.state})>"

    async def ack(self) -> None:
        """The message is durable downstream: the source may forget it."""
        if self.state is OPEN:
            self.state = ACKED
            await self._ack()

    async def ack_all(self, envelopes: Sequence[Envelope]) -> None:
        """Ack ``envelopes``, in order: consecutive ones sharing this one's
        :attr:`settle_key` (this one first). Each acked at most once, as by
        :meth:`ack`; an error means any of them may not be acked.

        The default acks them one at a time; a source overrides it to send
        the acks together.
        """
        for envelope in envelopes:
            await envelope.ack()

    async def nack(self, error: BaseException | None = None) -> None:
        """The message was not delivered; the source should offer it again.

        Args:
          error: why, or None when it was never attempted (shutdown).
        """
        if self.state is OPEN:
            self.state = NACKED
            await self._nack(error)


class UnreadableEnvelope(Envelope):
    """A message its source could not read whole: a line over its limit, a record it cannot parse.

    The engine never writes it to the sink: it goes to the dead-letter sink
    (``bridge-stage: source``, ``bridge-error`` from :attr:`error`), then is
    acked; without a dead-letter sink it is nacked with :attr:`error`, and
    the source decides (skip it, logged, or offer it again). When the
    dead-letter sink fails, it is released (nacked with None, as at a stop),
    never given up: the source offers it again after the route restarts. A source hands
    out what it could keep of it as the body (bounded by its limit).
    """

    __slots__ = ("error",)

    def __init__(
        self, message: Message, *, ack: AckFn, nack: NackFn, origin: str = "", error: BaseException
    ) -> None:
        super().__init__(message, ack=ack, nack=nack, origin=origin)
        self.error = error
