"""Behaviour x broker: the same client-driven tests against every broker.

Parametrized by the ``target`` fixture over the embedded broker, RabbitMQ and
ActiveMQ. Where a broker legitimately differs, the test says so in an explicit
branch naming the broker. The terminal summary prints the behaviour x broker
table (see conftest.py); docs/explanation/stomp-dialects.md explains the differences.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import trio

import trio_stomp

from conftest import Target

pytestmark = pytest.mark.conformance

VERSIONS = ["1.0", "1.1", "1.2"]
BODIES = {
    "empty": b"",
    "nul": b"a\0b\0\0c",
    "binary": bytes(range(256)) * 4,
    "1mib": bytes(range(256)) * 4096,
}


async def first_message(sub: trio_stomp.Subscription) -> trio_stomp.Message:
    async for message in sub:
        return message
    raise AssertionError("subscription ended without a message")


@pytest.mark.parametrize("version", VERSIONS)
async def test_version_negotiation(target: Target, version: str) -> None:
    async with trio_stomp.connect(target.url, versions=(version,)) as client:
        assert client.version == version


async def test_highest_common_version_is_chosen(target: Target) -> None:
    async with trio_stomp.connect(target.url) as client:
        assert client.version == "1.2"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("body", list(BODIES))
async def test_binary_bodies_round_trip(
    target: Target, unique: Callable[[str], str], version: str, body: str
) -> None:
    dest = unique("queue")
    async with (
        trio_stomp.connect(target.url, versions=(version,)) as client,
        client.subscribe(dest, receipt=True) as sub,
    ):
        await client.send(dest, BODIES[body], receipt=True)
        message = await first_message(sub)
        assert message.body == BODIES[body]
        assert message.destination == dest


# Values each version can carry: 1.0 has no escaping, 1.1 cannot escape CR.
HEADER_VALUES = {
    # Colons and backslashes in 1.0: see test_rabbitmq_escapes_headers_even_in_1_0.
    "1.0": {"utf8": "héllo wörld ✓", "plain": "a b c"},
    "1.1": {"colon": "a:b", "newline": "line1\nline2", "backslash": "C:\\temp", "utf8": "日本語"},
    "1.2": {
        "colon": "a:b",
        "newline": "line1\nline2",
        "cr": "x\ry",
        "backslash": "C:\\temp\\",
        "utf8": "日本語 ✓",
        "all": "\\:\n\r:\\",
    },
}


@pytest.mark.parametrize("version", VERSIONS)
async def test_header_values_round_trip(
    target: Target, unique: Callable[[str], str], version: str
) -> None:
    dest = unique("queue")
    headers = {f"x-{name}": value for name, value in HEADER_VALUES[version].items()}
    async with (
        trio_stomp.connect(target.url, versions=(version,)) as client,
        client.subscribe(dest, receipt=True) as sub,
    ):
        await client.send(dest, b"h", headers=headers, receipt=True)
        message = await first_message(sub)
        for name, value in headers.items():
            assert message.headers.get(name) == value, name


async def test_a_cr_in_a_1_1_header_is_refused_before_it_is_sent(
    target: Target, unique: Callable[[str], str]
) -> None:
    """1.1 has no escape for CR. Sent raw, RabbitMQ closed the connection without
    an ERROR, and a trailing CR silently disappeared: now it is refused here, and
    the connection goes on (nothing reached the wire)."""
    dest = unique("queue")
    async with trio_stomp.connect(target.url, versions=("1.1",)) as client:
        for value in ("a\rb", "trailing\r"):
            with pytest.raises(trio_stomp.LocalProtocolError, match="carriage return"):
                await client.send(dest, b"x", headers={"x-cr": value})
        with pytest.raises(trio_stomp.LocalProtocolError, match="carriage return"):
            await client.send(dest + "\r", b"x")  # the fast path (no headers) too
        async with client.subscribe(dest, receipt=True) as sub:
            await client.send(dest, b"after", receipt=True)
            message = await first_message(sub)
            assert message.body == b"after"
            assert "x-cr" not in message.headers


async def test_a_cr_sent_under_1_2_reaches_a_lenient_1_1_consumer(
    target: Target, unique: Callable[[str], str]
) -> None:
    """What each broker hands a 1.1 consumer for a header value holding CR.

    RabbitMQ escapes it as ``\\r``, which 1.1 does not define: a strict
    parser fails the connection, ``lenient=True`` keeps the two characters as
    they are. ActiveMQ sends the CR raw (a 1.1 value may hold one). The
    embedded broker leaves out a header its consumer's version cannot carry.
    """
    dest = unique("queue")
    async with (
        trio_stomp.connect(target.url) as producer,
        trio_stomp.connect(target.url, versions=("1.1",), lenient=True) as consumer,
        consumer.subscribe(dest, receipt=True) as sub,
    ):
        await producer.send(dest, b"x", headers={"x-cr": "a\rb"}, receipt=True)
        message = await first_message(sub)
        expected = {"rabbitmq": "a\\rb", "activemq": "a\rb", "embedded": None}
        assert message.headers.get("x-cr") == expected[target.name]


async def test_rabbitmq_escapes_headers_even_in_1_0(
    target: Target, unique: Callable[[str], str]
) -> None:
    """RabbitMQ's dialect: STOMP 1.0 has no escaping, but RabbitMQ escapes anyway.

    It sends ``a:b`` as ``a\\cb`` and closes the connection on a raw backslash
    (an undefined escape to it). The other brokers keep 1.0 headers raw.
    """
    dest = unique("queue")
    async with (
        trio_stomp.connect(target.url, versions=("1.0",)) as client,
        client.subscribe(dest, receipt=True) as sub,
    ):
        await client.send(dest, b"h", headers={"x-colon": "a:b"}, receipt=True)
        message = await first_message(sub)
        expected = "a\\cb" if target.name == "rabbitmq" else "a:b"
        assert message.headers["x-colon"] == expected


async def test_receipts_confirm_frames(target: Target, unique: Callable[[str], str]) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        for i in range(20):
            await client.send(dest, str(i), receipt=True)
        async with client.subscribe(dest, receipt=True) as sub:
            received = [m.text async for m in _take(sub, 20)]
    assert received == [str(i) for i in range(20)]


async def _take(sub: trio_stomp.Subscription, count: int) -> AsyncIterator[trio_stomp.Message]:
    seen = 0
    async for message in sub:
        yield message
        seen += 1
        if seen == count:
            return


async def test_transaction_commit_delivers_all(
    target: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        async with client.subscribe(dest, receipt=True) as sub:
            async with client.transaction() as tx:
                for i in range(5):
                    await tx.send(dest, f"m{i}")
            assert [m.text async for m in _take(sub, 5)] == [f"m{i}" for i in range(5)]


async def test_transaction_abort_by_exception_drops_sends(
    target: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        with pytest.raises(ZeroDivisionError):  # noqa: PT012  # raised as the block exits
            async with client.transaction() as tx:
                await tx.send(dest, "aborted")
                1 / 0  # noqa: B018
        await client.send(dest, "after", receipt=True)
        async with client.subscribe(dest, receipt=True) as sub:
            assert (await first_message(sub)).text == "after"


async def test_transaction_abort_by_cancellation_drops_sends(
    target: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        with trio.move_on_after(0.2) as scope:
            async with client.transaction() as tx:
                await tx.send(dest, "aborted")
                await trio.sleep_forever()
        assert scope.cancelled_caught
        assert tx.state == "aborted"
        await client.send(dest, "after", receipt=True)
        async with client.subscribe(dest, receipt=True) as sub:
            assert (await first_message(sub)).text == "after"


async def test_transactional_ack(target: Target, unique: Callable[[str], str]) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        await client.send(dest, "one", receipt=True)
        async with client.subscribe(dest, ack="client-individual", receipt=True) as sub:
            message = await first_message(sub)
            async with client.transaction() as tx:
                await tx.ack(message)
    async with (
        trio_stomp.connect(target.url) as client,
        client.subscribe(dest, receipt=True) as sub,
    ):
        with trio.move_on_after(0.5):
            extra = await first_message(sub)
            pytest.fail(f"an acked message came back: {extra!r}")


async def test_auto_ack_messages_are_gone_after_disconnect(
    target: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        await client.send(dest, "once", receipt=True)
        async with client.subscribe(dest, receipt=True) as sub:
            assert (await first_message(sub)).text == "once"
    async with (
        trio_stomp.connect(target.url) as client,
        client.subscribe(dest, receipt=True) as sub,
    ):
        with trio.move_on_after(0.5):
            extra = await first_message(sub)
            pytest.fail(f"an auto-acked message came back: {extra!r}")


@pytest.mark.parametrize("version", ["1.1", "1.2"])
async def test_client_individual_ack_and_redelivery_after_disconnect(
    target: Target, unique: Callable[[str], str], version: str
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url, versions=(version,)) as client:
        for text in ("a", "b", "c"):
            await client.send(dest, text, receipt=True)
        async with client.subscribe(dest, ack="client-individual", receipt=True) as sub:
            got = [m async for m in _take(sub, 3)]
            await got[1].ack(receipt=True)  # only "b"
    # a and c were never acked: the broker hands them out again.
    async with (
        trio_stomp.connect(target.url, versions=(version,)) as client,
        client.subscribe(dest, ack="client-individual", receipt=True) as sub,
    ):
        again = [m async for m in _take(sub, 2)]
        assert sorted(m.text for m in again) == ["a", "c"]
        for message in again:
            await message.ack()


async def test_client_ack_is_cumulative(target: Target, unique: Callable[[str], str]) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        for text in ("a", "b", "c"):
            await client.send(dest, text, receipt=True)
        async with client.subscribe(dest, ack="client", receipt=True) as sub:
            got = [m async for m in _take(sub, 3)]
            await got[1].ack(receipt=True)  # acks a and b
    async with (
        trio_stomp.connect(target.url) as client,
        client.subscribe(dest, ack="client", receipt=True) as sub,
    ):
        again = await first_message(sub)
        assert again.text == "c"
        await again.ack(receipt=True)


async def test_nack_redelivers_or_dead_letters(
    target: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        await client.send(dest, "retry me", headers={"persistent": "true"}, receipt=True)
        async with client.subscribe(dest, ack="client-individual", receipt=True) as sub:
            first = await first_message(sub)
            assert not first.redelivered
            await first.nack(receipt=True)
            if target.name == "activemq":
                # ActiveMQ does not redeliver a NACKed message: it dead-letters
                # it at once (persistent ones to ActiveMQ.DLQ; non-persistent
                # ones are dropped unless the broker is configured otherwise).
                with trio.move_on_after(0.5):
                    extra = await first_message(sub)
                    pytest.fail(f"ActiveMQ redelivered a NACKed message: {extra!r}")
            else:
                second = await first_message(sub)
                assert second.text == "retry me"
                assert second.redelivered
                await second.ack(receipt=True)
                return
        async with client.subscribe("/queue/ActiveMQ.DLQ", ack="client-individual") as dlq:
            async for dead in dlq:
                await dead.ack()
                if dead.message_id == first.message_id:
                    assert dead.headers["original-destination"] == dest
                    assert dead.text == "retry me"
                    break


async def test_queue_delivers_each_message_to_one_consumer(
    target: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        async with (
            client.subscribe(dest, receipt=True) as one,
            client.subscribe(dest, receipt=True) as two,
        ):
            for i in range(10):
                await client.send(dest, str(i))
            seen: list[str] = []

            async def collect(sub: trio_stomp.Subscription) -> None:
                async for message in sub:
                    seen.append(message.text)
                    if len(seen) == 10:
                        nursery.cancel_scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(collect, one)
                nursery.start_soon(collect, two)
    assert sorted(seen, key=int) == [str(i) for i in range(10)]


async def test_topic_fans_out_to_every_subscriber(
    target: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("topic")
    async with trio_stomp.connect(target.url) as client:
        async with (
            client.subscribe(dest, receipt=True) as one,
            client.subscribe(dest, receipt=True) as two,
        ):
            await client.send(dest, "news", receipt=True)
            assert (await first_message(one)).text == "news"
            assert (await first_message(two)).text == "news"


async def test_error_frame_surfaces_as_server_error(target: Target) -> None:
    with pytest.raises(trio_stomp.ServerError) as info:  # noqa: PT012  # raised as the block exits
        async with trio_stomp.connect(target.url) as client:
            # COMMIT of a transaction that was never begun: every broker refuses it.
            await client._core.send_frame("COMMIT", [("transaction", "never-begun")], receipt=True)
            await trio.sleep(5)
    assert info.value.message


async def test_bad_credentials_raise_connect_failed(target: Target) -> None:
    if target.name == "activemq":
        # ActiveMQ as configured here (the default) accepts any login.
        async with trio_stomp.connect(target.url, login="nobody", passcode="wrong") as client:
            assert client.version == "1.2"
        return
    if target.name == "embedded":
        from trio_stomp.broker import open_broker

        async with open_broker(users={"guest": "guest"}) as broker:
            with pytest.raises(trio_stomp.ConnectFailed):
                async with trio_stomp.connect(broker.url, login="guest", passcode="wrong"):
                    pass
        return
    with trio.fail_after(1):
        with pytest.raises(trio_stomp.ConnectFailed, match="refused"):
            async with trio_stomp.connect(target.url, login="guest", passcode="wrong"):
                pass


@pytest.mark.parametrize("version", VERSIONS)
async def test_heartbeats_keep_an_idle_connection_alive(target: Target, version: str) -> None:
    # 1.0 has no heart-beats, yet every broker here answers a 1.0 CONNECT's
    # heart-beat header and enforces it: RabbitMQ and ActiveMQ closed a 1.0
    # client that ignored it after three intervals.
    async with trio_stomp.connect(target.url, heartbeat=(300, 300), versions=(version,)) as client:
        send_every, expect_every = client.heartbeat
        assert 0 < send_every <= 1.0
        assert 0 < expect_every <= 1.0
        await trio.sleep(2.5 * expect_every + 0.5)
        await client.send("/queue/trio-stomp-heartbeat-probe", b"", receipt=True)


async def test_no_heartbeats_under_1_0_when_none_are_offered(target: Target) -> None:
    async with trio_stomp.connect(target.url, heartbeat=(0, 0), versions=("1.0",)) as client:
        assert client.heartbeat == (0.0, 0.0)
        await trio.sleep(1.0)
        await client.send("/queue/trio-stomp-heartbeat-probe", b"", receipt=True)


async def test_connect_headers_are_accepted(target: Target, unique: Callable[[str], str]) -> None:
    dest = unique("queue")
    client_id = dest.rsplit("/", 1)[1]
    headers = {"client-id": client_id, "x-trio-stomp-test": "yes"}
    async with (
        trio_stomp.connect(target.url, headers=headers) as client,
        client.subscribe(dest, receipt=True) as sub,
    ):
        await client.send(dest, b"with connect headers", receipt=True)
        assert (await first_message(sub)).body == b"with connect headers"


def durable_headers(broker: str, name: str) -> tuple[dict[str, str], dict[str, str]]:
    """The CONNECT and SUBSCRIBE headers of a durable topic subscription called ``name``."""
    if broker in ("activemq", "embedded"):
        # A durable subscriber is named by the connection's client-id and the
        # subscription's name; ActiveMQ (and the embedded broker, which names it
        # the same way) keeps it until it is removed.
        return {"client-id": f"{name}-client"}, {"activemq.subscriptionName": name}
    # RabbitMQ: a durable queue bound to the topic, named so that the next
    # SUBSCRIBE finds it again. (x-expires only tidies up after the test.)
    return {}, {
        "durable": "true",
        "auto-delete": "false",
        "x-queue-name": name,
        "x-expires": "60000",
    }


async def test_durable_topic_subscription_keeps_messages_while_away(
    target: Target, unique: Callable[[str], str]
) -> None:
    """A message published while the subscriber is offline is delivered when it
    subscribes again. The embedded broker names durable subscriptions as ActiveMQ
    does (without a data dir they live while it runs; see test_durable.py for
    restarts)."""
    topic = unique("topic")
    name = topic.rsplit("/", 1)[1]
    connect_headers, subscribe_headers = durable_headers(target.name, name)
    async with (
        trio_stomp.connect(target.url, headers=connect_headers) as client,
        client.subscribe(topic, headers=subscribe_headers, receipt=True),
    ):
        pass  # subscribed, then away (UNSUBSCRIBE ends the consumer, not the subscription)
    async with trio_stomp.connect(target.url) as producer:
        await producer.send(topic, b"while away", headers={"persistent": "true"}, receipt=True)
    async with trio_stomp.connect(target.url, headers=connect_headers) as client:
        try:
            async with client.subscribe(topic, headers=subscribe_headers, receipt=True) as sub:
                assert (await first_message(sub)).body == b"while away"
        finally:
            if target.name != "rabbitmq":
                # Remove the subscription: UNSUBSCRIBE naming it, from its client-id.
                await client._core.send_frame(
                    "UNSUBSCRIBE",
                    [("id", "remove"), ("activemq.subscriptionName", name)],
                    receipt=True,
                )


async def test_leaving_a_busy_auto_subscription_keeps_the_connection(
    target: Target, unique: Callable[[str], str]
) -> None:
    """Messages still in flight when we unsubscribe must not end the session.

    RabbitMQ answers each such delivery with a non-fatal ERROR ("Subscription
    not found ... tag 'T_<id>'") and keeps the connection; the client knows
    the subscription is one it ended and ignores it.
    """
    dest = unique("queue")
    async with trio_stomp.connect(target.url) as client:
        for i in range(500):
            await client.send(dest, b"%d" % i)
        async with client.subscribe(dest, receipt=True) as sub:
            assert [m.body async for m in _take(sub, 10)] == [b"%d" % i for i in range(10)]
        await trio.sleep(0.3)
        await client.send(unique("queue"), b"still connected", receipt=True)
        async with client.subscribe(dest, receipt=True) as sub:  # drain what is left
            with trio.move_on_after(0.5):
                async for _ in sub:
                    pass
