"""The exception family of trio_stomp.

Every exception the library raises on purpose derives from :class:`StompError`,
so ``except trio_stomp.StompError`` catches exactly what the library means.

The protocol errors (:class:`ProtocolError`, :class:`LocalProtocolError`,
:class:`RemoteProtocolError`) and the base class are defined with the codec in
:mod:`trio_stomp.frame` and imported here; the rest concern a connection.
"""

from __future__ import annotations

from typing import Final

import trio

from .frame._errors import LocalProtocolError as LocalProtocolError
from .frame._errors import ProtocolError as ProtocolError
from .frame._errors import RemoteProtocolError as RemoteProtocolError
from .frame._errors import StompError as StompError

#: The most characters of an ERROR frame's ``message`` header, and of its body,
#: that an exception's text carries (a Java stack trace can be kilobytes).
MAX_EXPLANATION_CHARS: Final = 200
#: Control characters shown escaped (``\n``), so that the text stays one line.
_CONTROL: Final = {code: f"\\x{code:02x}" for code in (*range(32), 127)} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def _bounded(text: str) -> str:
    text = text.strip()
    cut = len(text) > MAX_EXPLANATION_CHARS
    text = text[:MAX_EXPLANATION_CHARS].rstrip().translate(_CONTROL)
    return f"{text}..." if cut else text


def explain(frame: object, message: str = "") -> str:
    """What an ERROR frame says, in one bounded line: its ``message`` header,
    then the first line of its body when that says more.

    RabbitMQ puts a code in the header and the explanation in the body
    (``not_found: NOT_FOUND - no queue 'x' in vhost '/'``, ``Bad CONNECT:
    Access refused for user 'guest'``); ActiveMQ the exception's text in the
    header and a stack trace in the body (whose first line names the
    exception). Each part is cut to
    :data:`MAX_EXPLANATION_CHARS` and its control characters are escaped.

    Args:
      frame: the ERROR frame (anything else: ``message`` alone).
      message: used when the frame has no ``message`` header.
    """
    headers = getattr(frame, "headers", None)
    body = getattr(frame, "body", b"")
    if headers is not None:
        message = headers.get("message") or message
    head = _bounded(message)
    detail = ""
    if isinstance(body, bytes | bytearray | memoryview):
        text = bytes(body[: MAX_EXPLANATION_CHARS * 4]).decode("utf-8", "replace").strip()
        detail = _bounded(text.split("\n", 1)[0])
    if not detail or detail == head or (head and detail in head):
        return head or "ERROR frame without a message"
    if not head or detail.startswith(head.removesuffix("...")):
        return detail
    return f"{head}: {detail}"


class ConnectFailed(StompError):
    """The connection could not be opened or the broker refused it.

    Raised by :func:`trio_stomp.connect`: the address refused or timed out,
    the credentials were rejected, the broker answered CONNECT with ERROR, or
    no STOMP version is common to both sides. ``frame`` is the broker's ERROR
    frame when there was one.
    """

    def __init__(self, message: str, frame: object | None = None) -> None:
        super().__init__(message)
        self.frame = frame


class ServerError(StompError):
    """The broker sent an ERROR frame during the session.

    The spec has the broker close the connection right after an ERROR (some,
    such as ActiveMQ for a bad selector, keep it open); either way the client
    ends the session there: it is unusable afterwards, or, with a reconnect
    policy, it connects again. ``frame`` is the ERROR frame, ``message`` its
    ``message`` header (or the start of its body when the header is absent).
    Its text (``str()``) is the header and the first line of the body, on
    one line and bounded: the body is where RabbitMQ says what was wrong
    (``not_found: NOT_FOUND - no queue 'x' in vhost '/'``).
    RabbitMQ's "Subscription not found" ERROR for a message that was in
    flight when the client unsubscribed is the one exception: it is ignored.
    """

    def __init__(self, message: str, frame: object | None = None) -> None:
        super().__init__(explain(frame, message) if frame is not None else message)
        self.message = message
        self.frame = frame


class ConnectionLost(StompError):
    """The connection broke: the peer closed it, the socket failed, or heart-beats stopped."""


class ClientClosed(StompError):
    """The client, subscription or transaction was used after it was closed."""


class SubscriptionOverflow(StompError):
    """A subscription's buffer filled up and messages had to be dropped.

    Only possible when the broker ignores the prefetch window (``auto`` acks on
    RabbitMQ, for instance). Raised by the subscription's ``async for`` once
    the messages buffered before the overflow have been delivered.
    """


class TransactionError(StompError):
    """A transaction could not be completed (its connection went away, or it was misused)."""


class RequestTimeout(StompError, trio.TooSlowError):
    """No reply to :meth:`Client.request <trio_stomp.Client.request>` came in time.

    Both a :class:`StompError` and a :class:`trio.TooSlowError` (what
    ``trio.fail_after`` raises), so either ``except`` catches it. The request
    left nothing behind: a reply that comes later is dropped.
    """
