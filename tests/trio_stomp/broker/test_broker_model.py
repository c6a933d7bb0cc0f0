"""The broker's sans-IO core: sessions and the router, driven by frames alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_stomp.broker import DestinationDepth, Limits, UsersFileError, parse_users
from trio_stomp.broker._destinations import Router
from trio_stomp.broker._durable import DurableSubscriptions
from trio_stomp.broker._negotiation import (
    check_credentials,
    choose_version,
    negotiate_heartbeats,
)
from trio_stomp.broker._session import Session
from trio_stomp.frame import Frame, FrameParser, HeadersLike, RemoteProtocolError, encode
from trio_stomp.frame._heartbeat import parse_heartbeat


class Peer:
    """A session plus what it wrote, decoded: the edge, minus the I/O."""

    def __init__(
        self, router: Router[DurableSubscriptions], version: str = "1.2", **kwargs: object
    ) -> None:
        self.version = version
        self.wakes = 0
        self.aborts = 0
        self.session = Session(router, self, session_id="s", **kwargs)  # type: ignore[arg-type]
        self.parser = FrameParser(version)

    def wake(self) -> None:
        self.wakes += 1

    def abort(self) -> None:
        self.aborts += 1

    def send(self, command: str, headers: HeadersLike = (), body: bytes = b"") -> None:
        self.session.handle_frame(Frame(command, headers, body))

    def output(self) -> list[Frame]:
        data = self.session.take_output()
        self.session.output_sent(len(data))
        if not data:  # feed(b"") would end the stream
            return []
        return [e for e in self.parser.feed(data) if isinstance(e, Frame)]

    def connect(self) -> None:
        self.send("CONNECT", {"accept-version": self.version})
        assert [f.command for f in self.output()] == ["CONNECTED"]


def connected(router: Router[DurableSubscriptions], version: str = "1.2", **kwargs: object) -> Peer:
    peer = Peer(router, version, **kwargs)
    peer.connect()
    return peer


def test_public_surface() -> None:
    import trio_stomp.broker

    assert sorted(trio_stomp.broker.__all__) == [
        "Broker",
        "DestinationDepth",
        "DurableSubscriptionInfo",
        "Limits",
        "StoreDamaged",
        "StoreError",
        "StoreInUse",
        "UsersFileError",
        "list_durable_subscriptions",
        "load_users",
        "open_broker",
        "parse_users",
        "remove_durable_subscription",
        "serve_broker",
    ]
    assert all(hasattr(trio_stomp.broker, name) for name in trio_stomp.broker.__all__)


# -- negotiation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, "1.0"),
        ("1.0", "1.0"),
        ("1.1", "1.1"),
        ("1.0,1.1", "1.1"),
        ("1.2, 1.0", "1.2"),
        ("2.0,1.1", "1.1"),
        ("2.0", None),
        ("", None),
    ],
)
def test_choose_version(accept: str | None, chosen: str | None) -> None:
    assert choose_version(accept) == chosen


def test_heartbeat_follows_the_spec() -> None:
    # Client: can send every 1000 ms (cx), wants ours every 500 ms (cy).
    agreed = negotiate_heartbeats((1000, 500), minimum_ms=100)
    assert agreed.header == (500, 1000)
    assert agreed.send_ms == 500  # max(sx, cy)
    assert agreed.receive_ms == 1000  # max(cx, sy)
    assert negotiate_heartbeats((0, 0), 100).header == (0, 0)
    floor = negotiate_heartbeats((1, 2), minimum_ms=100)
    assert (floor.send_ms, floor.receive_ms) == (100, 100)
    one_way = negotiate_heartbeats((0, 250), minimum_ms=100)
    assert (one_way.send_ms, one_way.receive_ms) == (250, 0)


@pytest.mark.parametrize("bad", ["1", "a,b", "1,2,3", "-1,5", ""])
def test_bad_heartbeat_header(bad: str) -> None:
    with pytest.raises(RemoteProtocolError):
        parse_heartbeat(bad)


def test_credentials() -> None:
    users = {"u": "p"}
    assert check_credentials(None, None, None)
    assert check_credentials(users, "u", "p")
    assert not check_credentials(users, "u", "x")
    assert not check_credentials(users, "v", "p")
    assert not check_credentials(users, None, None)


def test_users_file_format() -> None:
    text = "# comment\n\nguest:guest\r\napp:pass:with:colons\nempty:\n"
    assert parse_users(text) == {"guest": "guest", "app": "pass:with:colons", "empty": ""}
    for bad in ["nocolon\n", ":nologin\n", "a:1\na:2\n"]:
        with pytest.raises(UsersFileError, match=r":1:|:2:"):
            parse_users(bad)


# -- routing -------------------------------------------------------------------------


def test_queue_round_robin_skips_full_windows() -> None:
    router = Router()
    a, b = connected(router), connected(router)
    a.send(
        "SUBSCRIBE", {"destination": "/queue/q", "id": "1", "ack": "client", "prefetch-count": "1"}
    )
    b.send("SUBSCRIBE", {"destination": "/queue/q", "id": "1", "ack": "client"})
    producer = connected(router)
    for n in range(4):
        producer.send("SEND", {"destination": "/queue/q"}, str(n).encode())
    assert [f.body for f in a.output()] == [b"0"]
    assert [f.body for f in b.output()] == [b"1", b"2", b"3"]


def test_client_ack_is_cumulative_per_subscription() -> None:
    router = Router()
    peer = connected(router)
    peer.send("SUBSCRIBE", {"destination": "/queue/x", "id": "x", "ack": "client"})
    peer.send("SUBSCRIBE", {"destination": "/queue/y", "id": "y", "ack": "client"})
    for destination in ("/queue/x", "/queue/y", "/queue/x"):
        peer.send("SEND", {"destination": destination})
    x1, y1, x2 = peer.output()
    peer.send("ACK", {"id": x2.headers["ack"]})
    assert list(peer.session.subscriptions["x"].unacked) == []
    assert len(peer.session.subscriptions["y"].unacked) == 1
    assert y1.headers["subscription"] == "y"
    assert x1.headers["subscription"] == "x"


def test_connection_lost_requeues_and_drops_transactions() -> None:
    router = Router()
    consumer = connected(router)
    consumer.send("SUBSCRIBE", {"destination": "/queue/q", "id": "1", "ack": "client"})
    consumer.send("BEGIN", {"transaction": "t"})
    consumer.send("SEND", {"destination": "/queue/other", "transaction": "t"})
    consumer.send("SEND", {"destination": "/queue/q"}, b"m")
    assert [f.command for f in consumer.output()] == ["MESSAGE"]
    consumer.session.connection_lost()
    assert router.depth("/queue/q") == 1
    assert router.queues["/queue/q"].messages[0].redelivered
    assert "/queue/other" not in router.queues


def test_depths_count_queued_and_unacknowledged_of_queues_and_topic_subscriptions() -> None:
    router = Router()
    producer = connected(router)
    consumer = connected(router)
    consumer.send(
        "SUBSCRIBE",
        {"destination": "/queue/b", "id": "q", "ack": "client-individual", "prefetch-count": "2"},
    )
    consumer.send("SUBSCRIBE", {"destination": "/topic/t", "id": "t1", "ack": "client"})
    consumer.send("SUBSCRIBE", {"destination": "/topic/t", "id": "t2"})  # auto: none held
    for _ in range(5):
        producer.send("SEND", {"destination": "/queue/b"})
    producer.send("SEND", {"destination": "/queue/a"})
    producer.send("SEND", {"destination": "/topic/t"})
    producer.send("SEND", {"destination": "/topic/nobody"})  # dropped: nobody subscribes
    consumer.output()
    assert router.depths() == [
        DestinationDepth("/queue/a", queued=1, unacknowledged=0, consumers=0),
        DestinationDepth("/queue/b", queued=3, unacknowledged=2, consumers=1),
        DestinationDepth("/topic/t", queued=0, unacknowledged=1, consumers=2),
    ]
    assert [depth.held for depth in router.depths()] == [1, 5, 1]
    # Its consumer gone, what it held waits in the queue again: the same count.
    consumer.session.connection_lost()
    assert router.depths() == [
        DestinationDepth("/queue/a", queued=1, unacknowledged=0, consumers=0),
        DestinationDepth("/queue/b", queued=5, unacknowledged=0, consumers=0),
    ]


def test_idle_queue_is_forgotten() -> None:
    router = Router()
    peer = connected(router)
    peer.send("SUBSCRIBE", {"destination": "/queue/tmp", "id": "1"})
    peer.send("UNSUBSCRIBE", {"id": "1"})
    assert router.queues == {}
    assert router.topics == {}


def test_slow_topic_subscriber_is_aborted_at_the_bound() -> None:
    router = Router()
    limits = Limits(max_outbound_bytes=10_000, outbound_high_water=1000)
    slow = connected(router, limits=limits)
    slow.send("SUBSCRIBE", {"destination": "/topic/t", "id": "1"})
    producer = connected(router)
    for _ in range(200):
        producer.send("SEND", {"destination": "/topic/t"}, b"x" * 100)
    assert slow.aborts == 1
    assert slow.session.aborted
    # Aborted means detached from the topic once the edge reports the loss.
    slow.session.connection_lost()
    assert router.topics == {}


def test_slow_queue_consumer_pauses_instead() -> None:
    router = Router()
    limits = Limits(max_outbound_bytes=10_000, outbound_high_water=1000)
    slow = connected(router, limits=limits)
    slow.send("SUBSCRIBE", {"destination": "/queue/q", "id": "1"})
    producer = connected(router)
    for _ in range(200):
        producer.send("SEND", {"destination": "/queue/q"}, b"x" * 100)
    assert slow.aborts == 0
    waiting = router.depth("/queue/q")
    assert 0 < waiting < 200
    assert len(slow.output()) == 200 - waiting  # took its output: deliveries resume
    assert router.depth("/queue/q") < waiting


def test_frames_after_error_are_ignored() -> None:
    router = Router()
    peer = connected(router)
    peer.send("SUBSCRIBE", {"destination": "/queue/q"})  # no id: ERROR
    peer.send("SEND", {"destination": "/queue/q"})
    assert [f.command for f in peer.output()] == ["ERROR"]
    assert peer.session.closing
    assert router.depth("/queue/q") == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(["1.0", "1.1", "1.2"]), st.booleans())
def test_random_bytes_never_raise(data: bytes, version: str, connect_first: bool) -> None:
    router = Router()
    peer = Peer(router, version)
    if connect_first:
        peer.connect()
    peer.session.receive_data(data)
    peer.session.receive_data(encode(Frame("SEND", {"destination": "/queue/z"}, b"after")))
    peer.session.connection_lost()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT"]
            ),
            st.dictionaries(
                st.sampled_from(
                    ["destination", "id", "ack", "transaction", "message-id", "subscription"]
                ),
                st.sampled_from(["/queue/a", "/topic/b", "1", "client", "client-individual", "t"]),
            ),
        ),
        max_size=12,
    )
)
def test_random_frame_sequences_never_raise(frames: list[tuple[str, dict[str, str]]]) -> None:
    router = Router()
    peers = [connected(router), connected(router)]
    for index, (command, headers) in enumerate(frames):
        peers[index % 2].send(command, headers, b"x")
        peers[index % 2].output()
    for peer in peers:
        peer.session.connection_lost()
    assert router.topics == {}
    assert all(not queue.consumers for queue in router.queues.values())


def test_a_frame_larger_than_the_outbound_bound_reaches_a_reader_that_keeps_up() -> None:
    router = Router()
    limits = Limits(max_outbound_bytes=10_000, outbound_high_water=1000)
    reader = connected(router, limits=limits)
    reader.send("SUBSCRIBE", {"destination": "/queue/q", "id": "1"})
    producer = connected(router)
    for body in (b"a" * 100, b"b" * 50_000, b"c" * 100):
        producer.send("SEND", {"destination": "/queue/q"}, body)
    # Something already waits for the reader when the large one is due: it is
    # not cut for that, and everything the broker accepted reaches it.
    got = [len(f.body) for f in reader.output()]
    got += [len(f.body) for f in reader.output()]
    assert reader.aborts == 0
    assert got == [100, 50_000, 100]
