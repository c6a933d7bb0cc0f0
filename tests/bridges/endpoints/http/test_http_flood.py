"""The http source under slowloris: slow heads and slow bodies never starve signed webhooks.

Real server (:mod:`bridges.endpoints.http.server`) and real sockets on loopback;
attackers bind their own loopback addresses (127.0.1.1 ...: all of 127.0.0.0/8 reaches this machine)
so that the per-address bound and the eviction of slow bodies are each what
keeps a place for the signed sender on 127.0.0.1.
"""

from __future__ import annotations

import base64
import datetime
import logging
import re
import time

import httpx
import pytest
import standardwebhooks
import trio
from http_helpers import running_source
from hypothesis import given
from hypothesis import strategies as st

from bridges.endpoints.http import listener as listener_module
from bridges.endpoints.http.admission import (
    LOG_INTERVAL,
    REASONS,
    Place,
    Places,
    Refusals,
    body_limit,
    peer_key,
)
from bridges.testing import FakeSink

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
HEAD = b"POST /hooks HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"


def signed(body: bytes, msg_id: str) -> dict[str, str]:
    """Headers as the standardwebhooks package signs them (the independent peer)."""
    when = datetime.datetime.fromtimestamp(time.time(), tz=datetime.UTC)
    signature = standardwebhooks.Webhook(SECRET).sign(msg_id, when, body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


async def answer_of(stream: trio.SocketStream) -> bytes:
    """What the server sent until it closed (b"" when it only closed or reset)."""
    answer = b""
    try:
        while chunk := await stream.receive_some(4096):
            answer += chunk
    except trio.BrokenResourceError:
        pass
    return answer


def forged_head(length: int) -> bytes:
    """A head whose signature headers look right: only the body can show they are forged."""
    forged = (
        f"webhook-id: evil\r\nwebhook-timestamp: {int(time.time())}\r\n"
        f"webhook-signature: v1,{base64.b64encode(bytes(32)).decode()}\r\n"
    )
    return HEAD + forged.encode() + b"content-length: %d\r\n\r\n" % length


async def drip(stream: trio.SocketStream, every: float) -> None:
    """A byte every ``every`` s until the stream breaks."""
    try:
        while True:
            await trio.sleep(every)
            await stream.send_all(b" ")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def slow_body(
    url: str, local: str, opened: list[int], answers: list[bytes], *, every: float = 0.5
) -> None:
    """Forged requests whose 1000-byte body comes a byte at a time; again when cut off."""
    host, port = address(url)
    while True:
        stream = await trio.open_tcp_stream(host, port, local_address=local)
        async with stream, trio.open_nursery() as nursery:
            await stream.send_all(forged_head(1000) + b"{")
            opened.append(1)

            nursery.start_soon(drip, stream, every)
            answers.append((await answer_of(stream))[:12])
            nursery.cancel_scope.cancel()
        await trio.sleep(0.1)


@pytest.mark.deadline(30)
async def test_signed_webhooks_get_2xx_while_340_slow_bodies_trickle_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issue's attack, with the default settings: every signed webhook is stored.

    300 slow bodies from 300 addresses (more than ``max_pending``: only
    eviction keeps a place free) and 40 from one address (``max_per_peer``
    holds them to 32, each newcomer pushing out that address's oldest); they
    reconnect whenever they are cut off.
    """
    caplog.set_level(logging.WARNING, logger="bridges.http")
    sink = FakeSink()
    spread = [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(300)]
    locals_ = spread + ["127.0.0.2"] * 40
    opened: list[int] = []
    answers: list[bytes] = []
    statuses: list[int] = []
    latencies: list[float] = []
    began = trio.current_time()
    async with running_source(sink, signature="standard-webhooks", secret=SECRET) as (
        url,
        _,
        source,
    ):
        async with trio.open_nursery() as attack:
            for local in locals_:
                attack.start_soon(slow_body, url, local, opened, answers)
            while len(opened) < len(locals_):  # noqa: ASYNC110  # (counted by the tasks)
                await trio.sleep(0.05)
            await trio.sleep(0.5)  # every head is in: the places are taken
            async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
                for i in range(20):
                    body = b'{"order": %d}' % i
                    started = trio.current_time()
                    response = await client.post(
                        f"{url}/hooks", content=body, headers=signed(body, f"msg_{i}")
                    )
                    latencies.append(trio.current_time() - started)
                    statuses.append(response.status_code)
                    await trio.sleep(0.1)
            attack.cancel_scope.cancel()
    assert statuses == [204] * 20, statuses
    assert max(latencies) < 5.0, latencies  # (under 1 s here; CI's cores are shared)
    # (each id under its route's name, h: docs/explanation/exactly-once.md)
    assert sorted(m.id for b in sink.batches for m in b) == sorted(f"h/msg_{i}" for i in range(20))
    refused = dict(source.refused)
    # Each rule did its part, and each refusal was answered as it says.
    assert refused["evicted"] >= 300 + 32 - 256
    assert refused["unauthorized"] == 0
    assert any(answer.startswith(b"HTTP/1.1 503") for answer in answers)
    # Logged at a bounded rate: the first at once, then one per LOG_INTERVAL (a loaded
    # machine may take longer than one), the rest when the route stopped; together the
    # lines count every refusal.
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    intervals = int((trio.current_time() - began) // LOG_INTERVAL)
    assert 1 <= len(lines) <= 2 + intervals, lines
    logged = sum(int(n) for n in re.findall(r"refused (\d+) request", " ".join(lines)))
    assert logged == sum(refused.values())
    assert "x 503 evicted (last: 127.0." in " ".join(lines)


@pytest.mark.deadline(30)
async def test_a_signed_sender_sharing_the_attackers_address_gets_2xx() -> None:
    """Behind a reverse proxy every request comes from one address: 300 slow bodies
    from 127.0.0.1 fill its ``max_per_peer`` places, and the signed webhooks from
    127.0.0.1 push out the attacker's oldest instead of getting 503."""
    sink = FakeSink()
    opened: list[int] = []
    answers: list[bytes] = []
    statuses: list[int] = []
    async with running_source(sink, signature="standard-webhooks", secret=SECRET) as (
        url,
        _,
        source,
    ):
        async with trio.open_nursery() as attack:
            for _ in range(300):
                attack.start_soon(slow_body, url, "127.0.0.1", opened, answers)
            while len(opened) < 300:  # noqa: ASYNC110  # (counted by the tasks)
                await trio.sleep(0.05)
            await trio.sleep(0.5)
            async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
                for i in range(20):
                    body = b'{"order": %d}' % i
                    response = await client.post(
                        f"{url}/hooks", content=body, headers=signed(body, f"msg_{i}")
                    )
                    statuses.append(response.status_code)
                    await trio.sleep(0.05)
            attack.cancel_scope.cancel()
    assert statuses == [204] * 20, statuses
    # (each id under its route's name, h: docs/explanation/exactly-once.md)
    assert sorted(m.id for b in sink.batches for m in b) == sorted(f"h/msg_{i}" for i in range(20))
    assert source.refused["evicted"] > 0
    assert source.refused["unauthorized"] == 0


async def test_a_body_under_min_body_rate_gets_408_after_body_grace() -> None:
    sink = FakeSink()
    async with running_source(sink, min_body_rate=100.0, body_grace=0.2) as (url, route, source):
        host, port = address(url)
        # 600 bytes in three parts 0.25 s apart (800 B/s): on time, stored.
        async with await trio.open_tcp_stream(host, port) as stream:
            await stream.send_all(HEAD + b"content-length: 600\r\n\r\n")
            for _ in range(3):
                await stream.send_all(b" " * 200)
                await trio.sleep(0.25)
            assert (await stream.receive_some(4096)).startswith(b"HTTP/1.1 204")
        # 10 B/s: cut off once past 0.2 s + received / 100 B/s.
        async with await trio.open_tcp_stream(host, port) as stream:
            await stream.send_all(HEAD + b"content-length: 600\r\n\r\n")
            started = trio.current_time()
            with trio.move_on_after(5):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(drip, stream, 0.1)
                    answer = await answer_of(stream)
                    nursery.cancel_scope.cancel()
            took = trio.current_time() - started
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"connection: close" in answer.lower()
        assert 0.2 <= took < 1.5
        assert route.stats.received == 1
        assert source.refused["min_body_rate"] == 1
    assert [len(m.body) for b in sink.batches for m in b] == [600]


async def test_a_head_sent_a_byte_at_a_time_is_cut_off_and_holds_no_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listener_module, "HEAD_TIMEOUT", 1.0)
    sink = FakeSink()
    async with running_source(sink, max_pending=1) as (url, route, _):
        host, port = address(url)
        async with await trio.open_tcp_stream(host, port) as stream:
            started = trio.current_time()
            closed = False
            with trio.move_on_after(4):
                try:
                    for byte in HEAD + b"x-pad: " + b"a" * 1000:
                        await stream.send_all(bytes([byte]))
                        await trio.sleep(0.02)
                except trio.BrokenResourceError:
                    closed = True
            took = trio.current_time() - started
            # While the head trickled, the one place stayed free.
            async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
                assert (await client.post(f"{url}/hooks", content=b"ok")).status_code == 204
        assert closed
        assert 0.9 <= took < 2.5
        assert route.stats.received == 1


def test_peers_are_addresses_and_ipv6_hosts_are_their_64() -> None:
    assert peer_key(("203.0.113.7", 4000)) == "203.0.113.7"
    assert peer_key(("::ffff:203.0.113.7", 4000)) == "203.0.113.7"
    assert peer_key(("2001:db8:1:2:aaaa::1", 1)) == peer_key(("2001:db8:1:2:bbbb::9", 2))
    assert peer_key(("2001:db8:1:2::1", 1)) == "2001:db8:1:2::/64"
    assert peer_key(("2001:db8:1:3::1", 1)) != peer_key(("2001:db8:1:2::1", 1))
    assert peer_key(None) == "?"
    assert peer_key(["/run/bridge.sock"]) == "/run/bridge.sock"


def test_the_body_limit_is_the_rate_after_the_grace_then_body_timeout() -> None:
    assert body_limit(0, 1024.0, 2.0, 30.0) == (2.0, "min_body_rate")
    assert body_limit(10240, 1024.0, 2.0, 30.0) == (12.0, "min_body_rate")
    assert body_limit(1024 * 1024, 1024.0, 2.0, 30.0) == (30.0, "body_timeout")
    assert body_limit(0, 0.0, 2.0, 30.0) == (30.0, "body_timeout")


async def test_places_evict_the_oldest_body_still_arriving_and_never_one_that_arrived() -> None:
    def take(peer: str) -> Place:
        place = places.take(peer)
        assert isinstance(place, Place), place
        return place

    places = Places(total=3, per_peer=2)
    b1, a1, a2 = take("b"), take("a"), take("a")
    places.arrived(a1)  # a1 waits for the route: it keeps its place
    c1 = take("c")  # full: b1, the oldest still arriving, goes
    assert b1.evicted
    assert b1.scope.cancel_called
    assert not a1.evicted
    assert not a2.evicted
    places.release(b1)  # (its handler gives it back too: counted once)
    assert places.held == 3
    places.arrived(c1)
    places.arrived(a2)
    assert places.take("a") == "max_per_peer"  # a's two have arrived: nothing of a's to push
    assert places.take("d") == "max_pending"  # all arrived: nothing to evict
    for place in (a1, a2, c1):
        places.release(place)
    assert places.held == 0


async def test_a_full_address_pushes_out_its_own_oldest_body_still_arriving() -> None:
    """Behind a proxy every sender shares one address: its slow bodies cannot starve it."""

    def take(peer: str) -> Place:
        place = places.take(peer)
        assert isinstance(place, Place), place
        return place

    places = Places(total=10, per_peer=3)
    b1 = take("b")
    a1, a2, a3 = take("a"), take("a"), take("a")
    places.arrived(a1)
    a4 = take("a")  # a is full: its own oldest arriving (a2) goes, not b's older one
    assert a2.evicted
    assert not a1.evicted
    assert not b1.evicted
    assert places.held == 4
    a5 = take("a")
    assert a3.evicted
    places.arrived(a4)
    places.arrived(a5)
    assert places.take("a") == "max_per_peer"
    for place in (a1, a4, a5, b1):
        places.release(place)
    assert places.held == 0


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["take", "arrive", "release"]))))
def test_places_never_exceed_their_bounds_and_count_back_to_zero(
    steps: list[tuple[str, str]],
) -> None:
    async def main() -> None:
        places = Places(total=4, per_peer=2)
        live: list[Place] = []
        for peer, step in steps:
            if step == "take":
                place = places.take(peer)
                if isinstance(place, Place):
                    live.append(place)
            elif live:
                place = live.pop(0) if step == "release" else live[0]
                (places.release if step == "release" else places.arrived)(place)
            live = [p for p in live if not p.evicted]
            assert places.held == len(live) <= 4
            for name in "abc":
                assert sum(p.peer == name for p in live) <= 2
        for place in live:
            places.release(place)
        assert places.held == 0

    trio.run(main)


async def test_refusals_are_counted_and_logged_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    caplog.set_level(logging.WARNING, logger="bridges.http")
    counts = dict.fromkeys(REASONS, 0)
    refusals = Refusals("http /x", counts)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(refusals.run)
        refusals.note("max_per_peer", "127.0.0.2", "too many")
        await trio.sleep(1)
        for _ in range(500):  # within the interval: one line for all of them
            refusals.note("evicted", "127.0.1.9")
            await trio.sleep(0.01)
        refusals.note("unauthorized", "127.0.0.1", "signature mismatch")
        await trio.sleep(15)  # quiet: nothing more is logged
        nursery.cancel_scope.cancel()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "http /x: refused 1 request(s): 1 x 503 max_per_peer (last: 127.0.0.2: too many)",
        "http /x: refused 501 request(s): 500 x 503 evicted (last: 127.0.1.9), "
        "1 x 401 unauthorized (last: 127.0.0.1: signature mismatch)",
    ]
    assert counts["evicted"] == 500
    assert counts["max_per_peer"] == counts["unauthorized"] == 1
