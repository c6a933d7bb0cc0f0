"""Client guarantees users rely on, against the embedded broker (and real TCP)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.lowlevel

import trio_stomp

from conftest import Target, all_tasks


async def _probe(client: trio_stomp.Client, dest: str) -> None:
    """The connection still works: a message goes round with receipts."""
    async with client.subscribe(dest, receipt=True) as sub:
        await client.send(dest, b"probe", receipt=True)
        async for message in sub:
            assert message.body == b"probe"
            break
    assert client._core.receipts == {}
    assert client._core.subscriptions.by_id == {}


class _CancelAfterSteps(trio.abc.Instrument):
    """Cancels ``scope`` once ``task`` has run ``steps`` scheduler steps."""

    def __init__(self, task: trio.lowlevel.Task, steps: int, scope: trio.CancelScope) -> None:
        self.task, self.steps, self.scope, self.seen = task, steps, scope, 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.seen += 1
            if self.seen == self.steps:
                self.scope.cancel()


async def _sweep(
    operation: Callable[[], Awaitable[None]], after: Callable[[], Awaitable[None]]
) -> int:
    """Cancel ``operation`` at its 1st, 2nd, ... scheduling point until it completes.

    ``after`` runs after every attempt and checks that nothing was left broken.
    Returns how many cancellation points were swept.
    """
    for steps in range(1, 500):
        scope = trio.CancelScope()
        instrument = _CancelAfterSteps(trio.lowlevel.current_task(), steps, scope)
        trio.lowlevel.add_instrument(instrument)
        try:
            with scope:
                await operation()
        finally:
            trio.lowlevel.remove_instrument(instrument)
        await after()
        if not scope.cancelled_caught:
            return steps
    raise AssertionError("the operation never completed")


@pytest.mark.deadline(120)
async def test_cancellation_anywhere_leaves_the_connection_consistent(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    async with trio_stomp.connect(embedded.url) as client:
        dest = unique("queue")

        async def check() -> None:
            await _probe(client, unique("queue"))

        async def send() -> None:
            await client.send(unique("queue"), b"x", receipt=True)

        async def subscribe_and_receive() -> None:
            # Seed first: a cancelled attempt may have consumed an earlier seed.
            await client.send(dest, b"seed", receipt=True)
            async with client.subscribe(dest, ack="client-individual", receipt=True) as sub:
                async for message in sub:
                    await message.ack(receipt=True)
                    break

        async def transaction() -> None:
            async with client.transaction() as tx:
                await tx.send(unique("queue"), b"t1")
                await tx.send(unique("queue"), b"t2")

        swept = [await _sweep(op, check) for op in (send, subscribe_and_receive, transaction)]
        assert all(n > 1 for n in swept), swept


@pytest.mark.deadline(60)
async def test_cancelling_connect_leaks_no_task(embedded: Target) -> None:
    before = all_tasks()

    async def session() -> None:
        async with trio_stomp.connect(embedded.url) as client:
            await client.send("/queue/sweep-connect", b"x", receipt=True)

    async def no_leak() -> None:
        assert all_tasks() == before

    assert await _sweep(session, no_leak) > 1


async def test_no_task_outlives_the_block(embedded: Target) -> None:
    before = all_tasks()
    async with trio_stomp.connect(embedded.url, heartbeat=(100, 100)) as client:
        async with client.subscribe("/queue/x"):
            assert len(all_tasks()) > len(before)
    assert all_tasks() == before


async def test_slow_consumer_does_not_stall_receipts(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        async with client.subscribe(
            dest, ack="client-individual", headers={"prefetch-count": "10"}, receipt=True
        ) as sub:
            for i in range(100):
                await client.send(dest, str(i))
            # Nobody reads `sub`; its buffer is full, yet receipts still arrive.
            with trio.fail_after(2):
                await client.send(unique("queue"), b"x", receipt=True)
            assert len(sub._state.buffer) == 10
            got = []
            async for message in sub:
                got.append(message)
                await message.ack()
                if len(got) == 100:
                    break
            assert [m.text for m in got] == [str(i) for i in range(100)]


async def test_auto_subscription_overflow_raises_after_buffered_messages(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("topic")
    async with trio_stomp.connect(embedded.url) as client:
        async with client.subscribe(dest, buffer_size=5, receipt=True) as sub:
            for i in range(20):
                await client.send(dest, str(i))
            await client.send(unique("queue"), b"sync", receipt=True)
            got = []
            with pytest.raises(trio_stomp.SubscriptionOverflow, match="buffer of 5"):  # noqa: PT012  # raised as the block exits
                async for message in sub:
                    got.append(message.text)
            assert got == ["0", "1", "2", "3", "4"]


async def test_a_frame_over_max_frame_size_fails_the_connection(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as sender:
        await sender.send(dest, b"small", receipt=True)
        await sender.send(dest, b"x" * 5000, receipt=True)
    got = []
    with pytest.raises(trio_stomp.RemoteProtocolError, match="max_frame_size=1000"):  # noqa: PT012  # raised as the block exits
        async with trio_stomp.connect(embedded.url, max_frame_size=1000) as client:
            async with client.subscribe(dest, ack="client-individual") as sub:
                async for message in sub:
                    got.append(message.body)
                    await message.ack()
    assert got == [b"small"]


async def test_ack_after_the_connection_is_gone_is_refused(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        await client.send(dest, b"m", receipt=True)
        async with client.subscribe(dest, ack="client-individual", receipt=True) as sub:
            kept = await anext(aiter(sub))
    with pytest.raises(trio_stomp.ClientClosed, match="redeliver"):
        await kept.ack()


async def test_ack_on_auto_subscription_is_an_error(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        await client.send(dest, b"m", receipt=True)
        async with client.subscribe(dest, receipt=True) as sub:
            async for message in sub:
                with pytest.raises(trio_stomp.LocalProtocolError, match="auto"):
                    await message.ack()
                break


async def test_nack_on_stomp_1_0_is_refused(embedded: Target, unique: Callable[[str], str]) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url, versions=("1.0",)) as client:
        await client.send(dest, b"m", receipt=True)
        async with client.subscribe(dest, ack="client", receipt=True) as sub:
            async for message in sub:
                with pytest.raises(trio_stomp.LocalProtocolError, match=r"1\.0 has no NACK"):
                    await message.nack()
                await message.ack()
                break


async def test_use_after_close_raises_client_closed(embedded: Target) -> None:
    async with trio_stomp.connect(embedded.url) as client:
        pass
    with pytest.raises(trio_stomp.ClientClosed):
        await client.send("/queue/a", b"late")


async def test_refused_connection_raises_connect_failed() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    with pytest.raises(trio_stomp.ConnectFailed, match="cannot connect"):
        async with trio_stomp.connect(f"stomp://127.0.0.1:{port}"):
            pass


async def test_silent_server_after_connected_is_detected_by_heartbeat() -> None:
    """A real TCP server that answers CONNECTED, then never says anything again."""

    async def silent(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.send_all(b"CONNECTED\nversion:1.2\nheart-beat:100,100\n\n\0")
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, silent, 0)
        port = listeners[0].socket.getsockname()[1]
        start = trio.current_time()
        with pytest.raises(trio_stomp.ConnectionLost, match="heart-beats"):
            async with trio_stomp.connect(f"stomp://127.0.0.1:{port}", heartbeat=(100, 100)):
                await trio.sleep(10)
        elapsed = trio.current_time() - start
        assert 0.2 <= elapsed < 1.0  # 2 x 100 ms, plus scheduling slack
        nursery.cancel_scope.cancel()


async def test_server_that_never_answers_connect_times_out() -> None:
    async def mute(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, mute, 0)
        port = listeners[0].socket.getsockname()[1]
        with pytest.raises(trio_stomp.ConnectFailed, match=r"within 0\.3"):
            async with trio_stomp.connect(f"stomp://127.0.0.1:{port}", connect_timeout=0.3):
                pass
        nursery.cancel_scope.cancel()


async def test_url_and_keywords(embedded: Target) -> None:
    port = int(embedded.url.rsplit(":", 1)[1])
    async with trio_stomp.connect(host="127.0.0.1", port=port, login="u", passcode="p") as c:
        assert c.version == "1.2"
    with pytest.raises(ValueError, match="scheme"):
        async with trio_stomp.connect("http://127.0.0.1:1"):
            pass
    with pytest.raises(ValueError, match="unknown URL parameter"):
        async with trio_stomp.connect("stomp://127.0.0.1:1/?vhots=/"):
            pass


async def test_many_sends_are_batched_into_few_writes(
    embedded: Target, unique: Callable[[str], str]
) -> None:
    dest = unique("queue")
    async with trio_stomp.connect(embedded.url) as client:
        stream = client._core.conn.stream
        writes = 0
        original = stream.send_all

        async def counting_send_all(data: bytes | bytearray | memoryview) -> None:
            nonlocal writes
            writes += 1
            await original(data)

        stream.send_all = counting_send_all  # type: ignore[method-assign]
        for i in range(1000):
            await client.send(dest, b"%d" % i)
        await client.send(dest, b"last", receipt=True)
    assert writes < 200, writes
