"""Durable topic subscriptions in the broker's sans-IO core (``client-id`` +
``activemq.subscriptionName``, as ActiveMQ names them): what they keep while
their client is away, how they end, the client-id rule and the bounds a
hostile peer meets. Restarts with a data dir: test_durable_store.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_stomp.broker import DestinationDepth, Limits
from trio_stomp.broker._destinations import Router
from trio_stomp.broker._durable import DurableSubscriptions
from trio_stomp.broker._session import Session
from trio_stomp.frame import Frame, FrameParser, HeadersLike

TOPIC = "/topic/news"
NAME = "activemq.subscriptionName"


def broker(limits: Limits | None = None) -> Router[DurableSubscriptions]:
    return Router(durables=DurableSubscriptions(limits or Limits()))


class Peer:
    """A session plus what it wrote, decoded (as in test_temporary.py)."""

    def __init__(
        self, router: Router[DurableSubscriptions], client_id: str | None = "app", **kwargs: object
    ) -> None:
        self.session = Session(router, self, session_id="s", **kwargs)  # type: ignore[arg-type]
        self.parser = FrameParser("1.2")
        connect = {"accept-version": "1.2"}
        if client_id is not None:
            connect["client-id"] = client_id
        self.send("CONNECT", connect)
        self.connected = [f.command for f in self.output()] == ["CONNECTED"]

    def wake(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def send(self, command: str, headers: HeadersLike = (), body: bytes = b"") -> None:
        self.session.handle_frame(Frame(command, headers, body))

    def output(self) -> list[Frame]:
        data = self.session.take_output()
        self.session.output_sent(len(data))
        if not data:
            return []
        return [e for e in self.parser.feed(data) if isinstance(e, Frame)]

    def subscribe(self, sub_id: str = "0", name: str = "daily", **headers: str) -> None:
        self.send("SUBSCRIBE", {"destination": TOPIC, "id": sub_id, NAME: name, **headers})

    def leave(self) -> None:
        self.session.connection_lost()


def bodies(frames: list[Frame]) -> list[bytes]:
    return [f.body for f in frames if f.command == "MESSAGE"]


def errors(frames: list[Frame]) -> list[str]:
    return [f.headers["message"] for f in frames if f.command == "ERROR"]


def test_messages_sent_while_away_wait_for_the_next_subscribe() -> None:
    router = broker()
    first = Peer(router)
    first.subscribe()
    first.leave()
    producer = Peer(router, client_id=None)
    for body in (b"a", b"b"):
        producer.send("SEND", {"destination": TOPIC}, body)
    again = Peer(router)
    again.subscribe(sub_id="other-id")
    frames = again.output()
    assert bodies(frames) == [b"a", b"b"]
    assert {f.headers["subscription"] for f in frames} == {"other-id"}
    assert {f.headers["destination"] for f in frames} == {TOPIC}


def test_a_plain_unsubscribe_keeps_it_and_unacked_come_back_first_redelivered() -> None:
    router = broker()
    peer = Peer(router)
    peer.subscribe(ack="client-individual")
    producer = Peer(router, client_id=None)
    for body in (b"1", b"2", b"3"):
        producer.send("SEND", {"destination": TOPIC}, body)
    first, second, _ = peer.output()
    peer.send("ACK", {"id": second.headers["ack"]})
    peer.send("UNSUBSCRIBE", {"id": "0"})
    producer.send("SEND", {"destination": TOPIC}, b"4")
    peer.subscribe(sub_id="1")
    frames = peer.output()
    assert bodies(frames) == [b"1", b"3", b"4"]
    assert [f.headers.get("redelivered") for f in frames] == ["true", "true", None]
    assert frames[0].headers["message-id"] == first.headers["message-id"]


def test_plain_topic_subscribers_still_get_every_message() -> None:
    router = broker()
    durable = Peer(router)
    durable.subscribe()
    plain = Peer(router, client_id=None)
    plain.send("SUBSCRIBE", {"destination": TOPIC, "id": "p"})
    Peer(router, client_id=None).send("SEND", {"destination": TOPIC}, b"x")
    assert bodies(plain.output()) == [b"x"]
    assert bodies(durable.output()) == [b"x"]


def test_unsubscribe_naming_it_removes_it_as_activemq_does() -> None:
    router = broker()
    peer = Peer(router)
    peer.subscribe()
    peer.send("UNSUBSCRIBE", {"id": "0"})
    # What the conformance test sends to ActiveMQ: an id that is no subscription.
    peer.send("UNSUBSCRIBE", {"id": "remove", NAME: "daily", "receipt": "r"})
    assert [f.command for f in peer.output()] == ["RECEIPT"]
    Peer(router, client_id=None).send("SEND", {"destination": TOPIC}, b"gone")
    peer.subscribe(sub_id="1")
    assert bodies(peer.output()) == []  # a new subscription, which kept nothing from before


def test_unsubscribe_naming_it_with_its_own_id_ends_the_consumer_then_removes_it() -> None:
    router = broker()
    peer = Peer(router)
    peer.subscribe()
    peer.send("UNSUBSCRIBE", {"id": "0", NAME: "daily", "receipt": "r"})
    assert [f.command for f in peer.output()] == ["RECEIPT"]
    assert router.durables is not None
    assert len(router.durables) == 0
    assert peer.session.subscriptions == {}


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("none", "unknown durable subscription"),
        ("consumed", "durable subscription in use"),
    ],
)
def test_removing_one_that_is_missing_or_consumed_under_another_id_is_an_error(
    setup: str, message: str
) -> None:
    router = broker()
    peer = Peer(router)
    if setup == "consumed":
        peer.subscribe()
    peer.send("UNSUBSCRIBE", {"id": "x", NAME: "daily"})
    assert errors(peer.output()) == [message]
    assert peer.session.closing


def test_a_second_connection_with_the_same_client_id_is_refused() -> None:
    router = broker()
    first = Peer(router)
    second = Peer(router)
    assert first.connected
    assert not second.connected
    second.leave()
    assert second.session.closing
    third = Peer(router, client_id="other")
    assert third.connected
    first.leave()  # frees it
    assert Peer(router).connected


def test_the_refused_connection_gets_an_error_naming_the_client_id() -> None:
    router = broker()
    Peer(router, client_id="app")
    session = Session(router, Peer.__new__(Peer), session_id="t")
    session.handle_frame(Frame("CONNECT", {"accept-version": "1.2", "client-id": "app"}))
    out = session.take_output()
    assert b"ERROR" in out
    assert b"client-id in use" in out
    assert b"'app'" in out


def test_a_durable_subscribe_without_client_id_is_an_error() -> None:
    router = broker()
    peer = Peer(router, client_id=None)
    peer.subscribe()
    assert errors(peer.output()) == ["durable subscription without client-id"]


def test_an_empty_name_is_an_error() -> None:
    peer = Peer(broker())
    peer.subscribe(name="")
    assert errors(peer.output()) == [f"invalid {NAME} header"]


def test_the_same_name_twice_on_one_connection_is_an_error() -> None:
    peer = Peer(broker())
    peer.subscribe()
    peer.subscribe(sub_id="1")
    assert errors(peer.output()) == ["durable subscription in use"]


def test_the_name_on_a_queue_is_ignored_as_activemq_does() -> None:
    router = broker()
    peer = Peer(router)
    peer.send("SUBSCRIBE", {"destination": "/queue/q", "id": "0", NAME: "daily"})
    assert peer.output() == []
    assert router.durables is not None
    assert len(router.durables) == 0


def test_naming_it_with_another_topic_replaces_it_and_what_it_held() -> None:
    router = broker()
    peer = Peer(router)
    peer.subscribe()
    peer.leave()
    Peer(router, client_id=None).send("SEND", {"destination": TOPIC}, b"old")
    again = Peer(router)
    again.send("SUBSCRIBE", {"destination": "/topic/other", "id": "0", NAME: "daily"})
    assert bodies(again.output()) == []
    Peer(router, client_id=None).send("SEND", {"destination": "/topic/other"}, b"new")
    assert bodies(again.output()) == [b"new"]


def test_too_many_durable_subscriptions_is_an_error() -> None:
    router = broker(Limits(max_durable_subscriptions=2))
    peer = Peer(router)
    peer.subscribe(sub_id="a", name="a")
    peer.subscribe(sub_id="b", name="b")
    peer.subscribe(sub_id="c", name="c")
    assert errors(peer.output()) == ["too many durable subscriptions"]


@pytest.mark.parametrize(
    "limits",
    [
        Limits(max_durable_messages=3),
        Limits(max_durable_bytes=3 * (64 + len(TOPIC) + 1)),
        Limits(max_durable_total_bytes=3 * (64 + len(TOPIC) + 1)),
    ],
    ids=["messages", "bytes", "total-bytes"],
)
def test_a_full_subscription_keeps_no_more_and_counts_what_it_dropped(
    limits: Limits, caplog: pytest.LogCaptureFixture
) -> None:
    router = broker(limits)
    peer = Peer(router)
    peer.subscribe(ack="client-individual")
    peer.leave()
    plain = Peer(router, client_id=None)
    plain.send("SUBSCRIBE", {"destination": TOPIC, "id": "p"})
    with caplog.at_level(logging.WARNING, logger="trio_stomp.broker"):
        for body in b"12345":
            plain.send("SEND", {"destination": TOPIC}, bytes([body]))
    assert bodies(plain.output()) == [b"1", b"2", b"3", b"4", b"5"]
    assert router.durables is not None
    (durable,) = router.durables
    assert (durable.count, durable.dropped) == (3, 2)
    assert [r.message for r in caplog.records if "is full" in r.message] != []
    assert len([r for r in caplog.records if "is full" in r.message]) == 1
    again = Peer(router)
    again.subscribe(ack="client-individual")
    frames = again.output()
    assert bodies(frames) == [b"1", b"2", b"3"]
    again.send("ACK", {"id": frames[0].headers["ack"]})
    Peer(router, client_id=None).send("SEND", {"destination": TOPIC}, b"6")
    assert bodies(again.output()) == [b"6"]
    assert durable.count == 3


def test_depths_list_each_durable_subscription_with_its_name() -> None:
    router = broker()
    peer = Peer(router)
    peer.subscribe(ack="client")
    peer.leave()
    producer = Peer(router, client_id=None)
    for body in (b"a", b"b"):
        producer.send("SEND", {"destination": TOPIC}, body)
    assert router.depths() == [
        DestinationDepth(TOPIC, 2, 0, 0, durable=False, subscription="app:daily")
    ]
    again = Peer(router)
    again.subscribe(ack="client")
    assert router.depths() == [
        DestinationDepth(TOPIC, 0, 2, 1, durable=False, subscription="app:daily")
    ]
    (message, _) = again.output()
    again.send("ACK", {"id": message.headers["ack"]})
    assert [d.held for d in router.depths()] == [1]


def test_each_depth_has_a_label_of_its_own() -> None:
    router = broker()
    for client_id in ("a", "b"):
        peer = Peer(router, client_id=client_id)
        peer.subscribe()
        peer.leave()
    plain = Peer(router, client_id=None)
    plain.send("SUBSCRIBE", {"destination": TOPIC, "id": "p"})
    plain.send("SEND", {"destination": TOPIC}, b"x")
    assert [(d.label, d.held) for d in router.depths()] == [
        (TOPIC, 0),
        (f"{TOPIC} durable:a:daily", 1),
        (f"{TOPIC} durable:b:daily", 1),
    ]


def test_one_message_larger_than_the_byte_bound_is_kept_when_it_holds_nothing() -> None:
    router = broker(Limits(max_durable_bytes=10))
    peer = Peer(router)
    peer.subscribe()
    peer.leave()
    producer = Peer(router, client_id=None)
    producer.send("SEND", {"destination": TOPIC}, b"x" * 100)
    producer.send("SEND", {"destination": TOPIC}, b"y")
    assert router.durables is not None
    (durable,) = router.durables
    assert (durable.count, durable.dropped) == (1, 1)
    again = Peer(router)
    again.subscribe()
    assert bodies(again.output()) == [b"x" * 100]


def test_the_total_bound_is_shared_by_every_durable_subscription() -> None:
    size = 64 + len(TOPIC) + 1
    router = broker(Limits(max_durable_total_bytes=3 * size))
    for client_id in ("a", "b"):
        peer = Peer(router, client_id=client_id)
        peer.subscribe()
        peer.leave()
    producer = Peer(router, client_id=None)
    for body in (b"1", b"2", b"3"):
        producer.send("SEND", {"destination": TOPIC}, body)
    assert router.durables is not None
    assert [(d.count, d.dropped) for d in router.durables] == [(2, 1), (1, 2)]
    assert router.durables.size == 3 * size
    reader = Peer(router, client_id="a")
    reader.subscribe()
    assert bodies(reader.output()) == [b"1", b"2"]
    assert router.durables.size == size


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), st.sampled_from(["auto", "client-individual"])),
        st.tuples(st.just("send"), st.binary(max_size=40)),
        st.tuples(st.just("ack"), st.booleans()),  # (True: NACK)
        st.tuples(st.just("leave"), st.none()),
        st.tuples(st.just("remove"), st.none()),
    ),
    max_size=40,
)


def _check_counts(durables: DurableSubscriptions) -> None:
    for durable in durables:
        pending = [p.message for sub in durable.queue.consumers for p in sub.unacked.values()]
        assert durable.count == len(durable.queue.messages) + len(pending)
        assert durable.size == sum(m.size for m in [*durable.queue.messages, *pending])
    assert durables.size == sum(d.size for d in durables)


class Client:
    """One client-id's life in the property below: what was kept and consumed."""

    def __init__(self, router: Router[DurableSubscriptions]) -> None:
        self.router = router
        assert router.durables is not None
        self.durables = router.durables
        self.producer = Peer(router, client_id=None)
        self.peer: Peer | None = None
        self.kept: list[bytes] = []  # kept for the subscription since it was (re)made
        self.consumed: list[bytes] = []
        self.pending: list[Frame] = []  # delivered to a client-individual consumer

    def read(self) -> None:
        for frame in self.peer.output() if self.peer is not None else ():
            if "ack" in frame.headers:
                self.pending.append(frame)
            else:
                self.consumed.append(frame.body)

    def subscribe(self, ack: str) -> None:
        if self.peer is None:
            self.peer = Peer(self.router)
            self.peer.subscribe(ack=ack)

    def send(self, body: bytes) -> None:
        dropped = sum(d.dropped for d in self.durables)
        self.producer.send("SEND", {"destination": TOPIC}, body)
        if len(self.durables) and sum(d.dropped for d in self.durables) == dropped:
            self.kept.append(body)

    def ack(self, nack: bool) -> None:
        if self.peer is not None and self.pending:
            frame = self.pending.pop(0)
            self.peer.send("NACK" if nack else "ACK", {"id": frame.headers["ack"]})
            if not nack:
                self.consumed.append(frame.body)

    def leave(self) -> None:
        if self.peer is not None:
            self.peer.leave()
            self.peer, self.pending = None, []

    def remove(self) -> None:
        self.leave()
        if len(self.durables):
            remover = Peer(self.router)
            remover.send("UNSUBSCRIBE", {"id": "x", NAME: "daily"})
            remover.leave()
            self.kept, self.consumed = [], []


