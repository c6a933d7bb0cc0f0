"""One session's deliveries that wait for an ACK or NACK, sans-IO.

A delivery to a ``client`` or ``client-individual`` subscription stays
pending until the client settles it: an ACK (it is consumed, for good) or a
NACK (it goes back to the front of its queue, redelivered). STOMP 1.2 names
a delivery by its MESSAGE's ``ack`` header, 1.0 and 1.1 by its
``message-id`` (and, in 1.1, its ``subscription``). A ``client`` ACK or NACK
settles every delivery of its subscription up to the one it names.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..frame import Frame
from ._destinations import DurableRouting, Router, Subscription
from ._message import Message, Pending
from ._transactions import ClientError


class Unacked:
    """The deliveries of one session that wait for an ACK or NACK.

    Args:
      router: the broker's destinations: what is acknowledged is consumed there.
    """

    def __init__(self, router: Router[DurableRouting]) -> None:
        self._router = router
        self._acks: dict[str, Pending] = {}
        self._subs: dict[str, Subscription] = {}
        self._counter = 0

    def record(self, sub: Subscription, message: Message, *, by_ack_id: bool) -> str:
        """``message`` goes to ``sub`` and waits for its ACK: returns its ack id.

        With ``by_ack_id`` (STOMP 1.2), the client names it by that id.
        """
        self._counter += 1
        ack_id = str(self._counter)
        pending = Pending(message, ack_id)
        sub.unacked[message.message_id] = pending
        if by_ack_id:
            self._acks[ack_id] = pending
            self._subs[ack_id] = sub
        return ack_id

    def find(
        self, frame: Frame, version: str, subscriptions: Mapping[str, Subscription]
    ) -> tuple[Subscription, str]:
        """The subscription and message id an ACK or NACK ``frame`` names.

        Raises:
          ClientError: a header is missing, or it names nothing pending.
        """
        headers = frame.headers
        command = frame.command
        if version == "1.2":
            ack_id = headers.get("id")
            if ack_id is None:
                raise ClientError(f"{command} without id")
            pending = self._acks.get(ack_id)
            sub = self._subs.get(ack_id)
            if pending is None or sub is None:
                raise ClientError(
                    "unknown ack id", f"{command} of {ack_id!r}, which is not pending"
                )
            return sub, pending.message.message_id
        message_id = headers.get("message-id")
        if message_id is None:
            raise ClientError(f"{command} without message-id")
        sub_id = headers.get("subscription")
        if sub_id is None and version != "1.0":
            raise ClientError(f"{command} without subscription")
        if sub_id is not None:
            found = subscriptions.get(sub_id)
            if found is None:
                raise ClientError(
                    "unknown subscription", f"{command} names no subscription {sub_id!r}"
                )
            if message_id in found.unacked:
                return found, message_id
        else:
            for found in subscriptions.values():
                if message_id in found.unacked:
                    return found, message_id
        raise ClientError(
            "unknown message-id", f"{command} of {message_id!r}, which is not pending"
        )

    def settle(self, sub: Subscription, message_id: str, *, nack: bool) -> None:
        """ACK (consume) or NACK (requeue) the delivery of ``message_id`` to ``sub``,
        and with a ``client`` subscription every one before it."""
        if sub.ack_mode == "client":
            # Cumulative: this message and every one delivered before it.
            done: list[Pending] = []
            unacked = sub.unacked
            while True:
                key, item = unacked.popitem(last=False)
                done.append(item)
                if key == message_id:
                    break
        else:
            done = [sub.unacked.pop(message_id)]
        for item in done:
            self._acks.pop(item.ack_id, None)
            self._subs.pop(item.ack_id, None)
        if nack:
            sub.queue.requeue([item.message for item in done])
        else:
            consumed = self._router.consumed
            for item in done:
                consumed(item.message)
            sub.queue.dispatch()

    def forget(self, sub: Subscription) -> None:
        """``sub`` ended: its deliveries are no longer named by ack id."""
        for pending in sub.unacked.values():
            self._acks.pop(pending.ack_id, None)
            self._subs.pop(pending.ack_id, None)

    def clear(self) -> None:
        """The session ended: nothing is named any more."""
        self._acks.clear()
        self._subs.clear()
