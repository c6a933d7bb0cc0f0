"""Failover and reconnect, proven with a fault-injecting proxy and a real broker restart."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import trio

import trio_stomp
from trio_stomp import ConnectionEvent, Reconnect
from trio_stomp.testing import FakePeer, fault_proxy, lossless_run

from conftest import REAL_BROKERS, Target, require_real_broker

FAST = Reconnect(initial_delay=0.01, max_delay=0.1)
SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


def test_backoff_is_exponential_with_full_jitter_and_a_cap() -> None:
    policy = Reconnect(initial_delay=0.1, max_delay=1.0, multiplier=2.0)
    rng = random.Random(7)
    for attempt, bound in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (50, 1.0)]:
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(0 <= d <= bound for d in delays)
        assert max(delays) > bound * 0.8  # full jitter spans the whole range
    with pytest.raises(ValueError):
        Reconnect(max_attempts=0)


async def _closed_port() -> int:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port: int = listener.socket.getsockname()[1]
    await listener.aclose()
    return port


async def test_connect_headers_are_sent_again_on_every_connection() -> None:
    seen: list[str | None] = []
    reconnected = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        peer = FakePeer(stream)
        connect = await peer.accept()
        seen.append(connect.headers.get("client-id"))
        if len(seen) == 1:
            await stream.aclose()  # the first connection drops
            return
        reconnected.set()
        await peer.drain()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        async with trio_stomp.connect(
            f"stomp://127.0.0.1:{port}",
            headers={"client-id": "billing-1"},
            heartbeat=(0, 0),
            reconnect=FAST,
        ):
            await reconnected.wait()
        nursery.cancel_scope.cancel()
    assert seen == ["billing-1", "billing-1"]


async def test_failover_list_uses_the_first_broker_that_answers(embedded: Target) -> None:
    dead = f"stomp://127.0.0.1:{await _closed_port()}"
    async with trio_stomp.connect([dead, embedded.url]) as client:
        assert client.url == embedded.url
        await client.send("/queue/failover", b"x", receipt=True)


async def test_failover_list_without_any_broker_names_each_failure() -> None:
    urls = [f"stomp://127.0.0.1:{await _closed_port()}" for _ in range(2)]
    with pytest.raises(trio_stomp.ConnectFailed, match="after 2 attempts") as info:
        async with trio_stomp.connect(urls):
            pass
    assert all(url in str(info.value) for url in urls)


async def test_reconnect_resubscribes_and_reports_events(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    port = int(embedded.url.rsplit(":", 1)[1])
    events: list[ConnectionEvent] = []
    times: list[float] = []
    noticed = trio.Event()

    def record(event: ConnectionEvent) -> None:
        events.append(event)
        times.append(trio.current_time())
        noticed.set()

    async with fault_proxy(port) as proxy:
        async with trio_stomp.connect(proxy.url(), reconnect=FAST, on_event=record) as c:
            async with c.subscribe(dest, ack="client-individual", receipt=True) as sub:
                await c.send(dest, b"before", receipt=True)
                before = await anext(aiter(sub))
                proxy.cut()
                await noticed.wait()
                # The message came on the dead connection: acking it must be refused.
                with pytest.raises(trio_stomp.ClientClosed, match="redeliver"):
                    await before.ack()
                await c.send(dest, b"after", receipt=True)  # waits for the new connection
                seen = set()
                async for message in sub:
                    seen.add(message.body)
                    await message.ack()
                    if seen == {b"before", b"after"}:
                        break
    assert [e.kind for e in events] == ["lost", "restored"]
    assert c.reconnects == 1
    # From the loss to the moment every subscription was back: the time between the
    # two events, and well under a second (the proxy accepts again at once).
    assert events[1].downtime == pytest.approx(times[1] - times[0], abs=0.002)
    assert 0 < events[1].downtime < 1.0
    assert events[1].attempts == 1


async def test_open_transaction_fails_loudly_on_reconnect(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    port = int(embedded.url.rsplit(":", 1)[1])
    async with fault_proxy(port) as proxy:
        async with trio_stomp.connect(proxy.url(), reconnect=FAST) as client:
            with pytest.raises(trio_stomp.TransactionError, match="rolled back"):  # noqa: PT012  # raised as the block exits
                async with client.transaction() as tx:
                    await tx.send(dest, b"in tx")
                    proxy.cut()
                    await trio.sleep(0.2)  # the reconnect happens meanwhile
                    await tx.send(dest, b"after the cut")
            # Nothing of the transaction was committed, and the client works.
            await client.send(dest, b"plain", receipt=True)
            async with client.subscribe(dest, receipt=True) as sub:
                assert (await anext(aiter(sub))).body == b"plain"


async def test_reconnect_gives_up_after_max_attempts(embedded: Target) -> None:
    port = int(embedded.url.rsplit(":", 1)[1])
    async with fault_proxy(port) as proxy:
        policy = Reconnect(initial_delay=0.01, max_delay=0.02, max_attempts=3)
        with pytest.raises(trio_stomp.ConnectFailed, match="after 3 attempts"):  # noqa: PT012  # raised as the block exits
            async with trio_stomp.connect([proxy.url(), proxy.url()], reconnect=policy):
                proxy.upstream = ("127.0.0.1", await _closed_port())
                proxy.cut()
                await trio.sleep(10)


async def test_stalled_peer_is_detected_by_heartbeat(embedded: Target) -> None:
    port = int(embedded.url.rsplit(":", 1)[1])
    events: list[tuple[float, ConnectionEvent]] = []
    noticed = trio.Event()

    def record(event: ConnectionEvent) -> None:
        events.append((trio.current_time(), event))
        noticed.set()

    async with fault_proxy(port) as proxy:
        async with trio_stomp.connect(
            proxy.url(), heartbeat=(100, 100), reconnect=FAST, on_event=record
        ) as client:
            await trio.sleep(0.3)  # past the first-beat grace
            stalled_at = trio.current_time()
            proxy.stall()
            with trio.fail_after(2):
                await noticed.wait()
            detected = events[0][0] - stalled_at
            # Silence is death after 2 x 100 ms; the last byte before the stall
            # came up to one interval earlier, so detection lands in (0.1, 0.2].
            assert 0.05 <= detected <= 0.4, detected
            proxy.resume()
            await client.send("/queue/after-stall", b"x", receipt=True)
    assert [e.kind for _, e in events][:2] == ["lost", "restored"]


@pytest.mark.deadline(120)
async def test_20000_messages_survive_connection_cuts(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    port = int(embedded.url.rsplit(":", 1)[1])
    async with fault_proxy(port) as proxy:

        async def cut(_: int) -> None:
            proxy.cut()

        prefetch, senders = 100, 8
        tally = await lossless_run(
            proxy.url(),
            unique("queue"),
            20_000,
            disrupt=cut,
            every=700,
            prefetch=prefetch,
            senders=senders,
        )
    assert tally.missing == 0
    assert proxy.cuts >= 20
    # Each cut can redeliver at most the unacked window, and re-send at most
    # the SENDs waiting for a receipt.
    assert tally.duplicates <= proxy.cuts * (prefetch + senders)
    assert tally.restored_events >= 2 * proxy.cuts - 2


@pytest.mark.deadline(240)
async def test_rabbitmq_restart_mid_stream_loses_nothing(unique: Callable[[str], str]) -> None:
    require_real_broker("rabbitmq")

    async def restart(_: int) -> None:
        if restarts:
            return
        restarts.append(1)
        await trio.run_process(
            [str(SCRIPTS / "brokers"), "restart", "rabbitmq"],
            capture_stdout=True,
            capture_stderr=True,
        )

    restarts: list[int] = []
    tally = await lossless_run(
        REAL_BROKERS["rabbitmq"],
        unique("queue"),
        3_000,
        disrupt=restart,
        every=1000,
        headers={"persistent": "true"},
    )
    assert restarts
    assert tally.missing == 0
    assert tally.lost_events >= 2
    assert tally.restored_events >= 2


async def test_error_frame_leads_to_the_same_reconnect_path(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    events: list[ConnectionEvent] = []
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url, reconnect=FAST, on_event=events.append) as c:
        async with c.subscribe(dest, receipt=True) as sub:
            # COMMIT of a transaction never begun: the broker sends ERROR and closes.
            with pytest.raises(trio_stomp.ConnectionLost):
                await c._core.send_frame("COMMIT", [("transaction", "never-begun")], receipt=True)
            await c.send(dest, b"after the error", receipt=True)
            assert (await anext(aiter(sub))).body == b"after the error"
    assert [e.kind for e in events] == ["lost", "restored"]
    # The ERROR frame's message, and the first line of its body.
    assert events[0].error == "unknown transaction: COMMIT of 'never-begun', which is not open"


async def test_fragmented_and_delayed_streams_work(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    """Every write split into 7-byte pieces, each chunk delayed: frames still parse."""
    port = int(embedded.url.rsplit(":", 1)[1])
    dest = unique("queue")
    body = bytes(range(256)) * 8
    async with fault_proxy(port) as proxy:
        proxy.split = 7
        proxy.delay = 0.001
        async with (
            trio_stomp.connect(proxy.url()) as client,
            client.subscribe(dest, ack="client-individual", receipt=True) as sub,
        ):
            for i in range(20):
                await client.send(dest, body + b"%d" % i, headers={"n": str(i)})
            for i in range(20):
                message = await anext(aiter(sub))
                assert message.body == body + b"%d" % i
                assert message.headers["n"] == str(i)
                await message.ack()
