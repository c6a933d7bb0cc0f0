"""The engine's own work per message, counted in Python calls: a bound that load does not move.

A route from an in-memory source into a sink that only counts, against the
same source's envelopes received and acked in a plain loop: the difference,
per message, is what the engine adds (cProfile counts every Python call and
every resumption of a coroutine, Trio's scheduler included). CPU time on a
shared machine swings by a third from run to run; these counts do not.
``bench/speed/engine.py`` measures the same shapes in µs.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

import pytest
import trio

from bridges import Envelope, Message, Route
from bridges._message import trusted_message

COUNT = 3000


async def _refuse(error: BaseException | None) -> None:
    raise AssertionError(f"nacked: {error!r}")


class _Source:
    def __init__(self) -> None:
        self.made = 0
        self.acked = 0

    def describe(self) -> str:
        return "memory"

    async def _ack(self) -> None:
        self.acked += 1


class _OneAtATime(_Source):
    """Hands out one envelope per ``receive()``, each acked alone (a file's, a webhook's)."""

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_OneAtATime]:
        yield self

    async def receive(self) -> Envelope:
        if self.made >= COUNT:
            raise trio.EndOfChannel
        self.made += 1
        return Envelope(trusted_message(b"x", {}, f"m/{self.made}"), ack=self._ack, nack=_refuse)


class _KeyedEnvelope(Envelope):
    __slots__ = ("settle_key",)
    settle_key: _Bulk

    async def ack_all(self, envelopes: Sequence[Envelope]) -> None:
        for envelope in envelopes:
            envelope.state = "acked"
        self.settle_key.acked += len(envelopes)


class _Bulk(_Source):
    """A bulk receiver whose envelopes are acked in runs (kafka's, nats's, stomp's)."""

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_Bulk]:
        yield self

    def make(self, most: int) -> list[Envelope]:
        first, self.made = self.made, min(COUNT, self.made + most)
        if first == self.made:
            raise trio.EndOfChannel
        out: list[Envelope] = []
        for number in range(first, self.made):
            envelope = _KeyedEnvelope(
                trusted_message(b"x", {}, f"m/{number}"), ack=self._ack, nack=_refuse
            )
            envelope.settle_key = self
            out.append(envelope)
        return out

    async def receive_some(self, most: int) -> Sequence[Envelope]:
        return self.make(most)

    async def receive(self) -> Envelope:
        return self.make(1)[0]


class _Counting:
    def describe(self) -> str:
        return "count"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_Counting]:
        yield self

    async def write(self, batch: Sequence[Message]) -> None:
        await trio.lowlevel.checkpoint()


def _calls(run: Callable[[], Awaitable[int]]) -> float:
    """Python calls per message of ``trio.run(run)``, which must settle every message."""
    profile = cProfile.Profile()
    acked = profile.runcall(trio.run, run)
    assert acked == COUNT
    return float(pstats.Stats(profile).total_calls) / COUNT  # type: ignore[attr-defined]


async def _route(source: _OneAtATime | _Bulk) -> int:
    await Route("cost", source, _Counting()).run()
    return source.acked


async def _plain_one_at_a_time() -> int:
    source = _OneAtATime()
    while source.made < COUNT:
        await (await source.receive()).ack()
        if source.made % 64 == 0:
            await trio.lowlevel.checkpoint()
    return source.acked


async def _plain_bulk() -> int:
    source = _Bulk()
    while source.made < COUNT:
        envelopes = source.make(1000)
        await envelopes[0].ack_all(envelopes)
        await trio.lowlevel.checkpoint()
    return source.acked


@pytest.mark.parametrize(
    ("source", "plain", "most"),
    [
        # 16.5 before a batch left the in-flight set in one update; 5.4 since.
        (_OneAtATime, _plain_one_at_a_time, 8.0),
        # Per-batch work only (about 200 calls a batch of 100, half of them Trio's).
        (_Bulk, _plain_bulk, 3.0),
    ],
)
def test_the_engine_adds_few_python_calls_per_message(
    source: type[_OneAtATime | _Bulk], plain: Callable[[], Awaitable[int]], most: float
) -> None:
    engine = _calls(lambda: _route(source())) - _calls(plain)
    assert engine <= most, f"the engine makes {engine:.2f} calls per message (bound {most})"
