"""What a contract check is handed and what it raises: the cases, their factories, the error.

A family's test passes :func:`~bridges.testing.check_source` or
:func:`~bridges.testing.check_sink` (and
:func:`~bridges.testing.check_poison`) a *factory* of cases: a fresh endpoint
against the real server together with the means to feed it
(:class:`SourceCase`) or to read what it wrote (:class:`SinkCase`). A broken
rule raises :class:`ContractViolation`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager

import attrs

from .._endpoint import Sink, Source
from .._message import Message

#: Hands messages to the server a source reads from; see :class:`SourceCase`.
Publish = Callable[[Sequence[Message]], Awaitable[None]]
#: What the server a sink writes to holds now, oldest first; see :class:`SinkCase`.
ReadBack = Callable[[], Awaitable[Sequence[Message]]]


class ContractViolation(AssertionError):
    """An endpoint broke the Source or Sink contract; the message says which rule, and how."""


@attrs.frozen
class SourceCase:
    """A fresh source under test and the means to feed it.

    Attributes:
      source: the endpoint, built but not open.
      publish: puts messages (body, and headers where the system has them)
        into the server the source reads, and returns once the server holds
        them. It runs in a task of its own while the source is open (a push
        source, such as a webhook, needs the source listening first), and
        may be cancelled once every message arrived. A push publisher retries
        what the source refused or dropped until it is accepted.
      nack_redelivers: False when ``nack(error)`` dead-letters the message
        instead of offering it again (ActiveMQ's redelivery policy, say);
        ``nack(None)``, a release, must always make it available again.
      stable_ids: False when the source gives the published messages no id
        that stays the same across redelivery (its docs must say so).
    """

    source: Source
    publish: Publish
    nack_redelivers: bool = True
    stable_ids: bool = True


@attrs.frozen
class SinkCase:
    """A fresh sink under test and the means to read back what it wrote.

    Attributes:
      sink: the endpoint, built but not open.
      read_back: every message the server holds durably now, oldest first
        (bodies must be kept; headers need not be). It is called while the
        sink's writer is still open: it must see what a reader elsewhere
        would see after a crash.
      reject: a message this sink can never write (e.g. one without a
        destination); None when the sink accepts every message.
      ordered: False when the server does not keep the order of a batch.
      poison: messages the target cannot take (a body over the sink's
        limit, say): the poison rule requires each to be dead-lettered,
        never written, and the rest of its batch written.
    """

    sink: Sink
    read_back: ReadBack
    reject: Message | None = None
    ordered: bool = True
    poison: Sequence[Message] = ()


SourceFactory = Callable[[], AbstractAsyncContextManager[SourceCase]]
SinkFactory = Callable[[], AbstractAsyncContextManager[SinkCase]]