OPERATIONS: dict[str, Callable[[Client, Any], None]] = {
    "subscribe": lambda client, arg: client.subscribe(arg),
    "send": lambda client, arg: client.send(arg),
    "ack": lambda client, arg: client.ack(arg),
    "leave": lambda client, _: client.leave(),
    "remove": lambda client, _: client.remove(),
}


@settings(max_examples=200, deadline=None)
@given(ops=OPS, max_messages=st.integers(1, 6))
def test_what_a_durable_subscription_keeps_is_consumed_once_and_counted_exactly(
    ops: list[tuple[str, Any]], max_messages: int
) -> None:
    """Whatever a client does (subscribe, leave, ACK, NACK, remove), ``count`` and
    ``size`` are what each subscription holds (waiting plus unacknowledged), the
    broker's total is their sum, and every message kept for it is consumed exactly
    once: by an ``auto`` delivery, by an ACK, or by the last reader here."""
    client = Client(broker(Limits(max_durable_messages=max_messages)))
    for op, arg in ops:
        OPERATIONS[op](client, arg)
        client.read()
        _check_counts(client.durables)
    client.leave()
    if len(client.durables):
        client.subscribe("auto")
        client.read()
    assert sorted(client.consumed) == sorted(client.kept)
    _check_counts(client.durables)


def test_a_durable_subscription_with_a_selector_is_refused_not_matched_to_all() -> None:
    router = broker()
    peer = Peer(router)
    peer.subscribe(selector="region = 'eu'")
    assert errors(peer.output()) == ["selector on a durable subscription"]
    assert router.durables is not None
    assert not router.durables.by_key  # nothing was made
