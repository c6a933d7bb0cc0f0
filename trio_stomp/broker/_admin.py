"""Working on a stopped broker's data dir: list and remove durable subscriptions.

Both open the store as the broker does (:func:`~._store.open_store`: the same
damage checks, the same exclusive lock, so a broker running on the data dir
makes them fail with a :class:`~._store.StoreError` instead of racing it), and
a removal goes through the store's own commit (tally, mark file, fsync).
"""

from __future__ import annotations

import os

import attrs

from ._store import open_store

__all__ = ["DurableSubscriptionInfo", "list_durable_subscriptions", "remove_durable_subscription"]


@attrs.frozen
class DurableSubscriptionInfo:
    """A durable topic subscription kept in a broker's data dir.

    Attributes:
      client_id: the CONNECT ``client-id`` that names it.
      name: its ``activemq.subscriptionName``.
      destination: the topic it keeps messages of.
      messages: how many messages it holds.
      size: their bytes (the broker's estimate: bodies plus headers).
    """

    client_id: str
    name: str
    destination: str
    messages: int
    size: int


async def list_durable_subscriptions(
    data_dir: str | os.PathLike[str], *, accept_damage: bool = False
) -> list[DurableSubscriptionInfo]:
    """The durable subscriptions a stopped broker's ``data_dir`` keeps, by client-id and name.

    Raises:
      StoreDamaged: the store is damaged and ``accept_damage`` is False.
      StoreInUse: a broker is running on it (it holds the store's lock).
      StoreError: it cannot be opened.
    """
    async with open_store(data_dir, accept_damage=accept_damage) as store:
        found = [
            DurableSubscriptionInfo(
                durable.client_id,
                durable.name,
                durable.destination,
                len(durable.messages),
                sum(message.size for message in durable.messages),
            )
            for durable in store.restored_durables
        ]
    return sorted(found, key=lambda info: (info.client_id, info.name))


async def remove_durable_subscription(
    data_dir: str | os.PathLike[str], client_id: str, name: str, *, accept_damage: bool = False
) -> int:
    """Remove a durable subscription, and what it holds, from a stopped broker's ``data_dir``.

    Returns:
      How many messages it held (now deleted, on disk when this returns).

    Raises:
      LookupError: there is no such subscription.
      StoreDamaged: the store is damaged and ``accept_damage`` is False.
      StoreInUse: a broker is running on it (it holds the store's lock).
      StoreError: it cannot be opened or written.
    """
    async with open_store(data_dir, accept_damage=accept_damage) as store:
        for durable in store.restored_durables:
            if (durable.client_id, durable.name) == (client_id, name):
                for message in durable.messages:
                    store.remove(message.key)
                store.drop_durable((client_id, name))
                return len(durable.messages)
    raise LookupError(f"no durable subscription {name!r} of client-id {client_id!r}")
