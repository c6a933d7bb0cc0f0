"""A batch of confirmed publishes in one asyncio task: aiormq's ``basic_publish``, stepped in place.

aiormq's :meth:`aiormq.Channel.basic_publish` sends a message and then, in the
same coroutine, waits for the broker's confirmation of it. Publishing a batch
without a round trip per message therefore takes a task per message (aio-pika's
way: ``gather`` the publishes). On asyncio's own loop a task is cheap. On the
trio-asyncio loop every asyncio callback is a Trio checkpoint, and a gathered
batch costs about 15 callbacks per message (counted: the task's first step;
wake-ups for the channel's lock, which a publish holds until its frames are
written, for room in the connection's write queue of 10 frames, for the drain
and for the confirmation; gather's completion callback). That held the ``amqp``
sink at half of aio-pika's rate on asyncio.

:func:`publish_confirmed` runs the very same ``basic_publish`` coroutines, one
after the other, inside the calling task, and keeps them side by side the way
the nats sink keeps its publish acks:

1. each coroutine is stepped until it waits for its own confirmation, the future
   aiormq has just filed in ``channel.confirmations`` under the delivery tag it
   took (``channel.delivery_tag``); there it is set aside. Whatever it waits for
   before that (room in the write queue; the channel lock, if another task
   publishes on the channel too) the caller awaits on its behalf and steps it
   on, so it never holds the lock while set aside. (If the channel closes
   meanwhile nobody may ever make room: that publish then fails with the
   reason, as do the ones not yet started, as aio-pika fails a publish on a
   closed channel.) ``wait=False``: no drain future per publish, the
   confirmation says more than a flushed socket;
2. the confirmations are then awaited as a set, in delivery-tag order, and each
   coroutine is stepped to its end. A confirmation that is already there when
   its turn comes (RabbitMQ acks runs of tags with one ``multiple`` ack) costs
   no wait at all.

What each publish returns or raises is what ``basic_publish`` itself returns or
raises: nothing of the protocol (delivery tags, returns matched by message id,
nacks, a closing channel failing every pending confirmation) is done here.
About 5 asyncio callbacks per message remain, all aiormq's own (the
confirmation future's done callbacks and its per-tag ``multiple`` ack).

Being cancelled (the sink's confirm timeout, the route stopping) cancels every
unfinished publish as asyncio cancels a task: what it waits for is cancelled and
``CancelledError`` is thrown into it, so aiormq's own cleanup runs (a publish
whose frames were never queued gives its delivery tag back).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

import aiormq
import attrs

__all__ = ["Publish", "publish_confirmed"]


@attrs.frozen
class Publish:
    """One ``basic.publish`` (always ``mandatory``: an unroutable message comes back)."""

    exchange: str
    routing_key: str
    body: bytes
    properties: aiormq.spec.Basic.Properties


async def publish_confirmed(channel: aiormq.Channel, publishes: Sequence[Publish]) -> list[object]:
    """Publish each of ``publishes``, then wait until the broker has answered every one.

    Returns, per publish in order, what ``channel.basic_publish`` returned (the
    ``Basic.Ack`` frame on a confirm-mode channel; the returned message if the
    channel does not raise on returns) or the exception it raised
    (:class:`aiormq.exceptions.PublishError` for a message the broker returned,
    :class:`aiormq.exceptions.DeliveryError` for a nack, the channel's or the
    connection's error when it closed). A publish not started, or stopped
    waiting for room to send, because the channel had closed has the reason it
    closed (as aio-pika's ``Exchange.publish``, which checks first). Raises
    only when cancelled.
    """
    outcomes: list[object] = [None] * len(publishes)
    stepped: list[tuple[int, _Stepped]] = []
    closing: asyncio.Future[Any] | None = None
    try:
        for index, publish in enumerate(publishes):
            if channel.is_closed:
                outcomes[index] = _closed(channel)
                continue
            one = _Stepped(
                channel.basic_publish(
                    publish.body,
                    exchange=publish.exchange,
                    routing_key=publish.routing_key,
                    properties=publish.properties,
                    mandatory=True,
                    wait=False,
                )
            )
            stepped.append((index, one))
            one.step()
            # Until it waits for its confirmation it may hold the channel's lock:
            # see it through what it waits for first (room in the write queue),
            # unless the channel closes meanwhile (nobody may ever make room).
            while not one.done and not _is_confirmation(channel, one.awaiting):
                closing = closing or channel.closing
                await one.wait(closing)
                if one.ready:
                    one.step()
                else:
                    one.abandon(_closed(channel))
        for _, one in stepped:
            while not one.done:
                await one.wait()
                one.step()
        for index, one in stepped:
            outcomes[index] = one.outcome
        return outcomes
    finally:
        for _, one in stepped:
            one.abandon()
        if closing is not None:
            closing.cancel()  # (only our observer of it: see aiormq's Base.closing)


def _is_confirmation(channel: aiormq.Channel, future: asyncio.Future[Any] | None) -> bool:
    """``future`` is the confirmation of the publish that took the channel's last delivery tag."""
    return future is not None and channel.confirmations.get(channel.delivery_tag) is future


def _closed(channel: aiormq.Channel) -> Exception:
    """Why ``channel`` (closed) closed, as the exception a publish on it gets."""
    closing = channel.closing
    reason = None if closing.cancelled() else closing.exception()
    if isinstance(reason, Exception):
        return reason
    return aiormq.exceptions.ChannelInvalidStateError(f"{channel!r} closed")


class _Stepped:
    """A coroutine run inside the caller's task, one step at a time (as a Task would run it).

    After :meth:`step` it is either ``done`` (``outcome`` is its result or the
    exception it raised) or waiting for ``awaiting`` (``None``: a bare yield,
    ``asyncio.sleep(0)``). It is stepped again only once that is ``ready``.
    """

    __slots__ = ("_coro", "awaiting", "done", "outcome")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.awaiting: asyncio.Future[Any] | None = None
        self.done = False
        self.outcome: object = None

    @property
    def ready(self) -> bool:
        return self.awaiting is None or self.awaiting.done()

    def step(self) -> None:
        try:
            yielded = self._coro.send(None)
        except StopIteration as stop:
            self.done, self.outcome = True, stop.value
        except (Exception, asyncio.CancelledError) as exc:
            self.done, self.outcome = True, exc
        else:
            if yielded is not None and not asyncio.isfuture(yielded):
                raise RuntimeError(f"a publish yielded {yielded!r}, not a future")
            self.awaiting = yielded

    async def wait(self, closing: asyncio.Future[Any] | None = None) -> None:
        """Until it is ``ready`` or ``closing`` is done (what it awaits keeps its result for it)."""
        future = self.awaiting
        if future is None:
            await asyncio.sleep(0)
        elif not future.done():
            waits = (future,) if closing is None else (future, closing)
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)

    def abandon(self, outcome: Exception | None = None) -> None:
        """Cancel it if it has not finished, as ``Task.cancel()`` would, and let it clean up.

        Its outcome is then ``outcome`` (default: the cancellation).
        """
        if self.done:
            return
        self.done = True
        self.outcome = outcome if outcome is not None else asyncio.CancelledError()
        if self.awaiting is not None:
            self.awaiting.cancel()
        try:
            self._coro.throw(asyncio.CancelledError())
        except (Exception, asyncio.CancelledError):
            pass  # (ended, as it should, by the cancellation or by an error of its own)
        else:
            self._coro.close()  # it awaited again while cancelled: no further
