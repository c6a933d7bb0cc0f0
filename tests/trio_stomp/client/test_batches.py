"""Subscription.batches() and MessageBatch: many messages per step, acked in one write."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

import trio_stomp

from conftest import Target


async def _fill(client: trio_stomp.Client, dest: str, count: int) -> None:
    for i in range(count):
        await client.send(dest, str(i))
    await client.send(dest, "last", receipt=True)


async def _left_in(url: str, dest: str) -> list[str]:
    """What the queue still holds (auto acks; until it is quiet for a moment)."""
    got: list[str] = []
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(dest, receipt=True) as sub:
            while True:
                with trio.move_on_after(0.3) as scope:
                    message = await anext(aiter(sub))
                if scope.cancelled_caught:
                    return got
                got.append(message.text)


async def test_batches_hand_out_every_message_once_in_order(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        await _fill(client, dest, 99)
        got: list[str] = []
        sizes: list[int] = []
        async with client.subscribe(dest, ack="client-individual") as sub:
            async for batch in sub.batches(max_messages=7):
                assert 1 <= len(batch) <= 7
                sizes.append(len(batch))
                got.extend(message.text for message in batch)
                assert list(batch[0:1]) == [batch[0]]
                await batch.ack(receipt=True)
                if got[-1] == "last":
                    break
    assert got == [*map(str, range(99)), "last"]
    assert max(sizes) == 7
    assert await _left_in(embedded.url, dest) == []


async def test_client_mode_batch_ack_is_cumulative(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        await _fill(client, dest, 49)
        got = 0
        async with client.subscribe(dest, ack="client") as sub:
            async for batch in sub.batches():
                got += len(batch)
                await batch.ack(receipt=True)
                if batch[-1].text == "last":
                    break
    assert got == 50
    assert await _left_in(embedded.url, dest) == []


async def test_batch_nack_gives_every_message_back(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        await _fill(client, dest, 4)
        async with client.subscribe(dest, ack="client-individual") as sub:
            taken: list[str] = []
            async for batch in sub.batches():
                taken.extend(message.text for message in batch)
                if taken[-1] == "last":
                    await batch.nack(receipt=True)
                    break
                await batch.nack()
    assert sorted(await _left_in(embedded.url, dest)) == sorted([*map(str, range(4)), "last"])


async def test_batches_and_messages_mix_each_message_once(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        await _fill(client, dest, 9)
        async with client.subscribe(dest, receipt=True) as sub:
            got = [(await anext(aiter(sub))).text]
            while got[-1] != "last":
                batch = await anext(aiter(sub.batches(max_messages=3)))
                got.extend(message.text for message in batch)
    assert got == [*map(str, range(9)), "last"]


async def test_batch_ack_on_auto_subscription_is_an_error(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        await client.send(dest, b"m", receipt=True)
        async with client.subscribe(dest, receipt=True) as sub:
            batch = await anext(aiter(sub.batches()))
            assert repr(batch) == "<MessageBatch of 1 messages>"
            with pytest.raises(trio_stomp.LocalProtocolError, match="auto"):
                await batch.ack()


async def test_batches_refuse_a_zero_maximum(embedded: Target) -> None:
    async with trio_stomp.connect(embedded.url) as client:
        async with client.subscribe("/queue/unused", receipt=True) as sub:
            with pytest.raises(ValueError, match="max_messages"):
                sub.batches(max_messages=0)


async def test_cancelled_wait_for_a_batch_loses_nothing(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        async with client.subscribe(dest, ack="client-individual", receipt=True) as sub:
            batches = sub.batches()
            with trio.move_on_after(0.05) as scope:
                await anext(batches)
            assert scope.cancelled_caught
            await client.send(dest, b"after", receipt=True)
            batch = await anext(batches)
            assert [message.body for message in batch] == [b"after"]
            await batch.ack()


async def test_batch_ack_after_the_connection_is_gone_is_refused(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        await client.send(dest, b"m", receipt=True)
        async with client.subscribe(dest, ack="client-individual", receipt=True) as sub:
            kept = await anext(aiter(sub.batches()))
    with pytest.raises(trio_stomp.ClientClosed, match="redeliver"):
        await kept.ack()


async def test_message_batch_of_acks_messages_of_several_batches_in_one_write(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        await _fill(client, dest, 9)
        kept: list[trio_stomp.Message] = []
        async with client.subscribe(dest, ack="client-individual") as sub:
            async for batch in sub.batches(max_messages=3):
                kept.extend(batch)
                if batch[-1].text == "last":
                    break
            assert len({m.ack_group for m in kept}) == 1
            await trio_stomp.MessageBatch.of(kept).ack(receipt=True)
            async with client.subscribe(unique("queue"), ack="client-individual") as other:
                other_message = trio_stomp.Message(kept[0].frame, other._state.delivery)
                with pytest.raises(ValueError, match="same subscription"):
                    trio_stomp.MessageBatch.of([kept[0], other_message])
    with pytest.raises(ValueError, match="at least one"):
        trio_stomp.MessageBatch.of([])
    assert await _left_in(embedded.url, dest) == []
