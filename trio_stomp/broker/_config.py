"""Broker settings: resource limits, timeouts, and the users file.

Everything a hostile or broken client could use to make the broker allocate
without bound has a limit here, and every limit has a default that is generous
for tests and small deployments.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from ._selector_work import DISPATCH_WORK, EVALUATION_WORK, LONGEST_STRING

__all__ = ["Limits", "UsersFileError", "load_users", "parse_users"]

_MiB = 1024 * 1024


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value!r}")


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value!r}")


@attrs.frozen(kw_only=True)
class Limits:
    """What one connection may cost the broker, and how long it may take.

    A client that breaks a limit gets an ERROR frame and is disconnected; the
    broker and every other connection carry on.

    Attributes:
      max_frame_size: the largest frame (head and body) a client may send, in
        bytes.
      max_header_count: the most headers one client frame may carry.
      max_header_length: the longest header line a client may send, in bytes.
      max_outbound_bytes: the bound on what may wait for one slow client: bytes
        queued for its socket plus the backlog of its topic subscriptions and
        its temporary (reply) queues. A
        client that stops reading is disconnected (without an ERROR, which it
        would not read) once what waits for it passes this by more than the
        largest frame it was given, so what it holds stays under this plus two
        frames (the largest, and the one that found it over): a frame larger
        than this (up to ``max_frame_size``) still reaches a client that keeps
        up.
        Queue messages never count here: they stay in their queue (where
        another consumer can take them) while the client is slow.
      outbound_high_water: queue deliveries to a connection pause while more
        than this many bytes wait to be written to it, and resume when the
        writer has caught up. This is also about the largest single write.
        The default, 64 KiB, is smaller than a socket's buffers, so the broker
        queues the next write while the client is still reading the last one
        (at 256 KiB, a fast consumer of a full queue sat idle while the broker
        filled each write, and received at 0.5-0.65x of the raw limit in some
        runs of ``bench/speed/throughput.py``).
      default_prefetch: the prefetch window (most unacknowledged messages in
        flight) of a ``client`` or ``client-individual`` subscription that
        names none with ``prefetch-count`` or ``activemq.prefetchSize``.
        ``auto`` subscriptions have no window.
      max_subscriptions: the most subscriptions one connection may hold, and
        the most temp queues (``/temp-queue/``) it may name.
      max_selector_length: the longest ``selector`` a SUBSCRIBE may carry,
        in characters.
      max_selector_depth: the deepest nesting of a selector's expression
        (and of its parentheses); ``AND``/``OR`` chains do not nest. Bounds
        the stack that parsing and evaluating it takes.
      selector_scan: how many selector evaluations that find no taker one
        dispatch of a queue may spend (a consumer got room, a subscription
        came): the cost of one event is bounded, however deep the backlog
        nobody selects and however many consumers select. A new message is
        looked at on its own (one evaluation per consumer with room). A
        message waiting behind more unselected ones than that is reached
        once they are consumed (ActiveMQ looks only at its page of 200).
      max_selector_work: the most work one evaluation of a selector may
        spend, in units of about one character: each string it builds,
        compares, converts or searches costs its length (a LIKE, its length
        for each piece of the pattern), and each token of the selector 200
        (an operation of the evaluator). An evaluation that runs out is a
        non-match for that message: counted
        (:attr:`trio_stomp.broker.Broker.selector_work_exhausted`) and logged once per
        subscription, never an ERROR (what it costs depends on the message,
        which any producer chooses). The default, 1,000,000, is about a
        millisecond of the broker's time, and lets a LIKE read 64 KiB
        headers many times over.
      max_selector_dispatch_work: the most selector work one dispatch may
        spend across the subscriptions it evaluates (a topic's fan-out of
        one message, the offer of one message on a queue, a queue's look
        through its backlog); each evaluation gets at most a fair share of
        what is left, so one subscription's selector cannot spend another's.
        Bounds how long one message holds the broker (the default,
        4,000,000, a few milliseconds), whatever the subscribers select.
      max_selector_string: the longest string a selector's evaluation may
        build (``+`` concatenates), in characters; one longer stops the
        evaluation as a non-match, before it is built. The default, 65,536,
        is a header line as long as ``max_header_length``.
      max_durable_subscriptions: the most durable topic subscriptions
        (``client-id`` + ``activemq.subscriptionName``) the broker keeps, from
        every client together: a SUBSCRIBE that would make one more gets an
        ERROR.
      max_durable_messages: the most messages one durable subscription holds
        (waiting, or delivered and not acknowledged). A message sent to its
        topic while it is full is not kept for it (its other subscribers get
        it); the subscription counts it as dropped and the broker logs a
        warning when it starts dropping.
      max_durable_bytes: likewise, the most bytes of messages one durable
        subscription holds; a subscription that holds nothing still keeps
        one message larger than this (up to ``max_frame_size``).
      max_durable_total_bytes: the most bytes of messages all durable
        subscriptions hold together; past it, a message is not kept for a
        subscription that already holds one (as when that one is full).
      max_transactions: the most open transactions one connection may hold.
      max_transaction_bytes: the most bytes of frames one connection may
        buffer in its open transactions (bodies plus headers).
      min_heartbeat_ms: the shortest heart-beat interval the broker agrees to,
        in either direction, whatever the client asks for.
      max_preconnect_frame: the largest frame a connection may send before its
        CONNECT succeeded, in bytes: an unauthenticated peer cannot make the
        broker hold a large frame.
      max_buffered_bytes: the bound on incomplete frames held across all
        connections, in bytes. A connection whose partial frame takes the total
        past it gets an ERROR naming the limit and is closed; the others carry
        on. Many slow peers each sending part of a large frame cannot exhaust
        memory.
      duplicate_window: how many ``bridge-id`` values the broker remembers
        **per destination**, to drop a SEND that repeats one already accepted
        for the same destination (it gets its RECEIPT, once the first is on
        disk, and is dropped), like ActiveMQ Artemis's duplicate-id cache.
        **0 (the default) turns it off**: an application that sends a
        different message under a ``bridge-id`` it used before (a message
        that passed through a bridge, sent again to retry it) would have it
        dropped. ``bridges`` turns it on (10,000) for its embedded broker,
        whose senders are its own sinks with the sources' namespaced ids.
        Ids sent to one destination never push another's out. With a data
        dir the ids of stored messages are kept in the store, written with
        the messages, so a broker killed and started again still drops their
        repeats; the ids of messages not stored (topics) are kept in memory.
        Each drop is counted (:attr:`trio_stomp.broker.Broker.duplicates_dropped`, per
        destination) and logged at INFO, sampled; see
        :mod:`trio_stomp.broker._dedup`.
      duplicate_window_seconds: how long an id is remembered (by the wall
        clock, also while the broker is stopped), whichever of the two ends
        first; the default is 10 minutes. A repeat that comes later is
        accepted as a new message.
      duplicate_window_bytes: the bound on the duplicate window's memory, all
        destinations together, in bytes (default 64 MiB): each id counts its
        own size plus 400 bytes, each destination its name plus 600. Past
        it, the oldest ids of the destination holding the most go first, so
        one destination flooded with ids flushes its own before another's.
      max_duplicate_id_length: a ``bridge-id`` longer than this, in bytes of
        UTF-8 (default 256, at least 128), is remembered as its BLAKE2b-256
        digest (65 bytes): still exact for de-duplication, at a bounded cost
        in memory and in the store. The message keeps its whole header; a
        SEND is never refused for its id.
      connect_timeout: seconds a new connection has to send CONNECT (0: no
        limit).
      close_timeout: seconds the broker waits to flush a final frame (ERROR,
        the RECEIPT of a DISCONNECT, the shutdown notice) before it closes the
        socket anyway.
    """

    max_frame_size: int = attrs.field(default=16 * _MiB, validator=_positive)
    max_header_count: int = attrs.field(default=1000, validator=_positive)
    max_header_length: int = attrs.field(default=64 * 1024, validator=_positive)
    max_outbound_bytes: int = attrs.field(default=8 * _MiB, validator=_positive)
    outbound_high_water: int = attrs.field(default=64 * 1024, validator=_positive)
    default_prefetch: int = attrs.field(default=1000, validator=_positive)
    max_subscriptions: int = attrs.field(default=10_000, validator=_positive)
    max_selector_length: int = attrs.field(default=4096, validator=_positive)
    max_selector_depth: int = attrs.field(default=40, validator=_positive)
    selector_scan: int = attrs.field(default=10_000, validator=_positive)
    max_selector_work: int = attrs.field(default=EVALUATION_WORK, validator=_positive)
    max_selector_dispatch_work: int = attrs.field(default=DISPATCH_WORK, validator=_positive)
    max_selector_string: int = attrs.field(default=LONGEST_STRING, validator=_positive)
    max_durable_subscriptions: int = attrs.field(default=1000, validator=_positive)
    max_durable_messages: int = attrs.field(default=100_000, validator=_positive)
    max_durable_bytes: int = attrs.field(default=64 * _MiB, validator=_positive)
    max_durable_total_bytes: int = attrs.field(default=1024 * _MiB, validator=_positive)
    max_transactions: int = attrs.field(default=1000, validator=_positive)
    max_transaction_bytes: int = attrs.field(default=64 * _MiB, validator=_positive)
    min_heartbeat_ms: int = attrs.field(default=100, validator=_positive)
    max_preconnect_frame: int = attrs.field(default=64 * 1024, validator=_positive)
    max_buffered_bytes: int = attrs.field(default=256 * _MiB, validator=_positive)
    duplicate_window: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    duplicate_window_seconds: float = attrs.field(default=600.0, validator=_non_negative)
    duplicate_window_bytes: int = attrs.field(default=64 * _MiB, validator=_positive)
    max_duplicate_id_length: int = attrs.field(default=256, validator=attrs.validators.ge(128))
    connect_timeout: float = attrs.field(default=30.0, validator=_non_negative)
    close_timeout: float = attrs.field(default=2.0, validator=_non_negative)


class UsersFileError(ValueError):
    """A users file could not be read or does not follow the format."""


def parse_users(text: str, *, source: str = "<users>") -> dict[str, str]:
    """Parse the text of a users file into a ``login -> passcode`` mapping.

    The format is one ``login:passcode`` per line. The passcode is everything
    after the first colon (so it may contain colons); the login may not be
    empty and may not repeat. Blank lines and lines starting with ``#`` are
    ignored; no other whitespace is stripped, except the line ending::

        # trio-stomp broker users
        guest:guest
        app:s3cret:with:colons

    Args:
      text: the file's contents.
      source: a name for the text, used in error messages.

    Returns:
      A new dict mapping each login to its passcode.

    Raises:
      UsersFileError: a line has no colon or an empty login, or a login
        appears twice. The message names the line.
    """
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        login, colon, passcode = line.partition(":")
        if not colon:
            raise UsersFileError(f"{source}:{number}: expected login:passcode, got no colon")
        if not login:
            raise UsersFileError(f"{source}:{number}: the login is empty")
        if login in users:
            raise UsersFileError(f"{source}:{number}: login {login!r} appears twice")
        users[login] = passcode
    return users


def load_users(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a users file (see :func:`parse_users` for its format).

    Raises:
      UsersFileError: the file cannot be read, is not UTF-8, or does not
        follow the format.
    """
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsersFileError(f"cannot read users file {os.fspath(path)!r}: {exc}") from None
    return parse_users(text, source=os.fspath(path))


def freeze_users(users: Mapping[str, str] | None) -> dict[str, str] | None:
    """Copy ``users`` (so later changes by the caller do not leak in), checking types."""
    if users is None:
        return None
    copy = dict(users)
    for login, passcode in copy.items():
        if not isinstance(login, str) or not isinstance(passcode, str):
            raise TypeError(f"users must map str to str, got {login!r}: {passcode!r}")
    return copy
