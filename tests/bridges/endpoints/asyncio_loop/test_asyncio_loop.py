"""bridges.endpoints._asyncio: one trio-asyncio loop per process, cancellation mapped both ways."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import trio
import trio.lowlevel
import trio.testing

import bridges
from bridges.endpoints._asyncio import LOOP_KEY, AsyncioLoop, AsyncioSender, asyncio_loop


def all_tasks() -> set[trio.lowlevel.Task]:
    """Every task below the current one."""
    tasks: set[trio.lowlevel.Task] = set()
    pending = [trio.lowlevel.current_task()]
    while pending:
        task = pending.pop()
        tasks.add(task)
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return tasks


async def running_loop() -> asyncio.AbstractEventLoop:
    await asyncio.sleep(0)
    return asyncio.get_running_loop()


async def test_routes_in_other_nurseries_share_one_loop_that_closes_with_the_process() -> None:
    seen: list[AsyncioLoop] = []
    inside: list[asyncio.AbstractEventLoop] = []
    async with bridges.open_shared() as shared:
        context = bridges.Context(shared=shared)

        async def route() -> None:
            # A task that did not open the loop: trio-asyncio's context variable
            # is unset here, the explicit loop still works.
            async with asyncio_loop(context) as aio:
                seen.append(aio)
                inside.append(await aio.run(running_loop))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(route)
        assert len({id(aio.loop) for aio in seen}) == 1
        assert all(loop is seen[0].loop for loop in inside)
        # Every route has left; the loop stays for the next one.
        assert shared.get(LOOP_KEY) is seen[0]
        assert not seen[0].loop.is_closed()
        async with asyncio_loop(context) as again:
            assert again is seen[0]
    assert seen[0].loop.is_closed()


async def test_outside_a_process_the_loop_is_private_and_leaves_no_task() -> None:
    before = all_tasks()
    async with asyncio_loop(bridges.Context()) as aio:
        assert await aio.run(asyncio.sleep, 0.001, result=7) == 7
        assert len(all_tasks()) > len(before)
    assert aio.loop.is_closed()
    assert all_tasks() == before


async def test_trio_cancel_cancels_the_asyncio_task_and_waits_for_its_cleanup() -> None:
    events: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            events.append("cancelled")
            await asyncio.sleep(0.01)  # cleanup that takes time (a goodbye on the wire)
            events.append("cleaned up")
            raise

    async with asyncio_loop(bridges.Context()) as aio:
        with trio.move_on_after(0.05) as scope:
            await aio.run(slow)
        assert scope.cancelled_caught
        # run() returned only after the asyncio side had finished.
        assert events == ["cancelled", "cleaned up"]


async def test_an_asyncio_side_cancel_is_a_broken_resource_not_a_bare_cancelled_error() -> None:
    async def cancels_itself() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(1)

    async with asyncio_loop(bridges.Context()) as aio:
        with pytest.raises(trio.BrokenResourceError, match="asyncio task was cancelled"):
            await aio.run(cancels_itself)
        # The Trio caller is not cancelled: it goes on.
        assert await aio.run(asyncio.sleep, 0, result="ok") == "ok"


async def test_errors_of_asyncio_code_reach_the_trio_caller() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise ConnectionRefusedError("nope")

    async with asyncio_loop(bridges.Context()) as aio:
        with pytest.raises(ConnectionRefusedError, match="nope"):
            await aio.run(fails)


async def test_a_closed_loop_is_a_closed_resource() -> None:
    async with asyncio_loop(bridges.Context()) as aio:
        pass
    with pytest.raises(trio.ClosedResourceError, match="asyncio loop is closed"):
        await aio.run(asyncio.sleep, 0)


async def test_sync_library_calls_that_need_a_running_loop_go_through_call() -> None:
    async with bridges.open_shared() as shared, asyncio_loop(bridges.Context(shared=shared)) as aio:
        # The shared loop was opened by another task: this one has no running asyncio loop.
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()

        def make_future() -> asyncio.Future[None]:
            return asyncio.get_running_loop().create_future()

        future = await aio.call(make_future)
        assert future.get_loop() is aio.loop


async def test_iterate_consumes_an_asyncio_iterator_and_cancel_reaches_it() -> None:
    closed = trio.Event()

    async def numbers() -> AsyncIterator[int]:
        try:
            for n in range(3):
                await asyncio.sleep(0)
                yield n
            await asyncio.sleep(100)
            yield 99  # pragma: no cover - cancelled before
        finally:
            closed.set()

    async with asyncio_loop(bridges.Context()) as aio:
        got: list[int] = []
        with trio.move_on_after(0.05):
            async for n in aio.iterate(numbers()):
                got.append(n)
        assert got == [0, 1, 2]
        with trio.fail_after(1):
            await closed.wait()
        # A finite iterator ends the loop.

        async def two() -> AsyncIterator[str]:
            yield "a"
            yield "b"

        assert [x async for x in aio.iterate(two())] == ["a", "b"]


async def test_channel_gives_asyncio_callbacks_backpressure_from_trio() -> None:
    async with asyncio_loop(bridges.Context()) as aio:
        sender: AsyncioSender[int]
        receiver: trio.MemoryReceiveChannel[int]
        sender, receiver = aio.channel(2)
        sent: list[int] = []

        async def produce() -> None:
            for n in range(5):
                await sender(n)
                sent.append(n)
            sender.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(aio.run, produce)
            await trio.testing.wait_all_tasks_blocked()
            # Two fit in the buffer; the third waits for the Trio side.
            assert sent == [0, 1]
            got = [n async for n in receiver]
        assert got == [0, 1, 2, 3, 4]
        assert sent == got


async def test_channel_sender_sees_a_closed_receiver_as_broken() -> None:
    async with asyncio_loop(bridges.Context()) as aio:
        sender: AsyncioSender[int]
        receiver: trio.MemoryReceiveChannel[int]
        sender, receiver = aio.channel(1)

        async def produce() -> None:
            await sender(1)
            await sender(2)

        async with trio.open_nursery() as nursery:

            async def expect_broken() -> None:
                with pytest.raises(trio.BrokenResourceError):
                    await aio.run(produce)

            nursery.start_soon(expect_broken)
            await trio.testing.wait_all_tasks_blocked()
            await receiver.aclose()


async def test_cancelling_a_trio_consumer_cancels_a_blocked_asyncio_sender() -> None:
    async with asyncio_loop(bridges.Context()) as aio:
        sender: AsyncioSender[int]
        sender, _receiver = aio.channel(0)
        outcome: list[str] = []

        async def produce() -> None:
            try:
                await sender(1)
            except asyncio.CancelledError:
                outcome.append("sender cancelled")
                raise

        with trio.move_on_after(0.05):
            await aio.run(produce)
        assert outcome == ["sender cancelled"]
