"""Selectors in the broker: who gets what, what stays, and what it costs.

The sans-IO core (router and sessions, no sockets) for the dispatch rules,
and the broker over TCP for the ERROR a bad selector gets.
"""

from __future__ import annotations

import pytest
import trio
from test_broker_model import Peer, connected

from trio_stomp.broker import Broker, open_broker
from trio_stomp.broker._destinations import Router, Subscription
from trio_stomp.frame import Frame
from trio_stomp.testing import open_raw_client


def bodies(frames: list[Frame]) -> list[bytes]:
    assert all(frame.command == "MESSAGE" for frame in frames), frames
    return [frame.body for frame in frames]


def send(peer: Peer, destination: str, body: bytes, **headers: str) -> None:
    peer.send("SEND", {"destination": destination, **headers}, body)


def subscribe(peer: Peer, destination: str, sub_id: str, selector: str | None, **more: str) -> None:
    headers = {"destination": destination, "id": sub_id, **more}
    if selector is not None:
        headers["selector"] = selector
    peer.send("SUBSCRIBE", headers)


def test_a_queue_message_the_selector_skips_stays_for_another_consumer() -> None:
    router = Router()
    producer, red, blue = connected(router), connected(router), connected(router)
    subscribe(red, "/queue/q", "r", "color = 'red'")
    subscribe(blue, "/queue/q", "b", "color = 'blue'")
    for color in ("red", "green", "blue", "red", "green"):
        send(producer, "/queue/q", color.encode(), color=color)
    assert bodies(red.output()) == [b"red", b"red"]
    assert bodies(blue.output()) == [b"blue"]
    assert router.depth("/queue/q") == 2  # the green ones wait, in order
    anyone = connected(router)
    subscribe(anyone, "/queue/q", "a", None)
    assert bodies(anyone.output()) == [b"green", b"green"]
    assert router.depth("/queue/q") == 0


def test_messages_before_a_selecting_subscriber_wait_and_are_selected_later() -> None:
    router = Router()
    producer = connected(router)
    for n in range(6):
        send(producer, "/queue/later", str(n).encode(), n=str(n))
    consumer = connected(router)
    subscribe(consumer, "/queue/later", "s", "n > 2")
    assert bodies(consumer.output()) == [b"3", b"4", b"5"]
    assert router.depth("/queue/later") == 3


def test_round_robin_among_consumers_that_select_the_message() -> None:
    router = Router()
    producer, a, b, c = (connected(router) for _ in range(4))
    subscribe(a, "/queue/rr", "a", "n < 100")
    subscribe(b, "/queue/rr", "b", "n >= 100")
    subscribe(c, "/queue/rr", "c", "n < 100")
    for n in range(6):
        send(producer, "/queue/rr", str(n).encode(), n=str(n))
    assert bodies(a.output()) == [b"0", b"2", b"4"]
    assert bodies(c.output()) == [b"1", b"3", b"5"]
    assert b.output() == []


def test_a_full_window_passes_the_message_to_another_selecting_consumer() -> None:
    router = Router()
    producer, slow, other = connected(router), connected(router), connected(router)
    subscribe(slow, "/queue/w", "s", "k = 'x'", ack="client-individual", **{"prefetch-count": "1"})
    subscribe(other, "/queue/w", "o", "k = 'x'")
    for n in range(3):
        send(producer, "/queue/w", str(n).encode(), k="x")
    assert bodies(slow.output()) == [b"0"]
    assert bodies(other.output()) == [b"1", b"2"]


def test_a_nacked_message_is_selected_again_and_jms_redelivered_sees_it() -> None:
    router = Router()
    producer, first = connected(router), connected(router)
    subscribe(first, "/queue/n", "f", "k = 'x'", ack="client-individual")
    send(producer, "/queue/n", b"m", k="x")
    [message] = first.output()
    first.send("NACK", {"id": message.headers["ack"]})
    [again] = first.output()
    assert again.headers["redelivered"] == "true"
    first.send("UNSUBSCRIBE", {"id": "f"})
    later = connected(router)
    subscribe(later, "/queue/n", "l", "JMSRedelivered AND k = 'x'")
    assert bodies(later.output()) == [b"m"]


def test_topic_subscribers_get_only_what_they_select() -> None:
    router = Router()
    producer, picky, everything = connected(router), connected(router), connected(router)
    subscribe(picky, "/topic/t", "p", "level IN ('warn', 'error')")
    subscribe(everything, "/topic/t", "e", None)
    for level in ("info", "warn", "debug", "error"):
        send(producer, "/topic/t", level.encode(), level=level)
    assert bodies(picky.output()) == [b"warn", b"error"]
    assert bodies(everything.output()) == [b"info", b"warn", b"debug", b"error"]
    assert router.depth("/topic/t") == 0


