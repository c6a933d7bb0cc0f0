"""Subscriptions, transactions and messages own their state; a message holds only what
acknowledging it takes (an ack callback), never its subscription or client."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

import trio_stomp

from conftest import Target


async def test_a_message_holds_an_ack_callback_not_its_subscription(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with (
        trio_stomp.connect(embedded.url) as client,
        client.subscribe(dest, ack="client-individual", receipt=True) as sub,
    ):
        await client.send(dest, b"x", receipt=True)
        message = await anext(aiter(sub))
        held = gc.get_referents(message)
        assert not [r for r in held if isinstance(r, trio_stomp.Subscription | trio_stomp.Client)]
        assert any(callable(r) for r in held)
        assert message.subscription == sub.id
        await message.ack(receipt=True)


async def test_acking_in_a_transaction_of_another_client_is_refused(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with (
        trio_stomp.connect(embedded.url) as first,
        trio_stomp.connect(embedded.url) as second,
        first.subscribe(dest, ack="client-individual", receipt=True) as sub,
    ):
        await first.send(dest, b"x", receipt=True)
        message = await anext(aiter(sub))
        async with second.transaction() as tx:
            with pytest.raises(trio_stomp.LocalProtocolError, match="another connection"):
                await tx.ack(message)
        async with first.transaction() as tx:
            await tx.ack(message)
        assert tx.state == "committed"
