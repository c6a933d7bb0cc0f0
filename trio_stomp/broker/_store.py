"""The embedded broker's durable store: queue messages in SQLite, off the event loop.

The database itself, and why it is SQLite, is :mod:`._store_database`. This
is the event loop's side of it:

- Every database call runs in one worker thread at a time
  (``trio.to_thread.run_sync``), never on the event loop. The thread is
  never abandoned: a cancelled broker waits for the commit in progress.
- Group commit: messages and acknowledgements arriving while a commit is in
  progress collect in memory and go together in the next one, so many
  senders share one fsync. A message acknowledged before its own commit
  started is never written at all (a consumer that keeps up costs no I/O).

What is stored: messages sent to queues, until they are acknowledged (or,
for ``auto`` subscriptions, delivered); durable topic subscriptions and the
messages kept for them (see :mod:`._store_durable`). Other topic messages are
never stored.
When the broker starts again, every stored message goes back to the front of
its queue in the order it was sent, marked ``redelivered:true`` (it may have
been delivered before the stop: the broker does not write deliveries).

A store that cannot be opened or written (missing permission, full disk, a
file that is not a database, another broker holding it) is a
:class:`StoreError` naming the file: the broker never falls back to memory.
A damaged one is refused with :class:`StoreDamaged` (see
:mod:`._store_database`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import trio

from ._destinations import Watcher
from ._message import Message
from ._store_database import (
    STORE_FILE,
    Companion,
    Database,
    StoreDamaged,
    StoreError,
    StoreInUse,
)
from ._store_durable import DurableChanges, DurableKey, Restored, stored_key

__all__ = ["STORE_FILE", "Store", "StoreDamaged", "StoreError", "open_data_dir", "open_store"]

log = logging.getLogger("trio_stomp.broker")

#: The longest a commit waits for more messages from connections it expects, s.
GATHER_DELAY: Final = 0.0005


def _store_error(path: Path, doing: str, exc: BaseException) -> StoreError:
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.OperationalError) and "locked" in reason:
        return StoreInUse(
            f"broker store {os.fspath(path)!r}: cannot {doing}: {reason} "
            "(is another broker using this data dir?)"
        )
    return StoreError(f"broker store {os.fspath(path)!r}: cannot {doing}: {reason}")


class Store:
    """The event-loop side of the store: what is waiting to be written, and commits.

    Created by :func:`open_store`. The router calls :meth:`add` and
    :meth:`remove`; a session that must not send a RECEIPT before the
    messages it sent are on disk compares the ticket :meth:`add` gave it with
    :attr:`durable`, and calls :meth:`watch` to hear when that changes.
    """

    def __init__(self, database: Database, restored: Restored, next_key: int) -> None:
        self.path = database.path
        #: The queue messages the store held when it was opened, oldest first
        #: (redelivered).
        self.restored = restored.messages
        #: The durable subscriptions it held, each with its messages.
        self.restored_durables = restored.durables
        #: The number of the last group known to be on disk.
        self.durable = 0
        #: Commits done since the store opened (each one fsync).
        self.commits = 0
        self._database = database
        self._next_key = next_key
        self._batch = 1  # the group now collecting
        self._adds: dict[int, Message] = {}
        self._removes: list[int] = []
        self._durables = DurableChanges()
        self._watchers: dict[Watcher, None] = {}
        self._wakeup = trio.Event()
        self._closing = False
        self._released = 0  # connections the last commit answered
        self._companions: list[Companion] = []

    def next_key(self) -> int:
        """A new key for a message about to be added."""
        key = self._next_key
        self._next_key = key + 1
        return key

    def add(self, message: Message, subscription: DurableKey | None = None) -> int:
        """Write ``message`` (its ``key`` from :meth:`next_key`) in the next group,
        as a message of the durable ``subscription`` when one is given.

        Returns:
          The group's number: the message is on disk once :attr:`durable`
          reaches it.
        """
        self._adds[message.key] = message
        if subscription is not None:
            self._durables.owners[message.key] = stored_key(subscription)
        self._wakeup.set()
        return self._batch

    def remove(self, key: int) -> None:
        """The message of ``key`` is consumed: delete it (or never write it)."""
        if self._adds.pop(key, None) is None:
            self._removes.append(key)
            self._wakeup.set()
        else:
            self._durables.owners.pop(key, None)

    def save_durable(self, key: DurableKey, destination: str) -> int:
        """Write the durable subscription ``key`` (of ``destination``) in the next group.

        Returns:
          The group's number, as :meth:`add`.
        """
        self._durables.subscriptions[key] = destination
        self._wakeup.set()
        return self._batch

    def drop_durable(self, key: DurableKey) -> int:
        """Delete the durable subscription ``key`` in the next group (its messages
        are removed one by one, :meth:`remove`)."""
        self._durables.subscriptions[key] = None
        self._wakeup.set()
        return self._batch

    async def attach(self, companion: Companion) -> None:
        """Write ``companion``'s part with every group from now on, after it loads it.

        Called before anything is added (the broker is not serving yet).
        """
        try:
            await trio.to_thread.run_sync(companion.load, self._database.connection)
        except (sqlite3.Error, OSError) as exc:
            raise _store_error(self.path, "read", exc) from None
        self._companions.append(companion)

    def watch(self, watcher: Watcher) -> None:
        """Call ``watcher.durable`` after each commit until it returns False."""
        self._watchers[watcher] = None

    def unwatch(self, watcher: Watcher) -> None:
        """Stop calling ``watcher`` (its connection is gone)."""
        self._watchers.pop(watcher, None)

    @property
    def pending(self) -> int:
        """Adds and removes waiting for the next commit."""
        return len(self._adds) + len(self._removes)

    def _waiting(self) -> bool:
        return bool(self._adds or self._removes or self._durables)

    async def write_loop(
        self,
        commit: Callable[
            [list[Message], list[int], DurableChanges, list[tuple[Companion, object]]], None
        ],
    ) -> None:
        """Commit group after group until :meth:`close_soon`, then flush and return.

        Raises:
          StoreError: a commit failed (the broker must stop: what it promised
            cannot be kept).
        """
        while True:
            if not (self._waiting() or self._closing):
                await self._wakeup.wait()
            await self._gather()
            self._wakeup = trio.Event()
            batch = self._batch
            self._batch = batch + 1
            adds = list(self._adds.values())
            removes = self._removes
            durables = self._durables
            self._adds = {}
            self._removes = []
            self._durables = DurableChanges()
            extras = [(c, taken) for c in self._companions if (taken := c.take()) is not None]
            if adds or removes or durables or extras:
                try:
                    await trio.to_thread.run_sync(commit, adds, removes, durables, extras)
                except (sqlite3.Error, OSError) as exc:
                    raise _store_error(self.path, "write", exc) from None
                self.commits += 1
            self.durable = batch
            self._released = len(self._watchers)
            for watcher in list(self._watchers):
                if not watcher.durable(batch):
                    self._watchers.pop(watcher, None)
            if self._closing and not self._waiting():
                return

    async def _gather(self) -> None:
        # Let connections whose input is already here act on it first, so that
        # their messages join this group. When the last commit answered several
        # connections, give them a moment (GATHER_DELAY at most) to send again:
        # each one that makes it shares this fsync instead of waiting for the next.
        await trio.lowlevel.cancel_shielded_checkpoint()
        expected = self._released
        if expected < 2 or self._closing or len(self._adds) >= expected:
            return
        with trio.move_on_after(GATHER_DELAY):
            while len(self._adds) < expected and not self._closing:
                self._wakeup = trio.Event()
                await self._wakeup.wait()

    def close_soon(self) -> None:
        """Write what is pending, then let :meth:`write_loop` return."""
        self._closing = True
        self._wakeup.set()


@asynccontextmanager
async def open_store(
    data_dir: str | os.PathLike[str], *, accept_damage: bool = False
) -> AsyncIterator[Store]:
    """Open the store in ``data_dir`` (created when missing) for the block.

    On opening, the store is checked (:mod:`._store_mark`): a store that
    lost or damaged messages since the broker last wrote it is refused, with
    what was lost, unless ``accept_damage``: then the damaged rows are
    dropped, the loss is logged as a warning, and the store counts on from
    there (the next start is silent).

    On leaving, what is pending is written (shielded: a cancelled broker
    still writes the acknowledgements it received) and the file is closed.

    Raises:
      StoreDamaged: the store is damaged, and ``accept_damage`` is False.
      StoreError: the store cannot be opened, or a commit failed.
    """
    path = Path(data_dir) / STORE_FILE
    try:
        database, restored, next_key = await trio.to_thread.run_sync(
            Database.open, path, accept_damage
        )
    except StoreDamaged:
        raise
    except (sqlite3.Error, OSError, ValueError, TypeError) as exc:
        raise _store_error(path, "open", exc) from None
    store = Store(database, restored, next_key)
    if database.damage is not None:
        log.warning(
            "broker store %s is damaged, started as accepted (accept_damage): %s",
            path,
            database.damage.describe(),
        )
    log.info(
        "broker store %s: %d message(s) restored (durable: on disk before each RECEIPT)",
        path,
        len(restored.messages) + sum(len(d.messages) for d in restored.durables),
    )
    failed: StoreError | None = None
    error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:

            async def write() -> None:
                # Shielded: it ends when the block does (close_soon, below), after
                # writing what is pending, also when the broker is cancelled.
                nonlocal failed
                try:
                    with trio.CancelScope(shield=True):
                        await store.write_loop(database.commit)
                except StoreError as exc:
                    failed = exc
                    nursery.cancel_scope.cancel()

            nursery.start_soon(write)
            try:
                yield store
            except BaseException as exc:
                error = exc  # re-raised below, outside the nursery (no group around it)
            finally:
                store.close_soon()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(database.close)
    if failed is not None:
        raise failed
    if error is not None:
        try:
            raise error
        finally:
            error = None


@asynccontextmanager
async def open_data_dir(
    data_dir: str | os.PathLike[str] | None, *, accept_damage: bool = False
) -> AsyncIterator[Store | None]:
    """The store of ``data_dir`` for the block (:func:`open_store`), or None without one.

    Without a data dir the broker is volatile, and this says so in the log.
    """
    if data_dir is None:
        log.info(
            "the broker is volatile: no data dir, queued messages are kept in memory "
            "only and lost when it stops"
        )
        yield None
        return
    async with open_store(data_dir, accept_damage=accept_damage) as store:
        yield store
