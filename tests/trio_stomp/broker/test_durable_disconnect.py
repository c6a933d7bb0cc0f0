"""A client-id is free again at DISCONNECT (after its RECEIPT), not when the socket closes.

Issue 32: 20 of 20 reconnects sent right after a DISCONNECT's RECEIPT were
refused with "client-id in use" while the old socket was still open, where
ActiveMQ 5.17 refused 0 of 10.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio

from trio_stomp.broker import open_broker
from trio_stomp.testing import RawClient, open_raw_client

TOPIC = "/topic/news"
NAME = "activemq.subscriptionName"


async def subscribe(client: RawClient, ack: str) -> None:
    """SUBSCRIBE to the durable subscription "daily" and wait for its RECEIPT."""
    headers = {"destination": TOPIC, "id": "0", "ack": ack, NAME: "daily", "receipt": "sub"}
    await client.send("SUBSCRIBE", headers)
    await client.receipt("sub")


@pytest.mark.parametrize("stored", [False, True], ids=["memory", "data_dir"])
async def test_twenty_reconnects_right_after_disconnect_are_all_accepted(
    tmp_path: Path, stored: bool
) -> None:
    data_dir = tmp_path if stored else None
    with trio.fail_after(30):
        async with open_broker(data_dir=data_dir) as broker, AsyncExitStack() as old_sockets:
            producer = await old_sockets.enter_async_context(open_raw_client(broker))
            for round_ in range(20):
                # The old connection's socket stays open: only DISCONNECT frees the id.
                client = await old_sockets.enter_async_context(
                    open_raw_client(broker, client_id="app")
                )
                await subscribe(client, "client-individual")
                await producer.publish(TOPIC, str(round_).encode())
                await producer.sync()
                await client.send("DISCONNECT", {"receipt": f"bye-{round_}"})
                await client.receipt(f"bye-{round_}")
            # Nothing was acknowledged: the next consumer gets it all, in order.
            last = await old_sockets.enter_async_context(open_raw_client(broker, client_id="app"))
            await subscribe(last, "auto")
            bodies = [int((await last.expect("MESSAGE")).body) for _ in range(20)]
            assert bodies == list(range(20))


async def test_a_connection_that_holds_the_client_id_still_keeps_it() -> None:
    async with open_broker() as broker, open_raw_client(broker, client_id="app"):
        async with open_raw_client(broker, connect=False) as second:
            await second.send("CONNECT", {"accept-version": "1.2", "client-id": "app"})
            error = await second.expect("ERROR")
            assert error.headers["message"] == "client-id in use"
