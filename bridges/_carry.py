"""Sinks that record their source's progress inside their own write (consume-transform-produce).

Usually a route's source keeps its own position: the engine acks each
envelope once the sink's write returned, and the source commits (a STOMP
ACK, a file's position, a Kafka consumer's offset commit). Between the
sink's write and that commit a crash repeats the batch: at least once.

Some pairs can do better, when the sink's target also keeps the source's
position and takes both in one atomic write. Kafka is the case: a producer's
transaction may carry the consumer group's offsets
(``send_offsets_to_transaction``), so the records and the offsets they were
made from become visible together, or neither does (Kafka Streams'
exactly-once). For that the sink must see, at each write, which source
envelopes the batch came from; and the source must stop committing by
itself, or its commits would race the transaction's.

The engine asks the sink once, when the route is built
(:meth:`CarryingSink.carries`); a sink that answers True has told the source
(they are of one family and know each other) and opens into a
:class:`CarryingWriter`, to which the engine hands each batch with its
envelopes. Everything else stays as it is: the engine still acks each
envelope after the write (the source keeps its books by it, but commits
nothing), dead letters and filtered messages are acked as ever, and their
positions ride in the next write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from ._endpoint import Sink, Source, Writer
from ._message import Envelope, Message


@runtime_checkable
class CarryingSink(Sink, Protocol):
    """A sink that can record its route's source positions in its own writes."""

    def carries(self, source: Source) -> bool:
        """Whether this sink will carry ``source``'s positions; asked once per route.

        When True, the sink has told the source to commit nothing by itself,
        and its writers are :class:`CarryingWriter`. False (another family,
        another cluster, a mode without transactions) changes nothing.
        """
        ...


@runtime_checkable
class CarryingWriter(Writer, Protocol):
    """An open :class:`CarryingSink` of a route whose source it carries."""

    async def write_carrying(self, batch: Sequence[Message], envelopes: Sequence[Envelope]) -> None:
        """Write ``batch`` and, in the same atomic write, the positions of ``envelopes``.

        ``envelopes[i]`` is the source envelope ``batch[i]`` was made from (the
        engine's order). The positions written are the source's as if these
        envelopes were acked. Once the write is durable, the writer acks them
        in the source's books itself, before it returns (the next write's
        positions must start after them, and the engine acks a batch only
        later, in its own task); the engine's ack is then a no-op, as any
        second ack is. Raises as :meth:`Writer.write`.
        """
        ...


def carried(sink: Sink, source: Source) -> bool:
    """Whether ``sink`` carries ``source``'s positions (asks it once)."""
    return isinstance(sink, CarryingSink) and sink.carries(source)


def write_call(
    writer: Writer, carrying: bool, sink: str
) -> Callable[[list[Message], list[Envelope]], Awaitable[None]]:
    """How the engine writes one batch to ``writer``: its messages, with their
    envelopes when the sink carries the source (a copy: the engine's stay its own).

    Raises:
      TypeError: the sink said it carries its source and opened no :class:`CarryingWriter`.
    """
    if not carrying:
        return lambda messages, _envelopes: writer.write(messages)
    if not isinstance(writer, CarryingWriter):
        raise TypeError(f"{sink} carries its source but opened no CarryingWriter")
    return lambda messages, envelopes: writer.write_carrying(messages, list(envelopes))
