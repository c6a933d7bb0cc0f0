"""``client.request``: request/reply over ``reply-to`` and ``/temp-queue/``.

The behaviours that matter on a real broker run against all three (the
``target`` fixture: embedded, RabbitMQ, ActiveMQ), with a responder written
with the plain client API: subscribe, read ``reply-to`` and ``correlation-id``,
send the answer there. The hostile cases (a reply that never comes, a flood,
a reply to a request given up, cancellation) run against the embedded broker,
where what the client left behind can be seen from the broker's side.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import pytest
import trio

import trio_stomp
from trio_stomp._request import REPLY_TO
from trio_stomp.testing import fault_proxy

from conftest import Target

VERSIONS = ["1.0", "1.1", "1.2"]


async def respond(
    url: str,
    destination: str,
    *,
    delay: float = 0,
    copies: int = 1,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer each request on ``destination`` with ``re: <body>``, ``copies`` times."""
    async with (
        trio_stomp.connect(url) as client,
        client.subscribe(destination, receipt=True) as sub,
    ):
        task_status.started()
        async for message in sub:
            await trio.sleep(delay)
            for _ in range(copies):
                await client.send(
                    message.headers["reply-to"],
                    b"re: " + message.body,
                    headers={"correlation-id": message.headers["correlation-id"]},
                )


@pytest.mark.conformance
@pytest.mark.parametrize("version", VERSIONS)
async def test_request_gets_its_reply(
    target: Target, unique: Callable[[str], str], version: str
) -> None:
    service = unique("queue")
    async with trio.open_nursery() as nursery:
        await nursery.start(respond, target.url, service)
        async with trio_stomp.connect(target.url, versions=(version,)) as client:
            for index in range(3):
                reply = await client.request(service, f"q{index}", timeout=10)
                assert reply.text == f"re: q{index}"
                assert reply.headers["correlation-id"]
        nursery.cancel_scope.cancel()


@pytest.mark.conformance
async def test_concurrent_requests_each_get_their_own_reply(
    target: Target, unique: Callable[[str], str]
) -> None:
    """Replies come back out of order (the responder holds them, then answers the
    last request first): the correlation-id, not the order, pairs them."""
    service = unique("queue")
    count = 20
    replies: dict[int, str] = {}
    async with (
        trio_stomp.connect(target.url) as responder,
        responder.subscribe(service, receipt=True) as sub,
        trio_stomp.connect(target.url) as client,
        trio.open_nursery() as nursery,
    ):

        async def ask(index: int) -> None:
            reply = await client.request(service, str(index), timeout=10)
            replies[index] = reply.text

        for index in range(count):
            nursery.start_soon(ask, index)
        held = []
        async for message in sub:
            held.append(message)
            if len(held) == count:
                break
        for message in reversed(held):
            await responder.send(
                message.headers["reply-to"],
                f"re: {message.text}",
                headers={"correlation-id": message.headers["correlation-id"]},
            )
    assert replies == {index: f"re: {index}" for index in range(count)}


@pytest.mark.conformance
async def test_a_late_reply_is_dropped_and_the_next_request_gets_its_own(
    target: Target, unique: Callable[[str], str]
) -> None:
    service = unique("queue")
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(respond, target.url, service, delay=0.5))
        async with trio_stomp.connect(target.url) as client:
            with pytest.raises(trio_stomp.RequestTimeout, match="no reply"):
                await client.request(service, "slow", timeout=0.1)
            reply = await client.request(service, "next", timeout=10)
            assert reply.text == "re: next"  # not "re: slow", which came first
        nursery.cancel_scope.cancel()


@pytest.mark.conformance
async def test_a_request_nobody_answers_times_out(
    target: Target, unique: Callable[[str], str]
) -> None:
    async with trio_stomp.connect(target.url) as client:
        with pytest.raises(trio_stomp.RequestTimeout) as info:
            await client.request(unique("queue"), "anyone?", timeout=0.3)
    assert isinstance(info.value, trio.TooSlowError)
    assert isinstance(info.value, trio_stomp.StompError)


