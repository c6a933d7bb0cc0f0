"""bridges.blocking: blocking calls off the loop, abandoned or waited for, in bounded threads."""

from __future__ import annotations

import threading
import time
from functools import partial

import pytest
import trio
import trio.lowlevel

from bridges import blocking
from bridges._blocking import MAX_THREADS


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


async def test_a_call_that_is_not_abandoned_is_waited_for_even_when_cancelled() -> None:
    release = threading.Event()
    finished: list[float] = []

    def write() -> None:
        release.wait()
        finished.append(time.monotonic())

    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    with trio.move_on_after(0.05) as scope:  # cancelled while it runs
        await blocking(write, what="write")  # returns once the write did: 0.3 s
        returned = time.monotonic()
        await trio.lowlevel.checkpoint()  # and the cancellation comes at the next checkpoint
    assert scope.cancelled_caught
    assert returned - started >= 0.25
    assert finished, "the write ran to its end before cancellation was delivered"
    assert finished[0] - started >= 0.25
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
