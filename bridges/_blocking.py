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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

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
