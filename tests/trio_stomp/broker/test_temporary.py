"""Temporary queues in the broker's sans-IO core: ``/temp-queue/`` and ``reply-to``.

RabbitMQ's way (a SEND with ``reply-to:/temp-queue/x`` subscribes its session)
and ActiveMQ's (the session SUBSCRIBEs to ``/temp-queue/x`` itself), the
queue's privacy and lifetime, and the bounds a hostile peer meets.
"""

from __future__ import annotations

from trio_stomp.broker import DestinationDepth, Limits
from trio_stomp.broker._destinations import Router, Watcher
from trio_stomp.broker._durable import DurableSubscriptions
from trio_stomp.broker._message import Message
from trio_stomp.broker._session import Session
from trio_stomp.frame import Frame, FrameParser, HeadersLike


class Peer:
    """A session plus what it wrote, decoded (as in test_broker_model.py)."""

    def __init__(self, router: Router[DurableSubscriptions], **kwargs: object) -> None:
        self.aborts = 0
        self.session = Session(router, self, session_id="s", **kwargs)  # type: ignore[arg-type]
        self.parser = FrameParser("1.2")
        self.send("CONNECT", {"accept-version": "1.2"})
        assert [f.command for f in self.output()] == ["CONNECTED"]

    def wake(self) -> None:
        pass

    def abort(self) -> None:
        self.aborts += 1

    def send(self, command: str, headers: HeadersLike = (), body: bytes = b"") -> None:
        self.session.handle_frame(Frame(command, headers, body))

    def output(self) -> list[Frame]:
        data = self.session.take_output()
        self.session.output_sent(len(data))
        if not data:
            return []
        return [e for e in self.parser.feed(data) if isinstance(e, Frame)]


def request(requester: Peer, responder: Peer, reply_to: str = "/temp-queue/r") -> str:
    """Send a request from ``requester`` to /queue/req; return the reply-to ``responder`` sees."""
    requester.send(
        "SEND", {"destination": "/queue/req", "reply-to": reply_to, "correlation-id": "c1"}, b"q"
    )
    [message] = responder.output()
    return message.headers["reply-to"]


def serving(router: Router[DurableSubscriptions]) -> Peer:
    responder = Peer(router)
    responder.send("SUBSCRIBE", {"destination": "/queue/req", "id": "s"})
    return responder


def test_reply_to_is_rewritten_and_subscribes_its_session_as_rabbitmq_does() -> None:
    router = Router()
    requester, responder = Peer(router), serving(router)
    reply_to = request(requester, responder)
    assert reply_to.startswith("/reply-queue/")
    assert "/temp-queue/r" in requester.session.subscriptions
    responder.send("SEND", {"destination": reply_to, "correlation-id": "c1"}, b"a")
    [reply] = requester.output()
    assert reply.headers["subscription"] == "/temp-queue/r"
    assert reply.headers["destination"] == reply_to
    assert reply.headers["correlation-id"] == "c1"
    assert reply.body == b"a"
    assert "ack" not in reply.headers  # an auto subscription


def test_an_explicit_subscription_takes_the_replies_as_activemq_does() -> None:
    router = Router()
    requester, responder = Peer(router), serving(router)
    requester.send(
        "SUBSCRIBE", {"destination": "/temp-queue/r", "id": "mine", "ack": "client-individual"}
    )
    reply_to = request(requester, responder)
    assert list(requester.session.subscriptions) == ["mine"]  # nothing implicit
    responder.send("SEND", {"destination": reply_to}, b"a")
    [reply] = requester.output()
    assert reply.headers["subscription"] == "mine"
    requester.send("ACK", {"id": reply.headers["ack"]})
    assert requester.output() == []


def test_a_temp_name_is_one_queue_per_session_and_private_to_it() -> None:
    router = Router()
    alice, bob, responder = Peer(router), Peer(router), serving(router)
    first = request(alice, responder)
    assert request(alice, responder) == first
    assert request(alice, responder, "/temp-queue/other") != first
    bobs = request(bob, responder)
    assert bobs != first
    responder.send("SEND", {"destination": bobs}, b"for bob")
    assert alice.output() == []
    assert [f.body for f in bob.output()] == [b"for bob"]


def test_a_send_to_a_temp_name_reaches_the_senders_own_queue() -> None:
    router = Router()
    requester = Peer(router)
    requester.send("SUBSCRIBE", {"destination": "/temp-queue/r", "id": "mine"})
    requester.send("SEND", {"destination": "/temp-queue/r"}, b"to myself")
    [message] = requester.output()
    assert message.body == b"to myself"
    assert message.headers["destination"].startswith("/reply-queue/")


def test_a_reply_queue_goes_with_its_session_and_a_late_reply_is_dropped() -> None:
    router = Router()
    requester, responder = Peer(router), serving(router)
    reply_to = request(requester, responder)
    assert DestinationDepth(reply_to, 0, 0, 1) in router.depths()
    requester.session.connection_lost()
    assert router.temporary == {}
    responder.send("SEND", {"destination": reply_to}, b"too late")
    assert router.temporary == {}
    assert router.queues.keys() == {"/queue/req"}  # no queue made for nobody
    assert responder.output() == []