# -- the embedded broker: what a request leaves behind ---------------------------------


def reply_queues(broker: trio_stomp.broker.Broker) -> list[trio_stomp.broker.DestinationDepth]:
    return [d for d in broker.depths() if d.destination.startswith("/reply-queue/")]


async def test_every_request_shares_one_reply_subscription(unique: Callable[[str], str]) -> None:
    service = unique("queue")
    async with trio_stomp.broker.open_broker() as broker, trio.open_nursery() as nursery:
        await nursery.start(respond, broker.url, service)
        async with trio_stomp.connect(broker.url) as client:
            async with trio.open_nursery() as requests:
                for index in range(10):
                    requests.start_soon(
                        partial(client.request, service, str(index), timeout=math.inf)
                    )
            [queue] = reply_queues(broker)
            assert queue.consumers == 1
            assert queue.held == 0
        nursery.cancel_scope.cancel()
    assert reply_queues(broker) == []  # gone with the client's connection


async def test_a_cancelled_request_leaves_no_waiter(unique: Callable[[str], str]) -> None:
    async with (
        trio_stomp.broker.open_broker() as broker,
        trio_stomp.connect(broker.url) as client,
    ):
        with trio.move_on_after(0.2) as scope:
            await client.request(unique("queue"), "never answered", timeout=math.inf)
        assert scope.cancelled_caught
        assert client._replies is not None
        assert client._replies.waiting == 0
        with pytest.raises(trio_stomp.RequestTimeout):
            await client.request(unique("queue"), "nor this", timeout=0.1)
        assert client._replies.waiting == 0
        [queue] = reply_queues(broker)
        assert queue.consumers == 1


async def test_a_second_reply_and_a_flood_of_strangers_are_dropped_by_the_reader(
    unique: Callable[[str], str],
) -> None:
    """A responder that answers twice, then floods the reply queue with replies
    to requests that were never made: each is dropped as it arrives, and the
    client keeps answering requests."""
    service = unique("queue")
    flood = 2000
    async with trio_stomp.broker.open_broker() as broker, trio.open_nursery() as nursery:
        await nursery.start(partial(respond, broker.url, service, copies=2))
        async with (
            trio_stomp.connect(broker.url) as client,
            trio_stomp.connect(broker.url) as hostile,
        ):
            reply = await client.request(service, "once", timeout=10)
            assert reply.text == "re: once"
            [queue] = reply_queues(broker)
            for index in range(flood):
                await hostile.send(
                    queue.destination,
                    b"x" * 100,
                    headers={"correlation-id": f"forged-{index}"},
                    receipt=index == flood - 1,  # all of them routed before the next request
                )
            reply = await client.request(service, "again", timeout=10)
            assert reply.text == "re: again"
            assert client._replies is not None
            # The copy of the first reply, the flood, and (maybe, not yet) the copy of the second.
            assert client._replies.dropped >= 1 + flood
            assert client._replies.waiting == 0
        nursery.cancel_scope.cancel()


async def test_a_reply_needs_no_ack(unique: Callable[[str], str]) -> None:
    service = unique("queue")
    async with trio_stomp.broker.open_broker() as broker, trio.open_nursery() as nursery:
        await nursery.start(respond, broker.url, service)
        async with trio_stomp.connect(broker.url) as client:
            reply = await client.request(service, b"\x00bytes", timeout=10)
            assert reply.body == b"re: \x00bytes"
            assert reply.subscription == REPLY_TO
            with pytest.raises(trio_stomp.LocalProtocolError, match="needs no ACK"):
                await reply.ack()
        nursery.cancel_scope.cancel()


