"""A message a broker cannot take never takes a stomp sink's batch down (issue 23, section 6).

Two ways, on every broker:

- checked: the sink's limits (defaults) find the message before anything is
  sent, and it is dead-lettered alone with a reason naming the limit;
- bisected: the sink's limits are set above the broker's, so the broker
  refuses the SEND with an ERROR that names no frame; the engine writes the
  batch again in halves until the message is alone (RabbitMQ takes 1,001
  headers and long ones, so it has no such case here).

(The issue's own route, redis -> stomp, is in ``redis/test_redis_poison.py``.)
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio
from family_kit import POISON_MIXES, POISON_SETTINGS
from hypothesis import example, given
from hypothesis import strategies as st

import trio_stomp
from bridges import Context, Message, RetryPolicy, Route
from bridges.endpoints.stomp import StompSink, StompSinkConfig
from bridges.testing import (
    HOSTILE,
    FakeSource,
    PoisonOutcome,
    SinkCase,
    SinkFactory,
    check_poison,
)
from trio_stomp.broker import open_broker

from conftest import REAL_BROKERS, require_real_broker

#: Limits above every broker's: the broker is the one to refuse.
ABOVE = {"max_header_count": 10**6, "max_header_length": 10**8, "max_message_bytes": 10**8}
#: The sink's defaults.
DEFAULTS: dict[str, int] = {}
#: HOSTILE labels -> what a dead letter's reason says, when the sink's checks find it.
CHECKED = {
    "not-utf8-value": "not UTF-8 text",
    "not-utf8-name": "not UTF-8 text",
    "not-utf8-id": "not UTF-8 text",
    "many-headers": "more than max_header_count = 1000",
    "long-header": "more than max_header_length = 10240",
    "nul": "NUL",
    "empty-name": "cannot be sent over STOMP",
}


async def drain(url: str, destination: str, held: list[Message]) -> list[Message]:
    """Take everything off the queue (what was taken before stays counted)."""
    async with trio_stomp.connect(url, heartbeat=(0, 0)) as reader:
        async with reader.subscribe(destination, ack="client-individual") as sub:
            while True:
                with trio.move_on_after(0.25):
                    message = await sub.__anext__()
                    await message.ack()
                    held.append(Message(message.body))
                    continue
                return list(held)


def stomp_sinks(url: str, limits: dict[str, int], confirm: str = "receipt") -> SinkFactory:
    @asynccontextmanager
    async def factory() -> AsyncIterator[SinkCase]:
        destination = f"/queue/trio-stomp-poison-{uuid.uuid4().hex[:10]}"
        config = StompSinkConfig(
            url=url,
            destination=destination,
            heartbeat=(0, 0),
            confirm="transaction" if confirm == "transaction" else "receipt",
            max_header_count=limits.get("max_header_count"),
            max_header_length=limits.get("max_header_length"),
            max_message_bytes=limits.get("max_message_bytes"),
        )
        sink = StompSink(config, Context(route="poison", role="sink"))
        held: list[Message] = []
        yield SinkCase(sink, lambda: drain(url, destination, held))

    return factory


async def on_broker(name: str, run: Callable[[str], Awaitable[PoisonOutcome]]) -> PoisonOutcome:
    if name == "embedded":
        async with open_broker() as broker:
            return await run(broker.url)
    require_real_broker(name)
    return await run(REAL_BROKERS[name])


def label(body: bytes) -> str:
    """The HOSTILE label in a body the poison rule made: ``poison-RUN-N-LABEL-LABEL``."""
    rest = body.decode("utf-8", "replace").split("-", 3)[3]
    return rest[: len(rest) // 2]


@pytest.mark.parametrize("broker", ["embedded", "rabbitmq", "activemq"])
@POISON_SETTINGS
@given(mix=POISON_MIXES)
def test_the_sink_checks_set_each_poison_message_aside_alone_with_the_limit(
    broker: str, mix: list[int | None]
) -> None:
    async def run(url: str) -> PoisonOutcome:
        return await check_poison(stomp_sinks(url, DEFAULTS), mix)

    outcome = trio.run(on_broker, broker, run)
    for body, reason in outcome.dead.items():
        expected = CHECKED.get(label(body))
        assert expected is not None, (body[:60], reason)  # nothing else is dead-lettered
        assert expected in reason, (body[:60], reason)
    checked = {f"-{name}-".encode() for name in CHECKED}
    assert not [b for b in outcome.held if any(c in b for c in checked)]


@pytest.mark.parametrize("broker", ["embedded", "activemq"])
@POISON_SETTINGS
@given(mix=POISON_MIXES, confirm=st.sampled_from(["receipt", "transaction"]))
@example(mix=[None, 3, None, None, None, 4, None], confirm="receipt")  # many-headers, long-header
@example(mix=[None, None, 4, None, 3], confirm="transaction")
def test_a_send_the_broker_refuses_is_found_by_halves_and_set_aside_alone(
    broker: str, mix: list[int | None], confirm: str
) -> None:
    async def run(url: str) -> PoisonOutcome:
        return await check_poison(stomp_sinks(url, ABOVE, confirm), mix)

    outcome = trio.run(on_broker, broker, run)
    assert [name for name, _, _ in HOSTILE][3:5] == ["many-headers", "long-header"]
    refused = {label(body): reason for body, reason in outcome.dead.items()}
    for name in ("many-headers", "long-header"):
        if any(f"-{name}-".encode() in m.body for m in outcome.batch):
            assert refused[name].startswith("the broker refused it: "), refused


def test_hostile_labels_this_module_names_exist() -> None:
    labels = {name for name, _, _ in HOSTILE}
    assert set(CHECKED) <= labels


async def test_without_a_dead_letter_sink_the_poison_is_nacked_alone_and_the_rest_arrives() -> None:
    """The issue's second case: no dead-letter sink used to nack the whole batch forever."""
    good = [Message(f"good-{n}".encode(), {}, f"g{n}") for n in range(30)]
    poison = Message(b"poison", {"field": "caf\udce9"}, "p")
    source = FakeSource([*good[:10], poison, *good[10:]])
    async with open_broker() as broker:
        destination = "/queue/no-dead-letters"
        sink = StompSink(
            StompSinkConfig(url=broker.url, destination=destination, heartbeat=(0, 0)),
            Context(route="poison", role="sink"),
        )
        retry = RetryPolicy(attempts=2, initial=0.01, jitter=0.0)
        route = Route("poison", source, sink, batch_count=100, batch_time=0.1, retry=retry)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(route.run)
            held: list[Message] = []
            while len(held) < 30:
                held = await drain(broker.url, destination, held)
            route.stop()
    assert sorted(m.body for m in held) == sorted(m.body for m in good)
    assert {message_id for message_id, _ in source.nacked} == {"p"}
    assert "not UTF-8 text" in str(source.nacked[0][1])
    assert route.stats.written == 30
