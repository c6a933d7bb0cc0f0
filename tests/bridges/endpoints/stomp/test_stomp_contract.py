"""The stomp source and sink held to the bridges Source/Sink contract, on every broker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import pytest
import trio

import trio_stomp
from bridges import Context, Message
from bridges.endpoints.stomp import StompSink, StompSinkConfig, StompSource, StompSourceConfig
from bridges.testing import (
    SinkCase,
    SinkFactory,
    SourceCase,
    SourceFactory,
    check_sink,
    check_source,
)

from conftest import Target

#: The sink's size limit in these checks: the message to reject is larger.
LIMIT = 4096


def source_cases(target: Target, unique: Callable[[str], str]) -> SourceFactory:
    @asynccontextmanager
    async def factory() -> AsyncIterator[SourceCase]:
        destination = unique("queue")
        config = StompSourceConfig(url=target.url, destination=destination, heartbeat=(0, 0))
        source = StompSource(config, Context(route="c", in_flight=100))

        async def publish(messages: Sequence[Message]) -> None:
            async with trio_stomp.connect(target.url) as client:
                for i, message in enumerate(messages, 1):
                    last = i == len(messages)  # its RECEIPT confirms every SEND before it
                    await client.send(
                        destination, message.body, headers=message.headers, receipt=last
                    )

        # ActiveMQ's redelivery policy dead-letters a NACKed message; RabbitMQ gives
        # each delivery a new message-id, and these messages carry no bridge-id
        # (test_stomp_ids.py pins each broker's behaviour).
        yield SourceCase(
            source,
            publish,
            nack_redelivers=target.name != "activemq",
            stable_ids=target.name != "rabbitmq",
        )

    return factory


def sink_cases(target: Target, unique: Callable[[str], str]) -> SinkFactory:
    @asynccontextmanager
    async def factory() -> AsyncIterator[SinkCase]:
        destination = unique("queue")
        config = StompSinkConfig(
            url=target.url, destination=destination, heartbeat=(0, 0), max_message_bytes=LIMIT
        )
        sink = StompSink(config, Context(route="c", role="sink"))
        held: list[Message] = []  # what read_back took off the queue so far

        async def read_back() -> list[Message]:
            # A queue is read by consuming it: what was taken before stays counted.
            # (A connection per call: the kit counts tasks left, and a reader's would count.)
            async with trio_stomp.connect(target.url, heartbeat=(0, 0)) as reader:
                async with reader.subscribe(destination, ack="client-individual") as sub:
                    while True:
                        with trio.move_on_after(0.3):
                            message = await sub.__anext__()
                            await message.ack()
                            held.append(Message(message.body))
                            continue
                        return list(held)

        too_big = Message(b"x" * (LIMIT + 1), {}, "too-big")
        yield SinkCase(sink, read_back, reject=too_big)

    return factory


@pytest.mark.deadline(120)
async def test_the_stomp_source_keeps_the_source_contract(
    target: Target, unique: Callable[[str], str]
) -> None:
    await check_source(source_cases(target, unique))


@pytest.mark.deadline(120)
async def test_the_stomp_sink_keeps_the_sink_contract(
    target: Target, unique: Callable[[str], str]
) -> None:
    await check_sink(sink_cases(target, unique))
