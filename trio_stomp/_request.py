"""Request/reply: :meth:`Client.request <trio_stomp.Client.request>` and its replies.

One reply queue per client, shared by every request: each request's SEND
carries ``reply-to:/temp-queue/trio-stomp-replies`` and a ``correlation-id``
of its own, and the replies come back on one subscription, where the reader
task hands each to the request waiting for its ``correlation-id``. One queue
instead of one per request is what RabbitMQ's temp queues are made for (the
broker keeps one queue per session and name, and a SEND naming it again
costs nothing more), and it keeps a request to a single frame out.

How the reply subscription is made depends on the broker, since the two that
have ``/temp-queue/`` disagree:

- RabbitMQ subscribes the session itself on the first SEND naming the temp
  queue (subscription id ``/temp-queue/<name>``), and refuses a SUBSCRIBE to
  one with an ERROR;
- ActiveMQ (and Apollo) subscribe nobody: the session SUBSCRIBEs to the temp
  queue itself, before the first request.

So the client SUBSCRIBEs (once per connection, with the id RabbitMQ would
use, so that replies look the same either way) unless CONNECTED's
``server`` names RabbitMQ. The embedded broker takes both ways.

What a hostile or slow responder can do: a reply that never comes ends in
:class:`~trio_stomp.RequestTimeout`; a reply to a request that timed out or
was cancelled, a second reply, or one with an unknown ``correlation-id`` is
dropped by the reader as it arrives (counted in :attr:`Replies.dropped`, the
client's ``replies_unmatched``), so a flood of replies holds no memory and
never waits on the caller. Correlation ids are random (128 bits, from
:mod:`secrets`): a responder, or anyone who can send to the reply queue,
that has seen one request cannot answer another's (with ids counted up from
a prefix, one that had seen a request forged the replies to 6-8 of another
client's 200). A :class:`~trio_stomp.RequestTimeout` says how many replies
came without a matching ``correlation-id`` while it waited: a responder that
forgets to copy it fails loudly, not silently. A request
in flight when its connection drops raises
:class:`~trio_stomp.ConnectionLost`: the brokers delete a temp queue with its
connection, so its reply cannot come (its SEND is not sent again after a
reconnect either).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Final, NoReturn

import trio

from ._errors import LocalProtocolError, RequestTimeout, StompError
from ._message import AckCommand, Delivery, Message, TransactionScope
from ._sender import HeaderArg, user_headers
from .frame import SEND_RESERVED_HEADERS, Frame

if TYPE_CHECKING:
    from ._core import Core

#: The temp queue a client's replies come to (each session has its own).
REPLY_TO: Final = "/temp-queue/trio-stomp-replies"
#: Headers a request sets itself.
REQUEST_RESERVED_HEADERS: Final = SEND_RESERVED_HEADERS | {"reply-to", "correlation-id"}


class _Waiter:
    """One request's wait for its reply, or for the connection to fail."""

    __slots__ = ("error", "event", "reply")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.reply: Message | None = None
        self.error: StompError | None = None


