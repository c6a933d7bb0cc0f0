"""bridges.blocking and bridges.worker_thread: blocking calls off the loop, abandoned or
waited for, in bounded threads."""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial

import pytest
import trio
import trio.lowlevel

from bridges import blocking, worker_thread
from bridges._blocking import MAX_THREADS, limiter


async def test_it_returns_the_calls_result_and_raises_its_error() -> None:
    assert await blocking(partial(sum, [1, 2, 3]), what="sum") == 6
    with pytest.raises(ZeroDivisionError):
        await blocking(lambda: 1 / 0, what="divide")


async def test_an_abandoned_call_times_out_and_is_cancelled_at_once() -> None:
    release = threading.Event()
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"read: not done within 0\.2 s"):
            await blocking(release.wait, what="read", timeout=0.2, abandon=True)
        assert time.monotonic() - started < 2
        with trio.move_on_after(0.1) as scope:
            await blocking(release.wait, what="read", abandon=True)
        assert scope.cancelled_caught
    finally:
        release.set()  # the abandoned threads end


async def runs_to_its_end_when_cancelled(
    run: Callable[[Callable[[], str]], Awaitable[str]],
) -> tuple[Callable[[], str], list[float]]:
    """``run`` a write that takes 0.3 s, cancelled after 0.05: it returns the write's
    result once the write did, and the cancellation comes at the next checkpoint.
    Returns the write and when each of its runs finished."""
    release = threading.Event()
    finished: list[float] = []

    def write() -> str:
        release.wait()
        finished.append(time.monotonic())
        return "written"

    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    with trio.move_on_after(0.05) as scope:  # cancelled while it runs
        assert await run(write) == "written"  # returns once the write did: 0.3 s
        returned = time.monotonic()
        await trio.lowlevel.checkpoint()  # and the cancellation comes at the next checkpoint
    assert scope.cancelled_caught
    assert returned - started >= 0.25
    assert finished, "the write ran to its end before cancellation was delivered"
    assert finished[0] - started >= 0.25
    return write, finished


async def test_a_call_that_is_not_abandoned_is_waited_for_even_when_cancelled() -> None:
    write, _ = await runs_to_its_end_when_cancelled(lambda call: blocking(call, what="write"))
    with pytest.raises(ValueError, match="cannot have a timeout"):
        await blocking(write, what="write", timeout=1)


async def test_the_process_runs_at_most_max_threads_calls_at_once() -> None:
    release = threading.Event()
    running, most = 0, 0
    lock = threading.Lock()

    def call() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait()
        with lock:
            running -= 1

    try:
        with trio.move_on_after(0.5):
            async with trio.open_nursery() as nursery:
                for _ in range(MAX_THREADS + 8):
                    nursery.start_soon(partial(blocking, call, what="call", abandon=True))
        assert most == MAX_THREADS
    finally:
        release.set()


async def test_a_worker_thread_runs_each_call_in_turn_in_one_thread_of_its_own() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def call(number: int) -> int:
        seen.append(threading.get_ident())
        return number * 2

    async with worker_thread("calls") as worker:
        assert [await worker.run(partial(call, n)) for n in range(5)] == [0, 2, 4, 6, 8]
        with pytest.raises(ZeroDivisionError):
            await worker.run(lambda: 1 / 0)
        assert await worker.run(partial(call, 7)) == 14  # (an error does not end it)
        assert len(set(seen)) == 1
        assert loop_thread not in seen
    with pytest.raises(trio.ClosedResourceError, match="calls: the worker thread has ended"):
        await worker.run(partial(call, 1))
    with trio.CancelScope() as scope:  # a cancelled caller is told so first
        scope.cancel()
        await worker.run(partial(call, 1))
    assert scope.cancelled_caught


async def test_a_worker_threads_call_runs_to_its_end_when_cancelled() -> None:
    async with worker_thread("writes") as worker:
        write, finished = await runs_to_its_end_when_cancelled(worker.run)
        with trio.CancelScope() as scope:
            scope.cancel()
            await worker.run(write)  # cancelled before it was handed over: never runs
        assert scope.cancelled_caught
        assert len(finished) == 1


async def test_a_worker_thread_opened_in_a_cancelled_scope_still_serves_shielded_calls() -> None:
    # A sink opened just as its route is cancelled still closes through its thread: the
    # thread must start even though the scope it starts in is already cancelled.
    with trio.fail_after(5), trio.CancelScope() as outer:
        outer.cancel()
        async with worker_thread("writes") as worker:
            with trio.CancelScope(shield=True):
                assert await worker.run(lambda: "written") == "written"
                await trio.sleep(0.01)  # (the thread's task has run by now)
                assert await worker.run(lambda: "again") == "again"


async def test_leaving_a_worker_threads_block_waits_for_the_call_in_progress() -> None:
    release = threading.Event()
    finished: list[str] = []

    def write() -> None:
        release.wait()
        finished.append("write")

    threading.Timer(0.2, release.set).start()
    with trio.move_on_after(0.05):  # the block is cancelled while the call runs
        async with worker_thread("writes") as worker:
            await worker.run(write)
    assert finished == ["write"], "nothing of the block outlives it"


async def test_a_caller_of_a_worker_thread_that_died_fails_instead_of_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bridges._blocking import Worker

    def dies(self: Worker) -> None:
        time.sleep(0.1)  # (long enough for the call below to be handed over)
        raise RuntimeError("no thread")

    monkeypatch.setattr(Worker, "_serve", dies)
    ran: list[str] = []
    with trio.fail_after(5), pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="no thread")):
        async with worker_thread("writes") as worker:
            with pytest.raises(
                trio.ClosedResourceError, match="writes: the worker thread has ended"
            ):
                await worker.run(lambda: ran.append("ran"))
    assert ran == []
    assert limiter().borrowed_tokens == 0


async def test_worker_threads_take_no_place_of_the_shared_limiter() -> None:
    # 16 open sinks would otherwise hold every place for as long as they are open
    release = threading.Event()
    try:
        async with trio.open_nursery() as nursery:
            for _ in range(MAX_THREADS):  # every place of the shared limiter taken
                nursery.start_soon(partial(blocking, release.wait, what="hang", abandon=True))
            await trio.sleep(0.1)
            assert limiter().borrowed_tokens == MAX_THREADS
            with trio.fail_after(5):
                async with worker_thread("writes") as worker:
                    assert await worker.run(lambda: "written") == "written"
            release.set()
    finally:
        release.set()


CTRL_C_AT_THE_HAND_OVER = """
import signal, trio
from bridges import worker_thread

class SigintAfterPut:  # Ctrl-C lands right after the call is handed over
    def __init__(self, calls):
        self.calls = calls
    def put(self, item):
        self.calls.put(item)
        if item is not None:
            signal.raise_signal(signal.SIGINT)
    def __getattr__(self, name):
        return getattr(self.calls, name)

async def main():
    async with worker_thread("writes") as worker:
        worker._calls = SigintAfterPut(worker._calls)
        print(await worker.run(lambda: "written"), flush=True)
        await trio.sleep(5)

trio.run(main)
"""


async def test_a_ctrl_c_as_a_call_is_handed_over_is_a_clean_keyboard_interrupt() -> None:
    done = await trio.run_process(
        [sys.executable, "-c", CTRL_C_AT_THE_HAND_OVER],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    stderr = done.stderr.decode()
    assert "TrioInternalError" not in stderr, stderr
    assert re.search(r"^[ |]*KeyboardInterrupt$", stderr, re.MULTILINE), stderr
    assert done.stdout == b"written\n"  # (the call ran, and its caller had its result)