def test_replies_wait_in_their_queue_between_explicit_subscriptions() -> None:
    router = Router()
    requester, responder = Peer(router), serving(router)
    requester.send("SUBSCRIBE", {"destination": "/temp-queue/r", "id": "1"})
    reply_to = request(requester, responder)
    requester.send("UNSUBSCRIBE", {"id": "1"})
    responder.send("SEND", {"destination": reply_to}, b"kept")
    assert router.depth(reply_to) == 1
    requester.send("SUBSCRIBE", {"destination": "/temp-queue/r", "id": "2"})
    assert [f.body for f in requester.output()] == [b"kept"]


def test_nobody_subscribes_to_a_reply_queue_by_its_name() -> None:
    router = Router()
    requester, responder, thief = Peer(router), serving(router), Peer(router)
    reply_to = request(requester, responder)
    thief.send("SUBSCRIBE", {"destination": reply_to, "id": "1", "receipt": "r"})
    [error] = thief.output()
    assert error.command == "ERROR"
    assert error.headers["message"] == "invalid destination"
    assert error.headers["receipt-id"] == "r"


def test_temp_queues_per_session_are_bounded() -> None:
    router = Router()
    requester, responder = Peer(router, limits=Limits(max_subscriptions=3)), serving(router)
    for index in range(3):
        request(requester, responder, f"/temp-queue/{index}")
    requester.send("SEND", {"destination": "/queue/req", "reply-to": "/temp-queue/3"})
    [error] = requester.output()
    assert error.command == "ERROR"
    assert error.headers["message"] == "too many temporary queues"
    assert responder.output() == []  # the request was not sent on


def test_an_implicit_subscription_needs_its_id_free() -> None:
    router = Router()
    requester = Peer(router)
    requester.send("SUBSCRIBE", {"destination": "/queue/other", "id": "/temp-queue/r"})
    requester.send("SEND", {"destination": "/queue/req", "reply-to": "/temp-queue/r"})
    [error] = requester.output()
    assert error.headers["message"] == "duplicate subscription id"


def test_a_flood_of_replies_to_a_client_that_does_not_read_disconnects_it() -> None:
    router = Router()
    limits = Limits(max_outbound_bytes=10_000, outbound_high_water=1000)
    requester, responder = Peer(router, limits=limits), serving(router)
    reply_to = request(requester, responder)
    for _ in range(200):
        responder.send("SEND", {"destination": reply_to}, b"x" * 100)
    assert requester.aborts == 1
    requester.session.connection_lost()
    assert router.temporary == {}
    assert responder.aborts == 0


def test_a_transacted_request_is_rewritten_at_commit() -> None:
    router = Router()
    requester, responder = Peer(router), serving(router)
    requester.send("BEGIN", {"transaction": "t"})
    requester.send(
        "SEND", {"destination": "/queue/req", "reply-to": "/temp-queue/r", "transaction": "t"}
    )
    assert requester.session.subscriptions == {}
    requester.send("COMMIT", {"transaction": "t"})
    [message] = responder.output()
    assert message.headers["reply-to"].startswith("/reply-queue/")
    assert "/temp-queue/r" in requester.session.subscriptions


class _Store:
    """A durable store that records what it was given."""

    def __init__(self) -> None:
        self.added: list[Message] = []

    @property
    def restored(self) -> list[Message]:
        return []

    def next_key(self) -> int:
        return len(self.added) + 1

    def add(self, message: Message) -> int:
        self.added.append(message)
        return 0

    def remove(self, key: int) -> None:
        pass

    @property
    def durable(self) -> int:
        return 0

    def watch(self, watcher: Watcher) -> None:
        pass

    def unwatch(self, watcher: Watcher) -> None:
        pass


def test_replies_are_never_stored() -> None:
    store = _Store()
    router = Router(store=store)
    requester, responder = Peer(router), serving(router)
    reply_to = request(requester, responder)
    responder.send("SEND", {"destination": reply_to}, b"a")
    assert [m.destination for m in store.added] == ["/queue/req"]
    assert [d.durable for d in router.depths() if d.destination == reply_to] == [False]


def test_unacked_replies_go_with_their_session_not_back_to_its_queue() -> None:
    router = Router()
    requester, responder = Peer(router), serving(router)
    requester.send("SUBSCRIBE", {"destination": "/temp-queue/r", "id": "1", "ack": "client"})
    reply_to = request(requester, responder)
    for _ in range(3):
        responder.send("SEND", {"destination": reply_to}, b"x" * 100)
    assert len(requester.output()) == 3
    requester.send("UNSUBSCRIBE", {"id": "1"})  # unacked: back to the queue, which stays
    assert router.depth(reply_to) == 3
    requester.send("SUBSCRIBE", {"destination": "/temp-queue/r", "id": "2", "ack": "client"})
    assert [f.headers["redelivered"] for f in requester.output()] == ["true"] * 3
    requester.session.connection_lost()
    assert requester.aborts == 0
    assert router.temporary == {}
