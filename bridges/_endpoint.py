"""The contracts between the engine and endpoints: sources, sinks, and what they raise.

A *source* opens into a :class:`Receiver` for the lifetime of a connection;
the engine pulls envelopes from it. A *sink* opens into a :class:`Writer`;
the engine hands it batches. Both are async context managers so that their
connections, tasks and files live inside the route's ``async with`` and end
with it (see DESIGN.md). The engine may open a sink again after a failure,
and a whole route again after its source failed.

An endpoint is built in a :class:`Context` (its route, its base directory,
the process's :class:`~bridges.Shared` resources, which
:func:`shared_resource` opens for it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

import attrs

from ._message import Envelope, Message
from ._shared import Opener, Shared

T = TypeVar("T")


class Receiver(Protocol):
    """An open source."""

    async def receive(self) -> Envelope:
        """The next envelope; waits for one.

        Must be cancel-safe: a cancelled call hands out nothing and loses
        nothing (the message stays in the source for later).

        Raises:
          trio.EndOfChannel: the source is finished (a finite source).
          Exception: the source failed; the engine restarts the route.
        """
        ...


@runtime_checkable
class BulkReceiver(Receiver, Protocol):
    """An open source that can also hand out several envelopes in one call.

    The engine takes from it with :meth:`receive_some` (one call per group of
    messages instead of one per message), and from any other receiver with
    :meth:`Receiver.receive`.
    """

    async def receive_some(self, most: int) -> Sequence[Envelope]:
        """The next envelopes, in order: at least one (waits for it), at most ``most``.

        Each is then the engine's to settle, as one :meth:`Receiver.receive`
        returned. Cancel-safe in the same way: a cancelled call hands out
        nothing and loses nothing.

        Raises:
          trio.EndOfChannel, Exception: as :meth:`Receiver.receive`.
        """
        ...


class Source(Protocol):
    """Where messages come from. Built from config; connects only in :meth:`open`."""

    def open(self) -> AbstractAsyncContextManager[Receiver]:
        """Connect; leaving the block disconnects (unsettled envelopes go back)."""
        ...

    def describe(self) -> str:
        """One line for logs and dead-letter headers, e.g. ``stomp /queue/in``."""
        ...


class Writer(Protocol):
    """An open sink."""

    async def write(self, batch: Sequence[Message]) -> None:
        """Write ``batch`` (in order); return only when all of it is durable.

        Durable means it survives this process being killed: fsynced, or
        confirmed by the peer (a RECEIPT, a PUBACK, a publisher confirm). A
        sink whose peer confirms asynchronously sends the whole batch, then
        awaits every confirmation here: one round trip per batch.

        Raises:
          MessageRejected: some messages can never be written (no retry).
          BatchRefused: the target refused the batch for a message it does
            not name; the engine writes it again in halves to find that one.
          Exception: anything else is transient: the engine closes this
            writer, opens the sink again and retries by its policy. A failed
            write may have written part of the batch (a duplicate later, never
            a loss).
        """
        ...


class Sink(Protocol):
    """Where messages go. Built from config; connects only in :meth:`open`."""

    def open(self) -> AbstractAsyncContextManager[Writer]:
        """Connect (open files); leaving the block disconnects."""
        ...

    def describe(self) -> str:
        """One line for logs, e.g. ``file outbox/ (jsonl)``."""
        ...


class MessageRejected(Exception):
    """A sink cannot ever write some messages of a batch (bad header, no destination).

    Those go to the dead-letter sink (or are nacked) at once, each with its
    own reason when ``reasons`` has one; the rest of the batch is written
    again without waiting.

    Args:
      reason: why, for the ``bridge-error`` header and the log.
      indices: positions in the batch of the rejected messages; None: all.
      reasons: position -> why, for rejected messages whose reason is not
        ``reason`` (see :meth:`each`).
    """

    def __init__(
        self,
        reason: str,
        indices: Sequence[int] | None = None,
        *,
        reasons: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.indices = None if indices is None else tuple(indices)
        self.reasons: dict[int, str] = dict(reasons or {})

    @classmethod
    def each(cls, reasons: Mapping[int, str]) -> MessageRejected:
        """A rejection of every position in ``reasons`` (not empty), each for its own reason."""
        indices = sorted(reasons)
        return cls(reasons[indices[0]], indices, reasons=reasons)

    def reason_for(self, index: int) -> str:
        """Why the message at ``index`` was rejected."""
        return self.reasons.get(index, self.reason)


class BatchRefused(Exception):
    """The target refused a batch because of a message in it, and cannot say which.

    STOMP is the case: a broker answers a frame it will not take (too many
    headers, a header line too long, a destination it forbids) with an ERROR
    frame and closes the connection, and nothing in the ERROR names the
    SEND. The engine then writes the batch again in halves, each on a freshly
    opened sink, until the message is alone: that one is retried and given
    up (dead-lettered) by the retry policy like any failed batch, and every
    other message is written. A batch of n with one such message costs about
    2 log2(n) more writes (and connections), and messages the target took
    before it refused may be written twice (the usual at-least-once duplicate).

    Raise it from :meth:`Writer.write` (or from leaving the writer's ``async
    with``, after one); ``from`` the target's own error.
    """


def prepare_each(
    batch: Sequence[Message],
    prepare: Callable[[Message], T],
    errors: type[Exception] | tuple[type[Exception], ...] = ValueError,
) -> list[T]:
    """``prepare(message)`` for every message of ``batch``, in order: what a sink sends.

    A sink checks each message against what its target accepts here, before
    anything of the batch goes out; a message that cannot go must not take
    the others down with it.

    Raises:
      MessageRejected: ``prepare`` raised one of ``errors`` for some
        messages; it names every one of them, each with its own reason (the
        error's text), and the engine writes the rest again at once.
    """
    prepared: list[T] = []
    bad: dict[int, str] = {}
    for index, message in enumerate(batch):
        try:
            prepared.append(prepare(message))
        except errors as exc:
            bad[index] = str(exc) or type(exc).__name__
    if bad:
        raise MessageRejected.each(bad)
    return prepared


class InvalidSetting(ValueError):
    """An endpoint or transform constructor found a bad setting.

    The config loader turns it into a :class:`bridges.ConfigError` that names
    the file, the route and ``key`` (relative to the endpoint's table).
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


class InvalidSettings(InvalidSetting):
    """Every bad setting a constructor found, reported together.

    A constructor that checks several settings collects what it finds and
    raises them at once, so ``bridges check`` says all of a config's problems
    in one round instead of one per run::

        found = []
        if "/" in config.prefix:
            found.append(InvalidSetting("prefix", "must be a plain file name prefix"))
        if config.limit < config.batch:
            found.append(InvalidSetting("limit", "is less than batch"))
        InvalidSettings.raise_any(found)
    """

    def __init__(self, found: Sequence[InvalidSetting]) -> None:
        if not found:
            raise ValueError("InvalidSettings needs at least one InvalidSetting")
        ValueError.__init__(self, "; ".join(str(each) for each in found))
        self.key = found[0].key
        self.message = "; ".join(each.message for each in found)
        self.found = tuple(found)

    @classmethod
    def raise_any(cls, found: Sequence[InvalidSetting]) -> None:
        """Raise what ``found`` holds: nothing, the one, or all of them together."""
        if len(found) == 1:
            raise found[0]
        if found:
            raise cls(found)


@attrs.frozen
class Context:
    """What an endpoint constructor may know about where it runs.

    Attributes:
      route: the route's name.
      role: "source", "sink", "dead_letter" or "transform".
      base_dir: relative paths in the config are resolved against this
        directory (the working directory of ``bridges``).
      embedded: True when the config starts an embedded broker, so a
        ``stomp`` endpoint may say ``url = "embedded"`` (the running broker
        itself is a shared resource: the stomp family looks it up).
      checking: True under ``bridges check``: build, validate, create nothing.
      in_flight: the route's in-flight window (a STOMP source's prefetch
        follows it unless set).
      shared: the process's shared resources (one asyncio loop, one HTTP
        server per address); None outside ``bridges run``. Endpoints use
        :func:`bridges.shared_resource`, which handles both cases.
      task: which of several copies of the endpoint that run at once this
        one is, stable across retries of the same work (on Spark, an
        executor task's partition: ``spark-p3``); None when one copy runs
        (``bridges run``). An endpoint whose identity at the target must be
        unique per running copy (a Kafka ``transactional.id``) adds it.
    """

    route: str = "-"
    role: str = "source"
    base_dir: Path = attrs.field(factory=Path.cwd)
    embedded: bool = False
    checking: bool = False
    in_flight: int = 1000
    shared: Shared | None = None
    task: str | None = None

    def path(self, value: str) -> Path:
        """``value`` (``~`` expanded) resolved against :attr:`base_dir`."""
        return self.base_dir / Path(value).expanduser()


def shared_resource(
    context: Context, key: Hashable, open: Opener[T]
) -> AbstractAsyncContextManager[T]:
    """The resource ``key`` for an endpoint: the process's shared one, else a private one.

    Inside ``bridges run`` (``context.shared`` is set) the resource is opened
    once per process and kept; elsewhere ``open()`` is entered for the
    caller's ``async with`` alone.
    """
    if context.shared is not None:
        return context.shared.use(key, open)
    return open()
