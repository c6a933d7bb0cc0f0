"""The client: :class:`Client`, the handle :func:`connect` and :func:`wrap_stream` give.

It is a thin front on a :class:`~trio_stomp._core.Core` (one session across
its connections): sending, and making the subscriptions and transactions that
own their own state (:mod:`._subscription`, :mod:`._transaction`).
"""

from __future__ import annotations

from ._core import Core
from ._message import Message
from ._request import Replies
from ._sender import HeaderArg, user_headers
from ._subscription import Subscription, SubscriptionState
from ._transaction import Transaction
from .frame import SUBSCRIBE_RESERVED_HEADERS


class Client:
    """A STOMP session. Get one from :func:`connect` or :func:`wrap_stream`.

    Attributes:
      version: the negotiated STOMP version ("1.0", "1.1" or "1.2").
      server: the broker's ``server`` header from CONNECTED, or None.
      session: the broker's ``session`` header from CONNECTED, or None.
      heartbeat: the negotiated ``(send_every, expect_every)`` in seconds (0: off).
      url: the broker the session is connected to now.
      reconnects: how many times the connection was restored.
      replies_unmatched: replies to :meth:`request` that matched no waiting
        request (late, repeated, forged, or without a ``correlation-id``)
        and were dropped, since the client started.
    """

    def __init__(self, core: Core) -> None:
        self._core = core
        self._replies: Replies | None = None

    @property
    def version(self) -> str:
        return self._core.conn.version

    @property
    def server(self) -> str | None:
        return self._core.conn.server

    @property
    def session(self) -> str | None:
        return self._core.conn.session

    @property
    def heartbeat(self) -> tuple[float, float]:
        return self._core.conn.heartbeat

    @property
    def url(self) -> str:
        return self._core.conn.url

    @property
    def reconnects(self) -> int:
        return self._core.reconnects

    @property
    def replies_unmatched(self) -> int:
        replies = self._replies
        return 0 if replies is None else replies.dropped

    def __repr__(self) -> str:
        return self._core.describe()

    async def send(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        headers: HeaderArg = None,
        content_type: str | None = None,
        receipt: bool = False,
    ) -> None:
        """Send a message to ``destination``.

        A ``str`` body is encoded as UTF-8 and, unless ``content_type`` says
        otherwise, labelled ``text/plain;charset=utf-8``.

        Returns once the frame is queued for the socket (with backpressure when
        the socket is slower than the sender). With ``receipt=True`` it
        returns only once the broker has confirmed it with a RECEIPT; with a
        reconnect policy, a SEND whose receipt had not come when the
        connection dropped is sent again on the next one (at least once).

        A send without a receipt that has returned reports a later failure
        of its connection at the ``async with`` of :func:`connect`: the
        block is cancelled and the error raised there. With a reconnect
        policy, a frame not yet written whole (still queued, or in a write
        that broke) is sent again on the next connection instead, and the
        error reaches the ``async with`` only when the policy gives up.
        Bytes the socket took are not confirmed by anything but a receipt.

        Raises:
          LocalProtocolError: a header that cannot be sent (NUL, a reserved
            name); nothing was sent.
          ServerError, ConnectionLost: the connection failed (for good, when
            reconnecting).
          ClientClosed: the client was closed.
        """
        await self._core.send_message(destination, body, headers, content_type, receipt, None)

    async def request(
        self,
        destination: str,
        body: bytes | str = b"",
        *,
        timeout: float,  # noqa: ASYNC109 (why: see "A timeout" in the docstring)
        headers: HeaderArg = None,
        content_type: str | None = None,
    ) -> Message:
        """Send a request to ``destination`` and return its one reply.

        The SEND carries ``reply-to`` (a temp queue of this client's) and a
        ``correlation-id`` of its own (random, 128 bits: nobody who saw one
        request can answer another); a responder answers by sending to the
        ``reply-to`` of the MESSAGE it got, with the same ``correlation-id``.
        The first reply with that id is returned; any later one is dropped.
        ``body``, ``headers`` and ``content_type`` are as for :meth:`send`.

        Every request of a client shares one reply subscription, made by
        the first request on each connection (RabbitMQ makes it itself) and
        kept until the client closes; the reader task hands each reply to
        its request, and drops replies nobody waits for (late, repeated or
        unknown) as they arrive. So a request that times out or is
        cancelled leaves nothing behind, and a flood of replies costs no
        memory. Works with RabbitMQ's and ActiveMQ's ``/temp-queue/`` and the
        embedded broker's.

        A timeout is an argument here, against the house rule of timeouts in
        the caller's ``fail_after``: a reply that never comes is the normal
        failure of a request, so every call must say how long it waits, and
        the error says which request it was (a ``fail_after`` around it still
        works, and raises :class:`trio.TooSlowError` as usual).

        Args:
          timeout: how long to wait for the reply, in seconds (sending
            included); ``math.inf`` waits for ever.

        Raises:
          RequestTimeout: no reply came within ``timeout`` (also a
            :class:`trio.TooSlowError`); its message says how many replies
            came meanwhile without a matching ``correlation-id`` (counted in
            :attr:`replies_unmatched`).
          ConnectionLost: the connection dropped while the request was in
            flight (its reply queue went with it; the request is not sent
            again on the next connection).
          LocalProtocolError: a header that cannot be sent, or one a request
            sets itself (``reply-to``, ``correlation-id``); nothing was sent.
          ServerError, ClientClosed: as for :meth:`send`.
          ValueError: ``timeout`` is negative or NaN.
        """
        core = self._core
        core.check_open()
        replies = self._replies
        if replies is None:
            replies = self._replies = core.replies = Replies(core)
        return await replies.request(destination, body, headers, content_type, timeout)

    def subscribe(
        self,
        destination: str,
        *,
        ack: str = "auto",
        headers: HeaderArg = None,
        buffer_size: int | None = None,
        receipt: bool = False,
    ) -> Subscription:
        """Subscribe to ``destination``; use the result with ``async with``.

        Args:
          ack: "auto", "client" (cumulative) or "client-individual".
          headers: extra SUBSCRIBE headers, e.g. ``{"prefetch-count": "100"}``
            (RabbitMQ), ``{"activemq.prefetchSize": "100"}`` or ``selector``
            (ActiveMQ). When neither prefetch header is given, both are sent
            with a window of 1000.
          buffer_size: how many received messages may wait for the consumer;
            defaults to the prefetch window (10,000 for ``ack="auto"``). See
            :class:`Subscription` for what happens when it fills up.
          receipt: wait for the broker to confirm the SUBSCRIBE on entry.

        With a reconnect policy the subscription is re-established on every
        new connection, and its ``async for`` goes on across reconnects.

        Raises:
          LocalProtocolError: unknown ack mode or a reserved header; nothing sent.
        """
        core = self._core
        pairs = user_headers(headers, SUBSCRIBE_RESERVED_HEADERS)
        core.check_open()
        state = SubscriptionState(
            core, core.subscriptions, core.next_id(), destination, ack, pairs, buffer_size
        )
        return Subscription(state, receipt)

    def transaction(self, *, receipt: bool = True) -> Transaction:
        """Start a transaction; use the result with ``async with``.

        Args:
          receipt: wait for the RECEIPT of COMMIT before leaving the block.
        """
        self._core.check_open()
        return Transaction(self._core, self._core.next_id("tx-"), receipt)
