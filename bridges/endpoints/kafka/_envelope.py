"""The kafka source's envelope: settled through its receiver, built without a closure per record."""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from typing import Any, Final, Protocol

from bridges import Envelope, Message

from ._offsets import Partition


class Settles(Protocol):
    """What an envelope needs of the receiver that read it (``source._KafkaReceiver``)."""

    origin: str

    def holds(self, number: int, partition: Partition) -> bool: ...

    def acked(self, partition: Partition, number: int, offset: int) -> None: ...

    def offer_again(self, envelope: KafkaEnvelope) -> None: ...

    def commit_soon(self) -> None: ...


async def _unused_ack() -> None:
    raise AssertionError("a KafkaEnvelope settles through its receiver")


async def _unused_nack(error: BaseException | None) -> None:
    raise AssertionError("a KafkaEnvelope settles through its receiver")


class KafkaEnvelope(Envelope):
    """An envelope settled through its receiver (no closures per message).

    Built in bulk by the source's receiver through :func:`envelope`,
    which fills the slots directly: one per record read, on the loop's thread.
    """

    __slots__ = ("_number", "_offset", "_partition", "_receiver", "settle_key")

    _receiver: Settles
    _partition: Partition
    _number: int
    _offset: int

    async def ack_all(self, envelopes: Sequence[Envelope]) -> None:
        receiver = self._receiver
        # (a run of acks is mostly of one partition: check it once per change)
        partition: Partition | None = None
        current = False
        for envelope in envelopes:
            if envelope.state == "open" and isinstance(envelope, KafkaEnvelope):
                envelope.state = "acked"
                if envelope._partition is not partition:  # noqa: SLF001
                    partition = envelope._partition  # noqa: SLF001
                    current = receiver.holds(envelope._number, partition)  # noqa: SLF001
                if current:
                    partition.ack(envelope._offset)  # noqa: SLF001
        receiver.commit_soon()

    async def ack(self) -> None:
        if self.state == "open":
            self.state = "acked"
            self._receiver.acked(self._partition, self._number, self._offset)

    async def nack(self, error: BaseException | None = None) -> None:
        if self.state == "open":
            self.state = "nacked"
            if error is not None:
                self._receiver.offer_again(self)


def envelope(
    message: Message, receiver: Settles, partition: Partition, number: int, offset: int
) -> KafkaEnvelope:
    """A new open :class:`KafkaEnvelope` (its ``__init__`` is not called: this is the hot path)."""
    envelope: KafkaEnvelope = _new_envelope(KafkaEnvelope)
    envelope.message = message
    envelope.origin = receiver.origin
    envelope._ack = _unused_ack  # noqa: SLF001
    envelope._nack = _unused_nack  # noqa: SLF001
    envelope.state = "open"
    envelope._receiver = receiver  # noqa: SLF001
    envelope._partition = partition  # noqa: SLF001
    envelope._number = number  # noqa: SLF001
    envelope._offset = offset  # noqa: SLF001
    # Acks of one receiver: the engine hands a run of them to ack_all in one call.
    envelope.settle_key = receiver
    return envelope


_new_envelope = object.__new__

log = logging.getLogger("bridges.kafka")

#: The objects a tuple holds, NULLs left out (a safe look at a header pair).
_referents: Final = gc.get_referents


def pairs(record: Any) -> Any:
    """``record.headers()``, checked for a pair holding a NULL (see :func:`unreadable`).

    Raises:
      SystemError: a header name is not UTF-8.
    """
    raw = record.headers()
    if raw and len(_referents(*raw)) != 2 * len(raw):
        raise SystemError("a header pair holds a NULL")
    return raw


class UnreadableKafkaEnvelope(KafkaEnvelope):
    """A record whose headers the client cannot read (a name that is not UTF-8): its value
    alone, for the dead-letter sink (the engine never writes it to the sink).

    Acked (dead-lettered), its offset is done, as any record's; nacked with
    an error (no dead-letter sink), it is skipped, logged: reading it again
    would fail again. Released (``nack(None)``), it stays uncommitted.
    """

    __slots__ = ()

    error: BaseException | None = ValueError(
        "a header name is not UTF-8 (the record's headers cannot be read)"
    )

    async def nack(self, error: BaseException | None = None) -> None:
        if self.state == "open":
            self.state = "nacked"
            if error is not None:
                log.error("%s: %s; skipped (no dead-letter sink)", self.message.id, self.error)
                self._receiver.acked(self._partition, self._number, self._offset)


def unreadable(
    message: Message, receiver: Settles, partition: Partition, number: int, offset: int
) -> KafkaEnvelope:
    """A new open :class:`UnreadableKafkaEnvelope`.

    (confluent-kafka's ``Message.headers()`` does not check the decoding of a
    header name: for one that is not UTF-8 it builds a pair holding a NULL
    and sets a UnicodeDecodeError, which Python mostly reports as a
    SystemError; when that error was cleared meanwhile, the list comes back
    with the NULL in it, and reading the pair would crash the process. The
    source counts each pair's objects with ``gc.get_referents``, which skips
    a NULL, before it reads them.)
    """
    built = envelope(message, receiver, partition, number, offset)
    built.__class__ = UnreadableKafkaEnvelope
    return built
