"""Batches of a route: gathering them, splitting what a sink rejected, building dead letters.

The engine (:mod:`bridges._engine`) owns the tasks and the retry loop; this
module holds the values it moves around and the rules that do not need a
task: which items a :class:`~bridges.MessageRejected` names, and what a dead
letter carries.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection
from typing import Final

from ._endpoint import MessageRejected
from ._message import Envelope, Message

#: Headers the engine adds to a dead letter.
DEAD_LETTER_HEADERS: Final = (
    "bridge-error",
    "bridge-stage",
    "bridge-route",
    "bridge-source",
    "bridge-attempts",
    "bridge-failed-at",
)


class Gathering:
    """A batch being gathered: kept on the route, not in a local, so that a sink
    failing while it waits for more (its ``async with`` cancelled) leaves it to
    be finished after the sink reopens instead of stranding its envelopes."""

    __slots__ = ("deadline", "envelopes", "failed", "messages")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.envelopes: list[Envelope] = []
        self.messages: list[Message] = []
        #: Envelopes whose transforms failed, given up in their turn.
        self.failed: list[tuple[Envelope, BaseException]] = []

    def set_aside_unreadable(self, chunk: list[Envelope]) -> list[Envelope]:
        """The envelopes of ``chunk`` their source could read; the others go to :attr:`failed`."""
        readable = []
        for envelope in chunk:
            if envelope.error is None:
                readable.append(envelope)
            else:
                self.failed.append((envelope, envelope.error))
        return readable


class Batch:
    """Envelopes and the messages to write for them (transformed), side by side."""

    __slots__ = ("envelopes", "messages", "since")

    def __init__(
        self, envelopes: list[Envelope], messages: list[Message], since: float = 0.0
    ) -> None:
        self.envelopes = envelopes
        self.messages = messages
        #: When its first message was ready to be written (trio clock, s).
        self.since = since

    def __len__(self) -> int:
        return len(self.envelopes)

    def pick(self, indices: Collection[int]) -> Batch:
        """The items at ``indices`` (a set or range), in batch order."""
        chosen = [i for i in range(len(self.envelopes)) if i in indices]
        envelopes = [self.envelopes[i] for i in chosen]
        return Batch(envelopes, [self.messages[i] for i in chosen], self.since)

    def split_rejected(self, exc: MessageRejected) -> tuple[list[tuple[str, Batch]], Batch]:
        """(the items ``exc`` names, grouped by their reason, in batch order; the rest).

        A rejection naming none names them all.
        """
        everything = range(len(self))
        indices = set(everything if exc.indices is None else exc.indices) & set(everything)
        if not indices:  # a sink bug: nothing named; treat it as all
            indices = set(everything)
        groups: dict[str, set[int]] = {}
        for index in sorted(indices):
            groups.setdefault(exc.reason_for(index), set()).add(index)
        bad = [(reason, self.pick(chosen)) for reason, chosen in groups.items()]
        return bad, self.pick(set(everything) - indices)

    def halves(self) -> tuple[Batch, Batch]:
        """The first half and the rest (a batch of at least two)."""
        middle = len(self) // 2
        return self.pick(range(middle)), self.pick(range(middle, len(self)))


def dead_letter_message(
    envelope: Envelope, *, reason: str, attempts: int, stage: str, route: str, source: str
) -> Message:
    """The message to write to the dead-letter sink for ``envelope``: its original,
    with :data:`DEAD_LETTER_HEADERS` saying why, where and when it was given up."""
    original = envelope.message
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    values = (reason, stage, route, envelope.origin or source, str(attempts), now)
    headers = {**original.headers, **dict(zip(DEAD_LETTER_HEADERS, values, strict=True))}
    return Message(original.body, headers, original.id)