def test_a_queue_nobody_selects_does_one_evaluation_per_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No spinning: a backlog that no consumer selects is looked at once per
    message as it arrives, and again only when a consumer gets room."""
    calls = 0
    original = Subscription.selects

    def counting(self: Subscription, message: object, *more: object) -> bool:
        nonlocal calls
        calls += 1
        return original(self, message, *more)  # type: ignore[arg-type]

    monkeypatch.setattr(Subscription, "selects", counting)
    router = Router()
    producer, consumer = connected(router), connected(router)
    subscribe(consumer, "/queue/none", "s", "k = 'never'", ack="client-individual")
    for n in range(2000):
        send(producer, "/queue/none", b"x", k=str(n))
    assert calls == 2000
    assert router.depth("/queue/none") == 2000
    send(producer, "/queue/none", b"yes", k="never")  # behind 2000 it skips
    assert calls == 2001
    [message] = consumer.output()
    assert message.body == b"yes"
    consumer.send("ACK", {"id": message.headers["ack"]})  # room again: one full look
    assert calls == 4001
    assert consumer.output() == []


def test_an_event_costs_at_most_selector_scan_evaluations_however_many_consumers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = 0
    original = Subscription.selects

    def counting(self: Subscription, message: object, *more: object) -> bool:
        nonlocal calls
        calls += 1
        return original(self, message, *more)  # type: ignore[arg-type]

    monkeypatch.setattr(Subscription, "selects", counting)
    router = Router(selector_scan=1000)
    producer = connected(router)
    for _ in range(5000):
        send(producer, "/queue/crowd", b"x", k="nobody")
    peers = [connected(router) for _ in range(10)]
    for number, peer in enumerate(peers):
        for sub in range(10):  # 100 consumers that select nothing
            before = calls
            subscribe(peer, "/queue/crowd", f"{number}-{sub}", "k = 'never'")
            assert calls - before <= 1000 + 100  # the budget, and one message's round
    before = calls
    send(producer, "/queue/crowd", b"y", k="never")  # not settled: a full (bounded) look
    assert calls - before <= 1000 + 100
    assert router.depth("/queue/crowd") == 5001 - sum(len(p.output()) for p in peers)


def test_dispatch_looks_at_most_selector_scan_messages_per_event() -> None:
    router = Router(selector_scan=100)
    producer = connected(router)
    for _ in range(500):
        send(producer, "/queue/deep", b"skip", k="skip")
    send(producer, "/queue/deep", b"deep", k="take")
    consumer = connected(router)
    subscribe(consumer, "/queue/deep", "s", "k = 'take'")
    assert consumer.output() == []  # beyond the scan: waits (ActiveMQ's page is 200)
    taker = connected(router)
    subscribe(taker, "/queue/deep", "t", "k = 'skip'")
    assert len(taker.output()) == 500
    assert bodies(consumer.output()) == [b"deep"]


@pytest.mark.parametrize("version", ["1.0", "1.2"])
async def test_a_bad_selector_is_an_error_naming_the_position(version: str) -> None:
    async with open_broker() as broker:
        await _bad_selector(broker, version)


async def _bad_selector(broker: Broker, version: str) -> None:
    with trio.fail_after(5):
        async with open_raw_client(broker, version) as bad, open_raw_client(broker) as good:
            await good.subscribe("/queue/ok", "g", selector="k = 'x'")
            await bad.send(
                "SUBSCRIBE",
                {"destination": "/queue/ok", "id": "1", "selector": "k = 'x' AND", "receipt": "r"},
            )
            error = await bad.expect("ERROR")
            expected = "invalid selector: at position 12: expected a value"
            if version == "1.0":
                expected = expected.replace(":", " -")
            assert error.headers["message"].startswith(expected)
            assert error.headers["receipt-id"] == "r"
            assert error.body.decode().splitlines()[:2] == ["k = 'x' AND", " " * 11 + "^"]
            await bad.expect_closed()
            await good.publish("/queue/ok", b"still here", k="x")
            assert (await good.expect("MESSAGE")).body == b"still here"


async def test_an_overlong_selector_is_an_error_naming_the_limit() -> None:
    async with open_broker() as broker, open_raw_client(broker) as client:
        await client.send(
            "SUBSCRIBE", {"destination": "/queue/l", "id": "1", "selector": "a = 'x'" * 1000}
        )
        error = await client.expect("ERROR")
        assert "longer than 4096 characters" in error.headers["message"]
