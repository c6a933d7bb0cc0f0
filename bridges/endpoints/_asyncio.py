"""The one way asyncio-only client libraries run in a bridge: trio-asyncio, one loop per process.

nats-py and aiomqtt speak asyncio only. A bridge runs them on a
trio-asyncio loop: an asyncio event loop whose callbacks run inside Trio, in
the same thread, so no thread or foreign loop outlives anything. There is ONE
such loop per bridge process, shared by every route (key
:data:`LOOP_KEY` of :class:`bridges.Shared`): the first route that needs it
opens it inside the process's shared nursery, and it closes (cancelling any
asyncio task left on it) when the process's ``open_shared()`` block ends,
after every route has stopped. Outside ``bridges run`` (a test, a Route run
by hand) :func:`asyncio_loop` opens a private loop for the caller's own
``async with``.

Why not ``trio_asyncio.aio_as_trio(fn)(...)`` directly: trio-asyncio finds
its loop through a context variable that ``open_loop()`` sets in the task that
opened it. The shared loop is opened by a task of the process's nursery, so a
route's tasks (started elsewhere) do not see it, and ``aio_as_trio`` without
``loop=`` fails there (``'NoneType' object has no attribute
'run_aio_coroutine'``). Asyncio code itself is fine: its callbacks run in the
loop's own Trio task, where the variable is set. :class:`AsyncioLoop`
therefore carries the loop explicitly, and every call into a library goes
through it, including synchronous calls that create futures
(:meth:`AsyncioLoop.call`).

Cancellation is mapped both ways:

- Trio -> asyncio: cancelling the Trio caller cancels the asyncio task and
  waits for it to finish (so the library's own cleanup runs), then raises
  :class:`trio.Cancelled`. Nothing is left running on the loop.
- asyncio -> Trio: an asyncio task that ends cancelled while the Trio caller
  was not (the library cancelled it, or the loop is shutting down) raises
  :class:`trio.BrokenResourceError`, an ordinary failure the engine retries,
  never a bare ``asyncio.CancelledError`` that would look like neither. A
  loop that has closed raises :class:`trio.ClosedResourceError`.
- asyncio code that hands items to Trio (:meth:`AsyncioLoop.channel`) waits
  for room in a bounded Trio channel, and is cancelled like any asyncio
  task; a Trio receiver that has gone away raises
  :class:`trio.BrokenResourceError` in the asyncio sender.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, Generic, ParamSpec, TypeVar, cast

import attrs
import trio
import trio_asyncio  # type: ignore[import-untyped]  # trio-asyncio ships no type hints

from bridges import Context, shared_resource
from trio_stomp.util import unwrap_group

T = TypeVar("T")
P = ParamSpec("P")

#: The key of the process's asyncio loop in :class:`bridges.Shared`.
LOOP_KEY: Final = "asyncio-loop"
#: Bound on one :meth:`Batcher.flush`, s.
FLUSH_TIMEOUT: Final = 10.0

__all__ = ["LOOP_KEY", "AsyncioLoop", "AsyncioSender", "Batcher", "asyncio_loop"]


@asynccontextmanager
async def _open_loop() -> AsyncIterator[AsyncioLoop]:
    try:
        async with trio_asyncio.open_loop() as loop:
            yield AsyncioLoop(loop)
    except BaseExceptionGroup as group:
        # open_loop's nurseries wrap what the block raised: the caller of a
        # private loop sees the error itself, as with a shared one.
        error = unwrap_group(group)
        if error is group:
            raise
        raise error from error.__cause__


def asyncio_loop(context: Context) -> AbstractAsyncContextManager[AsyncioLoop]:
    """The process's asyncio loop (opened by its first user), or a private one outside a process.

    Use it around everything an endpoint does with an asyncio library::

        async with asyncio_loop(self.context) as aio:
            nc = await aio.run(nats.connect, url)

    Leaving the block does not close a shared loop: it closes with the
    process. Close the library's own connection before leaving.
    """
    return shared_resource(context, LOOP_KEY, _open_loop)


@attrs.frozen
class AsyncioLoop:
    """A running trio-asyncio loop, usable from any Trio task.

    Attributes:
      loop: the ``trio_asyncio`` event loop (an :class:`asyncio.AbstractEventLoop`).
    """

    loop: Any

    async def run(
        self, fn: Callable[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``await fn(*args, **kwargs)`` as an asyncio task on this loop; its result or error.

        The coroutine is created inside the loop (not in the Trio caller), so
        code that looks up the running loop while it is being set up finds
        this one.

        Raises:
          trio.Cancelled: the Trio caller was cancelled (the asyncio task was
            cancelled and has finished).
          trio.BrokenResourceError: the asyncio task was cancelled from the
            asyncio side.
          trio.ClosedResourceError: the loop has closed.
          Exception: whatever ``fn`` raised.
        """

        async def call() -> T:
            return await fn(*args, **kwargs)

        return await self._await(call())

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``, a synchronous library call, made inside the loop.

        For calls that create futures or tasks (``asyncio.get_running_loop()``
        fails in a plain Trio task of a route).
        """

        async def call() -> T:
            return fn(*args, **kwargs)

        return await self._await(call())

    async def iterate(self, iterable: AsyncIterable[T]) -> AsyncIterator[T]:
        """The items of an asyncio async iterator, each ``__anext__`` run on this loop.

        Cancelling the Trio consumer cancels the pending ``__anext__`` (an
        async generator sees ``CancelledError`` at its ``await``). Close
        what the iterator belongs to (a queue, a subscription) to end it.
        """
        iterator = await self.call(aiter, iterable)
        while True:
            item = await self.run(_anext, iterator)
            if item is _END:
                return
            yield cast("T", item)

    def channel(self, max_buffer: int) -> tuple[AsyncioSender[T], trio.MemoryReceiveChannel[T]]:
        """A bounded hand-off from asyncio code (a library's callback) to Trio.

        Returns:
          ``(sender, receiver)``: asyncio code awaits ``sender(item)``, which
          returns when the item is in the buffer (at once when there is
          room, else when the Trio side has made room: backpressure reaches
          the library's callback, and through it the server's flow control).
          Trio code receives from ``receiver``. Closing ``receiver`` makes
          later sends raise :class:`trio.BrokenResourceError`. Annotate the
          pair where you unpack it: ``sender: AsyncioSender[Msg]``.
        """
        send, receive = trio.open_memory_channel[T](max_buffer)
        return AsyncioSender(self.loop, send), receive

    async def _await(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            future = asyncio.ensure_future(coro, loop=self.loop)
        except RuntimeError as exc:
            coro.close()
            raise trio.ClosedResourceError(f"the asyncio loop is closed ({exc})") from exc
        try:
            result: T = await trio_asyncio.run_aio_future(future)
        except asyncio.CancelledError as exc:
            # Cancelled by the Trio caller: run_aio_future raised trio.Cancelled
            # instead. Here the asyncio side did it on its own.
            raise trio.BrokenResourceError(
                "the asyncio task was cancelled (its loop is closing, or the library stopped it)"
            ) from exc
        return result


_END: Final = object()


async def _anext(iterator: AsyncIterator[object]) -> object:
    # StopAsyncIteration must not escape an asyncio task: it becomes a marker here.
    try:
        return await anext(iterator)
    except StopAsyncIteration:
        return _END


class AsyncioSender(Generic[T]):
    """The asyncio end of :meth:`AsyncioLoop.channel`: ``await sender(item)``."""

    __slots__ = ("_loop", "_send")

    def __init__(self, loop: Any, send: trio.MemorySendChannel[T]) -> None:
        self._loop = loop
        self._send = send

    def __call__(self, item: T) -> Awaitable[None]:
        """An asyncio awaitable that puts ``item`` in the Trio buffer, waiting for room.

        Asyncio callbacks run inside the loop's own Trio task, so a buffer
        with room takes the item synchronously; only a full buffer costs a
        Trio task (``trio_as_future``), cancelled with the awaiting asyncio
        task.
        """
        try:
            self._send.send_nowait(item)
        except trio.WouldBlock:
            future: Awaitable[None] = self._loop.trio_as_future(self._send.send, item)
            return future
        done: asyncio.Future[None] = self._loop.create_future()
        done.set_result(None)
        return done

    def close(self) -> None:
        """No more items: the Trio receiver gets :class:`trio.EndOfChannel` after the buffer."""
        self._send.close()


class Batcher(Generic[T]):
    """Items put from Trio (acks, say), handed to an asyncio coroutine in batches.

    The engine settles envelopes one by one; a crossing into asyncio per ack
    would cost an asyncio task each. :meth:`put` only records the item (it
    never waits, so an envelope's ``ack()`` cannot be cancelled half-way);
    :meth:`run`, a task of the endpoint's nursery, hands everything recorded
    since its last turn to ``send`` in one asyncio call. Flushes never overlap
    (a lock), so ``send`` sees items in the order they were put.

    An error of ``send`` ends :meth:`run` with that error: the endpoint fails
    and its route restarts, so the server redelivers what was not settled.
    """

    __slots__ = ("_aio", "_items", "_lock", "_send", "_wake")

    def __init__(
        self, aio: AsyncioLoop, send: Callable[[list[T]], Coroutine[Any, Any, None]]
    ) -> None:
        self._aio = aio
        self._send = send
        self._items: list[T] = []
        self._wake = trio.Event()
        self._lock = trio.Lock()

    @property
    def pending(self) -> int:
        """Items put and not yet handed to ``send``."""
        return len(self._items)

    def put(self, item: T) -> None:
        """Record ``item``; the next turn of :meth:`run` sends it."""
        self._items.append(item)
        self._wake.set()

    async def run(self) -> None:
        """Send batches as items come, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await self.flush()

    async def flush(self) -> None:
        """Send everything recorded so far (after any flush already under way).

        Shielded and bounded (:data:`FLUSH_TIMEOUT`): acks taken off the list
        must reach the wire even when the endpoint is being cancelled, or the
        server would hand out again what the sink already holds.
        """
        async with self._lock:
            items, self._items = self._items, []
            if items:
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + FLUSH_TIMEOUT
                    await self._aio.run(self._send, items)
                if scope.cancelled_caught:
                    raise trio.BrokenResourceError(
                        f"settling {len(items)} message(s) took over {FLUSH_TIMEOUT:g} s"
                    )
