"""The Sink contract's poison rule: a message the target cannot take never takes its batch down.

What it checks and with which messages: :func:`check_poison`.

:func:`check_sink` runs it with a fixed mix (each hostile message once,
between good ones); a family's own tests call :func:`check_poison` with
mixes that Hypothesis draws.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import attrs
import trio

from .._batch import DEAD_LETTER_HEADERS
from .._engine import Route
from .._message import Message
from .._retry import RetryPolicy
from ._cases import ContractViolation, SinkCase, SinkFactory
from ._fakes import FakeBulkSource, FakeSink

#: The hostile messages every sink meets: (label, headers, id suffix).
HOSTILE: tuple[tuple[str, dict[str, str], str], ...] = (
    ("not-utf8-value", {"field": "caf\udce9"}, ""),
    ("not-utf8-name", {"caf\udce9": "value"}, ""),
    ("not-utf8-id", {}, "-\udce9"),
    ("many-headers", {f"h{i}": "v" for i in range(1001)}, ""),
    ("long-header", {"long": "v" * 70_000}, ""),
    ("big-head", {f"k{i}": "v" * 1000 for i in range(200)}, ""),
    ("nul", {"nul": "a\0b"}, ""),
    ("line-break", {"crlf": "a\r\nb"}, ""),
    ("empty-name", {"": "value"}, ""),
    ("escapes", {"a:b": "c\\d:e"}, ""),
    ("unicode", {"note": "caf\u00e9 \u2603"}, ""),
)

#: Retries of the route under test: few and short (a poison message is refused at once).
_RETRY = RetryPolicy(attempts=2, initial=0.01, max=0.05, jitter=0.0)


@attrs.frozen
class PoisonOutcome:
    """What one run of the poison rule saw.

    Attributes:
      held: the bodies on the server afterwards.
      dead: body -> ``bridge-error`` of every dead letter.
      batch: the messages written, in order.
    """

    held: list[bytes]
    dead: dict[bytes, str]
    batch: list[Message]


def own_poison(case: SinkCase) -> list[Message]:
    """What the sink itself cannot take: its :attr:`SinkCase.reject`, then its poison."""
    return [*([case.reject] if case.reject is not None else []), *case.poison]


def default_mix(case: SinkCase) -> list[int | None]:
    """Every candidate once (the sink's poison, then :data:`HOSTILE`), each after a good one."""
    mix: list[int | None] = []
    for index in range(len(own_poison(case)) + len(HOSTILE)):
        mix += [None, index]
    return [*mix, None]


def _violation(rule: str, detail: str) -> ContractViolation:
    return ContractViolation(f"{rule}: {detail}")


async def check_poison(
    factory: SinkFactory,
    mix: Sequence[int | None] | None = None,
    *,
    rule_seconds: float = 20.0,
) -> PoisonOutcome:
    """Hold a sink to the poison rule; raise ContractViolation if it breaks.

    The batch (``mix``) mixes good messages with hostile ones: a header that
    is not UTF-8 text, more than 1,000 headers, a header over 64 KiB, 200 KiB
    of headers in all, NUL or a line break in a header, an empty header
    name, and the sink's own :attr:`SinkCase.reject` and
    :attr:`SinkCase.poison` (a body over its limit, say). It goes through a real
    :class:`~bridges.Route` (a :class:`~bridges.testing.FakeBulkSource` in front,
    a :class:`~bridges.testing.FakeSink` as the dead-letter sink), in one batch,
    and then:

    - every good message is on the server (``read_back``), and none is
      dead-lettered;
    - every message of the sink's own poison is dead-lettered, with a reason
      (``bridge-error``), and is not on the server;
    - every other hostile message is either on the server or dead-lettered with
      a reason: the sink decides whether its target can carry it, but it never
      loses it and never lets it fail the others;
    - nothing is nacked, nothing is left unsettled, and the route ends: a poison
      message never stalls its route.

    Args:
      factory: opens a fresh :class:`SinkCase` against the real server.
      mix: the batch, in order: None for a good message, N for candidate N
        (modulo their number) of the sink's own poison (``own_poison``)
        followed by :data:`HOSTILE`; default: every candidate once, each after a good message.
      rule_seconds: bound on the whole rule.

    Returns:
      what the server holds and what was dead-lettered, for more checks.
    """
    rule = "a message the target cannot take never takes its batch down"
    async with factory() as case:
        chosen = default_mix(case) if mix is None else list(mix)
        batch, good, poison = _batch(case, chosen)
        source = FakeBulkSource(batch)
        dead_letter = FakeSink()
        route = Route(
            "poison",
            source,
            case.sink,
            dead_letter=dead_letter,
            in_flight=len(batch) + 1,
            batch_count=max(len(batch), 1),
            batch_time=1.0,
            retry=_RETRY,
        )
        try:
            with trio.fail_after(rule_seconds):
                await route.run()
                held = [message.body for message in await case.read_back()]
        except trio.TooSlowError:
            raise _violation(
                rule, f"not done in {rule_seconds:g} s ({route.stats}): a poison message stalls"
            ) from None
    dead = _dead(dead_letter, rule)
    _check(rule, batch, good, poison, held, dead, source)
    return PoisonOutcome(held, dead, batch)


def _batch(case: SinkCase, mix: list[int | None]) -> tuple[list[Message], set[bytes], set[bytes]]:
    """The messages of ``mix``, each with a body and id of its own; the good and poison bodies."""
    run = uuid.uuid4().hex[:10]
    own = own_poison(case)
    candidates = [(message, "poison", "") for message in own]
    candidates += [
        (Message(label.encode(), headers), label, suffix) for label, headers, suffix in HOSTILE
    ]
    batch: list[Message] = []
    good: set[bytes] = set()
    poison: set[bytes] = set()
    for n, item in enumerate(mix):
        tag = f"poison-{run}-{n}"
        if item is None:
            message = Message(f"{tag}-good".encode(), {"contract-index": str(n)}, tag)
            good.add(message.body)
        else:
            index = item % len(candidates)
            original, label, suffix = candidates[index]
            body = f"{tag}-{label}-".encode() + original.body
            # (the sink's own poison may be poison by its id: a file name too long)
            ident = original.id if index < len(own) and original.id else tag + suffix
            message = Message(body, original.headers, ident, original.destination)
            if index < len(own):
                poison.add(body)
        batch.append(message)
    return batch, good, poison


def _dead(dead_letter: FakeSink, rule: str) -> dict[bytes, str]:
    dead: dict[bytes, str] = {}
    for letters in dead_letter.batches:
        for letter in letters:
            reason = letter.headers.get(DEAD_LETTER_HEADERS[0], "")
            if not reason:
                raise _violation(rule, f"{letter.body[:60]!r} was dead-lettered with no reason")
            dead[letter.body] = reason
    return dead


def _check(
    rule: str,
    batch: list[Message],
    good: set[bytes],
    poison: set[bytes],
    held: list[bytes],
    dead: dict[bytes, str],
    source: FakeBulkSource,
) -> None:
    on_server = set(held)
    wrongly = sorted(good & dead.keys())
    if wrongly:
        first = wrongly[0]
        raise _violation(
            rule, f"{len(wrongly)} good message(s) dead-lettered, e.g. {first!r}: {dead[first]}"
        )
    missing = sorted(good - on_server)
    if missing:
        raise _violation(rule, f"{len(missing)} good message(s) not written, e.g. {missing[0]!r}")
    through = sorted(poison & on_server)
    if through:
        raise _violation(rule, f"the poison message {through[0][:60]!r} was written")
    kept = sorted(poison - dead.keys())
    if kept:
        raise _violation(rule, f"the poison message {kept[0][:60]!r} was not dead-lettered")
    lost = [m.body for m in batch if m.body not in on_server and m.body not in dead]
    if lost:
        raise _violation(rule, f"{lost[0][:60]!r} was neither written nor dead-lettered")
    if source.nacked or source.unsettled:
        raise _violation(
            rule, f"{len(source.nacked)} nacked, {source.unsettled} unsettled: expected none"
        )