class Replies:
    """A client's reply subscription and the requests waiting on it.

    Made by the first :meth:`Client.request <trio_stomp.Client.request>`;
    the core hands it the MESSAGE frames no subscription of the client claims
    (:meth:`deliver`) and tells it when the connection is lost (:meth:`fail`).
    """

    def __init__(self, core: Core) -> None:
        self._core = core
        self._waiters: dict[str, _Waiter] = {}
        #: The connection generation the reply subscription was made on; -1: none.
        self._subscribed = -1
        self._delivery = Delivery(_no_ack, _no_ack_batch, REPLY_TO)
        #: Replies that matched no waiting request (late, repeated, unknown or
        #: without a ``correlation-id``).
        self.dropped = 0

    @property
    def waiting(self) -> int:
        """How many requests wait for their reply now."""
        return len(self._waiters)

    async def request(
        self,
        destination: str,
        body: bytes | str,
        headers: HeaderArg,
        content_type: str | None,
        timeout: float,  # noqa: ASYNC109 (the reply's deadline is part of a request: see Client.request)
    ) -> Message:
        """See :meth:`Client.request <trio_stomp.Client.request>`."""
        core = self._core
        if isinstance(body, str):
            body = body.encode("utf-8")
            if content_type is None:
                content_type = "text/plain;charset=utf-8"
        extra = user_headers(headers, REQUEST_RESERVED_HEADERS)
        if content_type is not None and any(name == "content-type" for name, _ in extra):
            raise LocalProtocolError("content-type given both as header and argument")
        # Unguessable: whoever saw one request's id learns nothing of the next.
        correlation_id = secrets.token_urlsafe(16)
        pairs = [
            ("destination", destination),
            ("reply-to", REPLY_TO),
            ("correlation-id", correlation_id),
        ]
        if content_type is not None:
            pairs.append(("content-type", content_type))
        pairs.extend(extra)
        waiter = _Waiter()
        dropped = self.dropped
        with trio.move_on_after(timeout) as scope:
            await core.wait_connected()
            # From here to the SEND's queueing nothing awaits: the waiter, the
            # subscription and the SEND belong to one connection.
            self._subscribe()
            self._waiters[correlation_id] = waiter
            try:
                # Not replayable: its reply queue would be gone on another connection.
                await core.queue_frame("SEND", pairs, body, False, replayable=False)
                await waiter.event.wait()
            finally:
                if self._waiters.get(correlation_id) is waiter:
                    del self._waiters[correlation_id]
        if waiter.reply is not None:
            return waiter.reply
        if waiter.error is not None:
            raise waiter.error
        assert scope.cancelled_caught
        unmatched = self.dropped - dropped
        raise RequestTimeout(
            f"no reply to the request to {destination!r} within {timeout} s "
            f"(correlation-id {correlation_id}); {unmatched} "
            f"{'reply' if unmatched == 1 else 'replies'} came meanwhile without a matching "
            "correlation-id (a responder must copy the request's onto its reply)"
        )

    def _subscribe(self) -> None:
        """SUBSCRIBE to the reply queue on this connection, unless done or the broker
        does it (RabbitMQ). Queued without waiting for room, so that no request's
        SEND can overtake it."""
        core = self._core
        if self._subscribed == core.generation:
            return
        if not (core.conn.server or "").startswith("RabbitMQ/"):
            pairs = [("id", REPLY_TO), ("destination", REPLY_TO), ("ack", "auto")]
            core.send_now("SUBSCRIBE", pairs)
        self._subscribed = core.generation

    # -- what the reader task and the supervisor call: never blocks ------------

    def claims(self, frame: Frame) -> bool:
        """True when ``frame``, a MESSAGE no subscription claimed, came to the reply queue."""
        headers = frame.headers
        # (Some 1.0 brokers leave the subscription out; ActiveMQ names the temp queue.)
        return headers.get("subscription", headers.get("destination")) == REPLY_TO

    def deliver(self, frames: Sequence[Frame]) -> None:
        """Hand each reply to the request waiting for its ``correlation-id``; drop the rest."""
        waiters = self._waiters
        for frame in frames:
            waiter = waiters.pop(frame.headers.get("correlation-id", ""), None)
            if waiter is None:
                self.dropped += 1
                continue
            waiter.reply = Message(frame, self._delivery)
            waiter.event.set()

    def fail(self, error: StompError) -> None:
        """The connection is gone (and its reply queue with it): wake every request."""
        self._subscribed = -1
        waiters = list(self._waiters.values())
        self._waiters.clear()
        for waiter in waiters:
            waiter.error = error
            waiter.event.set()


def _no_ack(
    message: Message,
    command: AckCommand,
    receipt: bool,
    transaction: TransactionScope | None,
    generation: int,
) -> Awaitable[None]:
    _refuse(command)


async def _no_ack_batch(
    messages: Sequence[Message], command: AckCommand, receipt: bool, generation: int
) -> None:
    _refuse(command)


def _refuse(command: str) -> NoReturn:
    raise LocalProtocolError(f"a reply comes on an ack='auto' subscription and needs no {command}")