async def test_request_headers_and_content_type_reach_the_responder(
    unique: Callable[[str], str],
) -> None:
    service = unique("queue")
    async with (
        trio_stomp.broker.open_broker() as broker,
        trio_stomp.connect(broker.url) as client,
        client.subscribe(service, receipt=True) as sub,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(
            lambda: client.request(service, "text", timeout=10, headers={"x-op": "sum"})
        )
        async for message in sub:
            assert message.headers["x-op"] == "sum"
            assert message.headers["content-type"] == "text/plain;charset=utf-8"
            assert message.headers["reply-to"].startswith("/reply-queue/")
            await client.send(
                message.headers["reply-to"],
                "done",
                headers={"correlation-id": message.headers["correlation-id"]},
            )
            break


@pytest.mark.parametrize("name", ["reply-to", "correlation-id", "destination", "receipt"])
async def test_headers_a_request_sets_itself_are_refused(
    unique: Callable[[str], str], name: str
) -> None:
    async with (
        trio_stomp.broker.open_broker() as broker,
        trio_stomp.connect(broker.url) as client,
    ):
        with pytest.raises(trio_stomp.LocalProtocolError, match=name):
            await client.request(unique("queue"), "x", timeout=1, headers={name: "mine"})
        assert reply_queues(broker) == []  # nothing was sent


async def test_a_request_in_flight_when_the_connection_drops_raises_connection_lost(
    unique: Callable[[str], str],
) -> None:
    """With a reconnect policy: the reply queue went with the old connection, so
    the request fails at once; the next request works on the new connection."""
    service = unique("queue")
    fast = trio_stomp.Reconnect(initial_delay=0.01, max_delay=0.1)
    async with (
        trio_stomp.broker.open_broker() as broker,
        fault_proxy(broker.port) as proxy,
        trio_stomp.connect(proxy.url(), reconnect=fast) as client,
        trio.open_nursery() as nursery,
    ):
        failed = trio.Event()

        async def ask() -> None:
            with pytest.raises(trio_stomp.ConnectionLost, match="lost"):
                await client.request(service, "lost", timeout=10)
            failed.set()

        async with (
            trio_stomp.connect(broker.url) as responder,
            responder.subscribe(service, receipt=True) as sub,
        ):
            nursery.start_soon(ask)
            async for _ in sub:
                break  # the request reached the responder, who never answers it
            proxy.cut()
            await failed.wait()
        assert client._replies is not None
        assert client._replies.waiting == 0
        await nursery.start(respond, broker.url, service)
        reply = await client.request(service, "after", timeout=10)
        assert reply.text == "re: after"
        assert client.reconnects == 1
        nursery.cancel_scope.cancel()


class _CancelAfterSteps(trio.abc.Instrument):
    """Cancels ``scope`` once ``task`` has run ``steps`` scheduler steps."""

    def __init__(self, task: trio.lowlevel.Task, steps: int, scope: trio.CancelScope) -> None:
        self.task, self.steps, self.scope, self.seen = task, steps, scope, 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.seen += 1
            if self.seen == self.steps:
                self.scope.cancel()


@pytest.mark.deadline(60)
async def test_a_request_cancelled_at_any_point_leaves_the_client_consistent(
    unique: Callable[[str], str],
) -> None:
    """Cancel a request at its 1st, 2nd, ... scheduling point (as
    test_client_behaviour.py sweeps send and subscribe): each time, no waiter
    is left, no subscription or receipt is pending, and the next request gets
    its own reply, not the one of the request cancelled before it."""
    service = unique("queue")
    async with trio_stomp.broker.open_broker() as broker, trio.open_nursery() as nursery:
        await nursery.start(respond, broker.url, service)
        async with trio_stomp.connect(broker.url) as client:
            swept = 0
            for steps in range(1, 200):
                scope = trio.CancelScope()
                instrument = _CancelAfterSteps(trio.lowlevel.current_task(), steps, scope)
                trio.lowlevel.add_instrument(instrument)
                try:
                    with scope:
                        reply = await client.request(service, f"swept {steps}", timeout=10)
                finally:
                    trio.lowlevel.remove_instrument(instrument)
                assert client._replies is not None
                assert client._replies.waiting == 0
                assert client._core.receipts == {}
                assert client._core.subscriptions.by_id == {}
                probe = await client.request(service, f"probe {steps}", timeout=10)
                assert probe.text == f"re: probe {steps}"
                if not scope.cancelled_caught:
                    assert reply.text == f"re: swept {steps}"
                    swept = steps
                    break
            assert swept > 1
            [queue] = reply_queues(broker)
            assert queue.consumers == 1
        nursery.cancel_scope.cancel()


async def forger(url: str, destination: str, task_status: trio.TaskStatus[None]) -> None:
    """Answer the first request on ``destination``, then spray replies to its
    ``reply-to`` with the correlation-ids a counter would give next."""
    async with (
        trio_stomp.connect(url) as client,
        client.subscribe(destination, receipt=True) as sub,
    ):
        task_status.started()
        message = await sub.__anext__()
        reply_to, seen = message.headers["reply-to"], message.headers["correlation-id"]
        await client.send(reply_to, b"re: look", headers={"correlation-id": seen})
        prefix = seen.rsplit("-", 1)[0]
        while True:
            for n in range(2, 60):
                await client.send(reply_to, b"forged", headers={"correlation-id": f"{prefix}-{n}"})
            await trio.sleep(0.001)


async def test_a_responder_that_saw_one_request_cannot_forge_the_replies_to_another(
    unique: Callable[[str], str],
) -> None:
    """Issue 32: with ids counted up from a prefix, a responder that had seen one
    request answered 6-8 of another client's 200 with forged replies."""
    evil, good = unique("queue"), unique("queue")
    async with trio_stomp.broker.open_broker() as broker, trio.open_nursery() as nursery:
        await nursery.start(forger, broker.url, evil)
        await nursery.start(partial(respond, broker.url, good, delay=0.01))
        async with trio_stomp.connect(broker.url) as victim:
            assert (await victim.request(evil, "look", timeout=10)).text == "re: look"
            replies = [(await victim.request(good, f"q{n}", timeout=10)).text for n in range(50)]
            assert replies == [f"re: q{n}" for n in range(50)]
            assert victim.replies_unmatched > 0  # the forgeries came, and were counted
        nursery.cancel_scope.cancel()


async def test_ids_are_random_and_long(unique: Callable[[str], str]) -> None:
    seen: list[str] = []
    async with (
        trio_stomp.broker.open_broker() as broker,
        trio_stomp.connect(broker.url) as watcher,
        watcher.subscribe(unique("queue"), receipt=True) as sub,
        trio_stomp.connect(broker.url) as client,
    ):
        for _ in range(3):
            with pytest.raises(trio_stomp.RequestTimeout):
                await client.request(sub.destination, "x", timeout=0.05)
            message = await sub.__anext__()
            seen.append(message.headers["correlation-id"])
    assert len(set(seen)) == 3
    # At least 96 bits: 16 random bytes in URL-safe base64 are 22 characters.
    assert all(len(correlation_id) >= 22 for correlation_id in seen)
    assert not any(seen[0][:8] == other[:8] for other in seen[1:])  # no shared prefix


async def test_a_timeout_says_how_many_replies_came_without_a_matching_correlation_id(
    unique: Callable[[str], str],
) -> None:
    """A responder that forgets to copy the correlation-id: the caller is told."""
    service = unique("queue")

    async def careless(task_status: trio.TaskStatus[None]) -> None:
        async with (
            trio_stomp.connect(broker.url) as client,
            client.subscribe(service, receipt=True) as sub,
        ):
            task_status.started()
            async for message in sub:
                for _ in range(3):
                    await client.send(message.headers["reply-to"], b"answer")

    async with trio_stomp.broker.open_broker() as broker, trio.open_nursery() as nursery:
        await nursery.start(careless)
        async with trio_stomp.connect(broker.url) as client:
            with pytest.raises(trio_stomp.RequestTimeout) as info:
                await client.request(service, "question", timeout=0.5)
            assert "3 replies came meanwhile without a matching correlation-id" in str(info.value)
            assert client.replies_unmatched == 3
        nursery.cancel_scope.cancel()
