"""Process-wide resources that routes share: one asyncio loop, one HTTP server per address.

A bridge process runs many routes, each in its own nursery, restarted on its
own after a failure. Some things must exist once per process whatever the
routes do: the trio-asyncio loop that asyncio-only client libraries run on,
the HTTP server that every webhook route on one address mounts its path on,
the embedded broker. :class:`Shared` holds them for the process: the first
route that needs one opens it inside the Shared's own nursery, later routes
get the same value, and all of them close when the process's ``async with
open_shared()`` block ends (after every route has stopped). A route that
restarts therefore never takes a shared resource down with it.

Endpoints do not need to know whether they run inside a process:
:func:`bridges.shared_resource` (beside :class:`~bridges.Context`, which
carries the route's :class:`Shared`) uses it when there is one, and otherwise
opens the resource for the caller's own ``async with`` (tests, a
:class:`~bridges.Route` run by hand). This module knows nothing of endpoints.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import trio

T = TypeVar("T")

Opener = Callable[[], AbstractAsyncContextManager[T]]


class _Entry:
    """One resource: opening (``ready`` not set), open (``value``), or failed to open."""

    __slots__ = ("error", "ready", "value")

    def __init__(self) -> None:
        self.ready = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class Shared:
    """Resources opened once per process and kept until :func:`open_shared` ends.

    Build it with :func:`open_shared`; endpoints reach it through
    :func:`bridges.shared_resource`.
    """

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._entries: dict[Hashable, _Entry] = {}
        self._closed = False

    def provide(self, key: Hashable, value: object) -> None:
        """Make ``value`` (opened by the process itself, e.g. the embedded broker) known as ``key``.

        Raises:
          ValueError: ``key`` is already taken.
        """
        if key in self._entries:
            raise ValueError(f"shared resource {key!r} is already provided")
        entry = _Entry()
        entry.value = value
        entry.ready.set()
        self._entries[key] = entry

    def get(self, key: Hashable) -> Any:
        """The value provided or opened as ``key``, or None when there is none (yet)."""
        entry = self._entries.get(key)
        if entry is None or not entry.ready.is_set() or entry.error is not None:
            return None
        return entry.value

    @asynccontextmanager
    async def use(self, key: Hashable, open: Opener[T]) -> AsyncIterator[T]:
        """The resource ``key``, opened with ``open()`` by its first user.

        The resource stays open after the block (until the process's
        :func:`open_shared` ends), so routes that come and go share it.
        Concurrent first users wait for one opening. If opening fails, the
        error is raised to every caller waiting on that attempt, and the next
        ``use`` tries again.

        Raises:
          trio.ClosedResourceError: the process is shutting down.
        """
        entry = self._entries.get(key)
        if entry is None:
            if self._closed:
                raise trio.ClosedResourceError("the bridge process is shutting down")
            entry = self._entries[key] = _Entry()
            try:
                entry.value = await self._nursery.start(self._hold, open)
            except BaseException as exc:
                entry.error = exc
                del self._entries[key]
                entry.ready.set()
                raise
            entry.ready.set()
        else:
            await entry.ready.wait()
            if entry.error is not None:
                raise RuntimeError(f"opening shared resource {key!r} failed") from entry.error
        yield entry.value

    async def _hold(
        self, open: Opener[T], task_status: trio.TaskStatus[T] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with open() as value:
            task_status.started(value)
            await trio.sleep_forever()

    def close(self) -> None:
        """Refuse new resources and close every open one (:func:`open_shared` calls it)."""
        self._closed = True
        self._nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_shared() -> AsyncIterator[Shared]:
    """A :class:`Shared` for one process; leaving the block closes every resource it opened.

    Open it around the routes: resources must outlive every route that uses
    them, so leave this block only after the routes have stopped.
    """
    async with trio.open_nursery() as nursery:
        shared = Shared(nursery)
        try:
            yield shared
        finally:
            # Closing is cancelling the holders: each leaves its resource's own
            # ``async with``, which does the resource's (shielded) cleanup.
            shared.close()
