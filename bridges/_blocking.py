"""Blocking calls off the event loop, the one way endpoints make them: :func:`blocking`.

A route's event loop also carries its heart-beats, its signals and every
other route of the process, so a call that may block (a file system, a
client library without an async API, a DNS lookup) runs in a worker thread.
Two kinds of call need two rules, and the caller says which:

- ``abandon=True``: a call that changes nothing that matters if it is left
  half done (a read, a ``stat``, a connect whose socket is simply dropped).
  On cancellation or when ``timeout`` passes, the caller goes on at once
  and the thread is *abandoned*: it finishes on its own and its result is
  thrown away. The thread holds its place in the limiter until then, so
  abandoned calls that hang can never grow into unbounded threads.
- ``abandon=False`` (the default): a call that changes state (a write, an
  ``fsync``, a rename, a commit). It is never abandoned: cancellation waits
  until it returns, because going on while it still runs could interleave
  two writes or ack what is not yet written. It has no timeout: a thread
  cannot be stopped midway, and a write that returned late has still been
  made, so failing it would only repeat it. A write that hangs for good is
  what ``[bridge] stall_timeout`` and systemd's watchdog are for.

Every call of the process shares one :class:`trio.CapacityLimiter` of
:data:`MAX_THREADS` (per ``trio.run``): a slow disk or a hung peer takes at
most that many threads, and the other calls wait their turn instead of
starting more.

An endpoint that makes one blocking call after another, each short, for as
long as it is open (a producer waiting for each batch's acknowledgements)
uses a thread of its own instead, :func:`worker_thread`, for the block: a
call handed to a thread that is already running costs a fraction of
starting one through :func:`trio.to_thread.run_sync` (on a 2-CPU machine,
about 50 µs of CPU against 100 to 140, and a third less time from handing
over to the call's result). Its calls follow the rule of ``abandon=False``.
Its thread is outside the shared limiter: one per open sink, so as many
as the config has such sinks, it would otherwise hold a place for as long
as the sink is open, and 16 of them would leave none for any other call.
"""

from __future__ import annotations

import queue
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

import outcome
import trio

T = TypeVar("T")

#: The most worker threads one process's blocking calls run in at once.
MAX_THREADS: Final = 16

_limiter: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("bridges_blocking")


def limiter() -> trio.CapacityLimiter:
    """The limiter every :func:`blocking` call of this ``trio.run`` shares."""
    try:
        return _limiter.get()
    except LookupError:
        shared = trio.CapacityLimiter(MAX_THREADS)
        _limiter.set(shared)
        return shared


async def blocking(
    call: Callable[[], T],
    *,
    what: str,
    timeout: float | None = None,  # noqa: ASYNC109 (a thread cannot be cancelled: see the rules)
    abandon: bool = False,
) -> T:
    """Run ``call()`` in a worker thread and return its result.

    Args:
      call: what to run (``functools.partial`` for arguments); it must not
        touch Trio objects (use ``trio.from_thread`` for that).
      what: a few words naming the call, for the ``TimeoutError``.
      timeout: with ``abandon``, the longest the caller waits, s (None: no
        bound of its own); without, it must be None (see the module docs).
      abandon: True for a call that may be left half done (see the module
        docs): cancellation and the timeout return at once. False: the call
        always runs to its end.

    Raises:
      TimeoutError: an abandoned call did not return within ``timeout`` (it
        may still be running; its result will be thrown away).
      ValueError: a ``timeout`` for a call that is not abandoned.
      trio.Cancelled: as usual; with ``abandon=False`` only once the call returned.
      Exception: whatever ``call`` raised.
    """
    if not abandon:
        if timeout is not None:
            raise ValueError(f"{what}: a call that is not abandoned cannot have a timeout")
        return await trio.to_thread.run_sync(call, limiter=limiter())
    with trio.move_on_after(timeout if timeout is not None else float("inf")):
        return await trio.to_thread.run_sync(call, abandon_on_cancel=True, limiter=limiter())
    raise TimeoutError(f"{what}: not done within {timeout:g} s (left to finish in its thread)")


class Worker:
    """A thread of one block's own that runs the calls handed to it, one at a time,
    in order (see :func:`worker_thread`)."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._token = trio.lowlevel.current_trio_token()
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], trio.lowlevel.Task] | None] = (
            queue.SimpleQueue()
        )
        self._closed = False

    @trio.lowlevel.enable_ki_protection  # (a Ctrl-C between the hand-over and the wait
    # would leave a result to be delivered to a task no longer waiting: a TrioInternalError)
    async def run(self, call: Callable[[], T]) -> T:
        """``call()`` in the thread (after the calls handed to it before); its result.

        As :func:`blocking` with ``abandon=False``: the call always runs to its
        end, and a cancellation meanwhile is delivered at the caller's next
        checkpoint.

        Raises:
          trio.ClosedResourceError: the block has ended.
          trio.Cancelled: cancelled before the call was handed over.
          Exception: whatever ``call`` raised.
        """
        await trio.lowlevel.checkpoint_if_cancelled()  # (first: a cancelled caller gets Cancelled)
        if self._closed:
            raise trio.ClosedResourceError(f"{self._what}: the worker thread has ended")
        self._calls.put((call, trio.lowlevel.current_task()))
        result: T = await trio.lowlevel.wait_task_rescheduled(_never_abandoned)
        return result

    async def _in_thread(self) -> None:
        """Run :meth:`_serve` in a thread (of its own limiter, of one place). However
        it ends (the block's end, or a thread that would not start), a call still
        waiting fails with ClosedResourceError: no caller waits for a thread that is
        gone.

        Shielded: the block's end, and nothing else, ends the thread. A scope
        cancelled before the thread started (a sink opened as its route stops)
        would otherwise end it at once, and the block's shielded cleanup would
        find no thread to run in. The shield holds no longer than the block:
        leaving it tells the thread to stop after the call in progress.
        """
        try:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._serve, limiter=trio.CapacityLimiter(1))
        finally:
            self._closed = True
            ended = outcome.Error(
                trio.ClosedResourceError(f"{self._what}: the worker thread has ended")
            )
            while not self._calls.empty():
                job = self._calls.get_nowait()
                if job is not None:
                    trio.lowlevel.reschedule(job[1], ended)

    def _serve(self) -> None:
        """The thread: each call handed over, until the block's end says stop."""
        while (job := self._calls.get()) is not None:
            call, task = job
            self._token.run_sync_soon(trio.lowlevel.reschedule, task, outcome.capture(call))

    def _close(self) -> None:
        self._closed = True
        self._calls.put(None)


def _never_abandoned(_raise_cancel: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # (the call runs on: its result comes all the same)


@asynccontextmanager
async def worker_thread(what: str) -> AsyncIterator[Worker]:
    """A worker thread for the block, for a stream of short blocking calls (see the module).

    The thread starts at once (outside the shared limiter: see the module),
    and runs each call of :meth:`Worker.run` in turn. Leaving the block waits until
    the call in progress returns (the calls bound themselves), then the
    thread ends: nothing outlives the block.

    Args:
      what: a few words naming the calls, for errors.
    """
    worker = Worker(what)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker._in_thread, name=f"worker thread: {what}")  # noqa: SLF001
        try:
            yield worker
        finally:
            worker._close()  # noqa: SLF001
