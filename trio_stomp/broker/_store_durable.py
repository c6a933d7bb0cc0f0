"""The durable store's part for durable topic subscriptions (see :mod:`._durable`).

Each durable subscription is a row of the ``durables`` table (client-id,
name, topic, and a CRC-32 of them); each message it holds is a row of
``messages`` like a queue message, whose ``subscription`` column names it
(JSON: client-id, name) and is covered by the row's checksum. So its
messages go through the same commits, tally and mark file as a queue's, and
a lost commit or a damaged row is found the same way
(:mod:`._store_mark`). A subscription whose own row is damaged is rebuilt
from its messages when the damage is accepted (one that held none is gone).
"""

from __future__ import annotations

import json
import sqlite3

import attrs

from ._message import Message
from ._store_mark import durable_checksum

__all__ = [
    "DurableChanges",
    "DurableKey",
    "Restored",
    "RestoredDurable",
    "StoredDurable",
    "durable_key",
    "read_durables",
    "restored",
    "stored_key",
    "write_durables",
]

#: A durable subscription's key: its client-id and its name.
DurableKey = tuple[str, str]


@attrs.frozen
class StoredDurable:
    """A durable subscription as the store keeps it (see :mod:`._durable`)."""

    client_id: str
    name: str
    destination: str


@attrs.frozen
class RestoredDurable:
    """A durable subscription found in the store, with its messages in order."""

    client_id: str
    name: str
    destination: str
    messages: list[Message]


@attrs.frozen
class Restored:
    """What the store held when it opened.

    Attributes:
      messages: queue messages, in the order they were sent.
      durables: durable subscriptions, each with what it held.
    """

    messages: list[Message]
    durables: list[RestoredDurable] = attrs.field(factory=list)


@attrs.define
class DurableChanges:
    """What one commit writes of durable subscriptions.

    Attributes:
      owners: the durable subscription (its stored key, :func:`stored_key`)
        of each message added in this commit that belongs to one.
      subscriptions: by key, the destination to write (created or changed),
        or None to delete it.
    """

    owners: dict[int, str] = attrs.field(factory=dict)
    subscriptions: dict[DurableKey, str | None] = attrs.field(factory=dict)

    def __bool__(self) -> bool:
        return bool(self.owners or self.subscriptions)


def stored_key(key: DurableKey) -> str:
    """How a message row names its durable subscription (JSON: client-id, name)."""
    return json.dumps(list(key))


def durable_key(text: str) -> DurableKey:
    """The key a message row names; ValueError or TypeError when it is not one."""
    client_id, name = json.loads(text)
    if not isinstance(client_id, str) or not isinstance(name, str):
        raise TypeError("not a durable subscription's key")
    return client_id, name


def restored(messages: list[tuple[Message, str]], durables: list[StoredDurable]) -> Restored:
    """Queue messages apart, and each durable subscription with its own (a
    subscription whose record was damaged is rebuilt from its messages)."""
    found: dict[DurableKey, RestoredDurable] = {
        (d.client_id, d.name): RestoredDurable(d.client_id, d.name, d.destination, [])
        for d in durables
    }
    queued: list[Message] = []
    for message, owner in messages:
        if not owner:
            queued.append(message)
            continue
        key = durable_key(owner)
        durable = found.get(key)
        if durable is None:
            durable = found[key] = RestoredDurable(*key, message.destination, [])
        durable.messages.append(message)
    return Restored(queued, list(found.values()))


def write_durables(connection: sqlite3.Connection, changes: DurableChanges) -> None:
    for (client_id, name), destination in changes.subscriptions.items():
        if destination is None:
            connection.execute(
                "DELETE FROM durables WHERE client_id = ? AND name = ?", (client_id, name)
            )
        else:
            connection.execute(
                "INSERT OR REPLACE INTO durables VALUES (?, ?, ?, ?)",
                (client_id, name, destination, durable_checksum(client_id, name, destination)),
            )


def read_durables(connection: sqlite3.Connection) -> tuple[list[StoredDurable], list[DurableKey]]:
    """Every durable subscription whose checksum holds; and the keys of those that fail."""
    found: list[StoredDurable] = []
    damaged: list[DurableKey] = []
    query = "SELECT client_id, name, destination, checksum FROM durables ORDER BY rowid"
    for client_id, name, destination, checksum in connection.execute(query):
        if not all(isinstance(v, str) for v in (client_id, name, destination)) or (
            durable_checksum(client_id, name, destination) != checksum
        ):
            damaged.append((client_id, name))
            continue
        found.append(StoredDurable(client_id, name, destination))
    return found, damaged
