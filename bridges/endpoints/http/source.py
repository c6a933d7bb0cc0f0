"""The ``http`` source: inbound webhooks, answered 2xx only once the sink holds them.

Each accepted request to ``path`` is one message: the body unchanged, the
headers ``content-type``, ``http-method``, ``http-path``, ``http-query`` and
``http-<name>`` for each name in ``keep_headers``; its id is ``ROUTE/`` and
the sender's ``webhook-id`` (``id_header``), so a sender's retries carry the
same id and two senders' ids never meet, else ``ROUTE/`` and a fresh one
(128 random bits drawn once per source, then a count: unique without a
draw per request).

A push source fits the pull contract this way: the request handler (a task
of the shared server) checks the request, builds an envelope whose ack and
nack only record the outcome, hands it over through :class:`.handoff.Handoff`
(the engine takes every queued one in one call), with no task, channel or
timer of its own. On a plain socket the handler then returns and the
outcome answers it (the server's ``bridges.defer``); over TLS it waits,
parked once. The engine
acks the envelope once the sink holds the message durably (or the
dead-letter sink does): then, and only then, the answer is ``status`` (204).
A nack (a sink that keeps failing, a shutdown) answers 503 with
``Retry-After``, and so does a request the route does not take within
``accept_timeout`` (its window full): nothing was queued for those, and the
sender tries again later. A message taken but not yet stored after
``answer_timeout`` is answered 503 too (a sender's own timeout would
otherwise hit first); it stays in the route, so the sender's retry may be a
duplicate. A 2xx therefore always means durable; a 5xx means the sender must
retry (at worst a duplicate with the same id, never a loss).

Checks run before anything is queued and before the body is read where
they can: a place among ``max_pending`` (at most ``max_per_peer`` per
address; 503), method (405), bearer token and signature headers (401),
``Content-Length`` over ``max_body`` (413); then the body is read chunk by
chunk (the server reads the socket only when a chunk is asked for) and
refused with 413 as soon as it passes ``max_body``, or with 408 when it
arrives slower than ``min_body_rate`` (after ``body_grace``) or not whole
within ``body_timeout``; then the signature over the body (401). A body
still arriving may lose its place to a newcomer when all are taken (503):
see :mod:`.admission`, which also counts and logs the refusals at a bounded
rate.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Final

import attrs
import trio
from attrs.validators import ge, gt, le

from bridges import Context, InvalidSetting, Message
from bridges._readfile import check_file

from ..._message import trusted_message
from .._id_template import id_namespace, id_template_setting
from .admission import REASONS, Place, Places, Refusals, body_limit, peer_key
from .handoff import Handoff, HookEnvelope
from .listener import HttpListener, ListenAddress, Receive, Scope, Send, listen, respond
from .server import DEFER, READY_BODY
from .signatures import (
    Scheme,
    SignatureError,
    check_timestamp,
    secret_key,
    verify_bearer,
    verify_github,
    verify_standard,
)

#: W3C trace context headers, kept under their own names (no ``http-`` prefix).
TRACE_HEADERS: Final = ("traceparent", "tracestate")

log = logging.getLogger("bridges.http")

#: Longest sender id (``webhook-id``) taken as the message id; longer ones get a fresh id.
MAX_ID_LENGTH: Final = 256
_SECRET: Final = {"secret": True}
STANDARD_HEADERS: Final = ("webhook-id", "webhook-timestamp", "webhook-signature")


@attrs.frozen
class HttpSourceConfig:
    """Receive webhooks over HTTP(S); answered 2xx once the sink holds them.

    Attributes:
      listen: required: ``HOST:PORT`` (or ``[V6]:PORT``) to listen on; routes
        on one address share one server.
      path: required: the exact path that takes this route's webhooks.
      methods: the HTTP methods accepted (others: 405).
      signature: how each request is signed: ``"standard-webhooks"``,
        ``"github"`` or ``"none"`` (allowed without asking only with
        ``bearer_token`` or on a loopback address).
      secret: the signature's secret, or a list of them (key rotation: any of
        them verifies).
      bearer_token: a token each request must carry as ``Authorization:
        Bearer ...``, alone or with a signature.
      tolerance: how far a ``webhook-timestamp`` may be from now, either way,
        s.
      max_body: the largest body accepted, bytes (larger: 413, before it is
        read).
      keep_headers: request headers kept on the message, as ``http-NAME``.
      id_header: the request header whose value is the message id (a
        sender's retries carry the same one).
      id_template: the message id made from its headers and body
        (``{header:NAME}``, ``{body_hash}``...), for senders without a
        stable id header.
      status: the 2xx status answered once the sink holds the message.
      accept_timeout: how long a request may wait for a place among
        ``max_pending`` before it gets 503, s.
      body_timeout: how long the whole body may take to arrive before 408, s.
      min_body_rate: the average rate a body must keep after ``body_grace``,
        else 408, bytes/s (0: only ``body_timeout``).
      body_grace: how long before ``min_body_rate`` applies, s.
      answer_timeout: how long a taken webhook may wait to be stored before
        503 (it stays in the route: the sender's retry may be a duplicate), s.
      max_pending: requests handled at once (memory: at most this times
        ``max_body``); more get 503 with ``Retry-After`` before their body is
        read, or push out the body that has been arriving the longest.
      max_per_peer: of those, the most from one address (an IPv6 /64); more:
        503.
      retry_after: the ``Retry-After`` of a 503, s.
      certfile: the TLS certificate chain (PEM) to serve HTTPS with (with
        ``keyfile``); routes on one address use the same.
      keyfile: the private key (PEM) of ``certfile``.
    """

    listen: str
    path: str
    methods: list[str] = attrs.field(factory=lambda: ["POST"])
    signature: Scheme | None = None
    secret: str | list[str] | None = attrs.field(default=None, metadata=_SECRET, repr=False)
    bearer_token: str | None = attrs.field(default=None, metadata=_SECRET, repr=False)
    tolerance: float = attrs.field(default=300.0, validator=ge(0.0))
    max_body: int = attrs.field(default=1024 * 1024, validator=ge(0))
    keep_headers: list[str] = attrs.field(factory=list)
    id_header: str = "webhook-id"
    id_template: str | None = None
    status: int = attrs.field(default=204, validator=[ge(200), le(299)])
    accept_timeout: float = attrs.field(default=5.0, validator=gt(0.0))
    body_timeout: float = attrs.field(default=30.0, validator=gt(0.0))
    min_body_rate: float = attrs.field(default=1024.0, validator=ge(0.0))
    body_grace: float = attrs.field(default=2.0, validator=ge(0.0))
    answer_timeout: float = attrs.field(default=25.0, validator=gt(0.0))
    max_pending: int = attrs.field(default=256, validator=ge(1))
    max_per_peer: int = attrs.field(default=32, validator=ge(1))
    retry_after: int = attrs.field(default=5, validator=ge(0))
    certfile: str | None = None
    keyfile: str | None = None


def signing_keys(scheme: str, secret: str | list[str] | None) -> list[bytes]:
    """The HMAC keys of ``secret`` (one, or a list for rotation) for ``scheme``.

    Raises:
      InvalidSetting: a secret missing, superfluous, empty or malformed.
    """
    secrets = [secret] if isinstance(secret, str) else list(secret or [])
    if scheme == "none":
        if secrets:
            raise InvalidSetting(
                "secret", 'a secret needs signature = "standard-webhooks" or "github"'
            )
        return []
    if not secrets:
        raise InvalidSetting("secret", f'missing: signature = "{scheme}" needs a secret')
    keys = []
    for index, text in enumerate(secrets):
        try:
            keys.append(secret_key(text) if scheme == "standard-webhooks" else text.encode())
        except ValueError as exc:
            where = "secret" if isinstance(secret, str) else f"secret[{index}]"
            raise InvalidSetting(where, str(exc)) from None
        if not keys[-1]:
            raise InvalidSetting("secret", "is empty")
    return keys


class HttpSource:
    """Webhooks to one path of a (shared) HTTP server, as a source."""

    def __init__(self, config: HttpSourceConfig, context: Context) -> None:
        try:
            tls = (
                (str(context.path(config.certfile)) if config.certfile else None),
                (str(context.path(config.keyfile)) if config.keyfile else None),
            )
            self.address = ListenAddress.parse(config.listen, *tls)
        except ValueError as exc:
            key = "listen" if "certfile" not in str(exc) else "certfile"
            raise InvalidSetting(key, str(exc)) from None
        for key, name in (("certfile", tls[0]), ("keyfile", tls[1])):
            if name is not None:
                check_file(key, Path(name), context)
                if not Path(name).is_file():
                    raise InvalidSetting(key, f"{name} is not a file")
        if not config.path.startswith("/") or "?" in config.path or "#" in config.path:
            raise InvalidSetting(
                "path", f"must start with '/' and have no query, got {config.path!r}"
            )
        methods = [method.upper() for method in config.methods]
        if not methods or not all(method.isalpha() for method in methods):
            raise InvalidSetting("methods", 'a list of HTTP methods such as ["POST"]')
        scheme = config.signature
        if scheme is None:
            if config.bearer_token is None and not self.address.loopback:
                raise InvalidSetting(
                    "signature",
                    f"{config.listen} is not loopback and there is no bearer_token: choose "
                    '"standard-webhooks", "github", or "none" (anyone who can connect may post)',
                )
            scheme = "none"
        if config.bearer_token is not None and not config.bearer_token:
            raise InvalidSetting("bearer_token", "is empty")
        self.config = config
        self._id_template = id_template_setting(config.id_template)
        self.scheme: Scheme = scheme
        self.methods = frozenset(methods)
        self._keys = signing_keys(scheme, config.secret)
        self._bearer = None if config.bearer_token is None else config.bearer_token.encode()
        self._keep = tuple(name.lower() for name in config.keep_headers)
        self._context = context
        self._namespace = id_namespace(context.route)
        #: Fresh ids (no sender id): this source's own random prefix and a count.
        self._fresh_prefix = self._namespace + uuid.uuid4().hex + "-"
        self._fresh = itertools.count(1)
        #: The server it is mounted on, while open (its ``url`` has the real port).
        self.listener: HttpListener | None = None
        #: Requests refused since it was created, by reason (``bridges_http_refused_total``).
        self.refused: dict[str, int] = dict.fromkeys(REASONS, 0)

    @classmethod
    def build(cls, config: HttpSourceConfig, context: Context) -> HttpSource:
        return cls(config, context)

    def describe(self) -> str:
        scheme = "https" if self.address.certfile else "http"
        return f"http {scheme}://{self.address.bind}{self.config.path}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_HttpReceiver]:
        async with listen(self._context, self.address) as listener, trio.open_nursery() as nursery:
            listener.retry_after = self.config.retry_after
            receiver = _HttpReceiver(self)
            nursery.start_soon(receiver.refusals.run)
            nursery.start_soon(receiver.expire)
            try:
                with listener.mount(self.config.path, receiver.handle):
                    self.listener = listener
                    yield receiver
            finally:
                self.listener = None
                receiver.close()
                nursery.cancel_scope.cancel()

    def check(self, headers: Mapping[str, str], body: bytes | None) -> None:
        """Authenticate a request: token and the signature's headers, then (with the body) it.

        Raises:
          SignatureError: why it is refused (safe to log).
        """
        if self._bearer is not None:
            verify_bearer(self._bearer, headers)
        if self.scheme == "standard-webhooks":
            if body is None:
                if not all(headers.get(name) for name in STANDARD_HEADERS):
                    raise SignatureError("missing " + ", ".join(STANDARD_HEADERS))
                check_timestamp(
                    headers.get("webhook-timestamp", ""),
                    now=time.time(),
                    tolerance=self.config.tolerance,
                )
            else:
                verify_standard(
                    self._keys, headers, body, now=time.time(), tolerance=self.config.tolerance
                )
        elif self.scheme == "github":
            if body is None:
                if "x-hub-signature-256" not in headers:
                    raise SignatureError("missing x-hub-signature-256")
            else:
                verify_github(self._keys, headers, body)

    def message(self, scope: Scope, headers: Mapping[str, str], body: bytes) -> Message:
        """The message for an accepted request."""
        out = {
            "content-type": headers.get("content-type", "application/octet-stream"),
            "http-method": scope["method"],
            "http-path": scope["path"],
            "http-query": scope["query_string"].decode("latin-1"),
        }
        for name in self._keep:
            value = headers.get(name)
            if value is not None:
                out[f"http-{name}"] = value
        for name in TRACE_HEADERS:  # W3C trace context: under its own name (bridges._trace)
            value = headers.get(name)
            if value is not None:
                out[name] = value
        given = headers.get(self.config.id_header.lower(), "")
        # Under the route's name: two senders (two routes) may both number theirs from 1.
        if given and len(given) <= MAX_ID_LENGTH and given.isprintable():
            message_id = self._namespace + given
        else:
            message_id = f"{self._fresh_prefix}{next(self._fresh):x}"
        message = trusted_message(body, out, message_id)
        if self._id_template is not None:
            message = self._id_template.apply(message)
        return message


class _Disconnected(Exception):
    pass


class _CutOff(Exception):
    """The body did not arrive in time, or its place was given to another request."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _HttpReceiver(Handoff):
    """The app mounted on the path: checks each request, then hands it to the route
    through :class:`.handoff.Handoff` and answers with the outcome."""

    def __init__(self, source: HttpSource) -> None:
        config = source.config
        super().__init__(f"http {config.path}", config.accept_timeout, config.answer_timeout)
        self._source = source
        self._config = config
        self._places = Places(config.max_pending, config.max_per_peer)
        self._retry_after = [(b"retry-after", str(config.retry_after).encode())]
        self.refusals = Refusals(self._origin, source.refused)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app mounted on the path: check, queue, wait for the outcome, answer.

        At most ``max_pending`` requests are handled at once (so at most that
        many bodies of ``max_body`` are held), at most ``max_per_peer`` of
        them from one address; more get 503 before their body is read, unless
        a body still arriving gives up its place (:mod:`.admission`).
        """
        peer = peer_key(scope.get("client"))
        place = self._places.take(peer)
        if isinstance(place, str):
            self.refusals.note(place, peer, "too many requests in progress")
            status, body, extra = 503, b"too many requests in progress\n", self._retry_after
            if place == "max_per_peer":
                extra = [*extra, (b"connection", b"close")]
        else:
            answer: _Answer | None = None
            try:
                answer = await self._process(scope, receive, place)
            finally:
                if answer is not _LATER:  # (else when it is answered)
                    self._places.release(place)
            if answer is _LATER:
                return
            status, body, extra = answer
        await respond(send, status, body, extra)  # (the listener catches GONE)

    def _answered(
        self,
        answer: Callable[[int, list[tuple[bytes, bytes]], bytes], None],
        place: Place,
        envelope: HookEnvelope,
    ) -> None:
        """A webhook handed over with its answer deferred is finished: answer it."""
        self._places.release(place)
        if self.stored(envelope):
            answer(self._config.status, [_TEXT], b"")
        else:
            answer(503, [_TEXT, *self._retry_after], b"not stored; try again later\n")

    async def _process(self, scope: Scope, receive: Receive, place: Place) -> _Answer:
        source = self._source
        client = place.peer
        if scope["method"] not in source.methods:
            allow = ", ".join(sorted(source.methods)).encode()
            return 405, b"method not allowed\n", [(b"allow", allow)]
        headers = _headers(scope)
        try:
            source.check(headers, None)
        except SignatureError as exc:
            self.refusals.note("unauthorized", client, str(exc))
            return 401, b"unauthorized\n", []
        limit = self._config.max_body
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            self.refusals.note("max_body", client, f"{length} bytes > max_body {limit}")
            return 413, b"body too large\n", []
        extensions = scope.get("extensions", {})
        ready = extensions.get(READY_BODY)
        body = ready() if ready is not None else None  # (all here already: no timer needed)
        try:
            if body is None:
                body = await self._read_body(receive, place)
            elif len(body) > limit:
                body = None
        except _Disconnected:
            return 400, b"", []
        except _CutOff as cut:
            close = [(b"connection", b"close")]
            if cut.reason == "evicted":
                self.refusals.note("evicted", client, "its place went to a newer request")
                return 503, b"too many requests in progress\n", [*self._retry_after, *close]
            self.refusals.note(cut.reason, client, "body too slow")
            return 408, b"body too slow\n", close
        self._places.arrived(place)
        if body is None:
            self.refusals.note("max_body", client, f"body > max_body {limit}")
            return 413, b"body too large\n", []
        try:
            source.check(headers, body)
        except SignatureError as exc:
            self.refusals.note("unauthorized", client, str(exc))
            return 401, b"unauthorized\n", []
        return await self._store(source.message(scope, headers, body), extensions, place)

    async def _store(self, message: Message, extensions: Scope, place: Place) -> _Answer:
        """Hand an accepted request to the route: its answer, or :data:`_LATER` when the
        server lets it be given later (then no wait here: one wakeup per request fewer)."""
        defer = extensions.get(DEFER)
        answer = None if defer is None or self._closed else defer()
        if answer is not None:
            if self.hand_over_later(message, partial(self._answered, answer, place)):
                return _LATER
        elif await self.hand_over(message):
            return self._config.status, b"", []
        return 503, b"not stored; try again later\n", self._retry_after

    async def _read_body(self, receive: Receive, place: Place) -> bytes | None:
        """The whole body, or None as soon as it is longer than ``max_body`` (nothing more is read).

        Raises:
          _CutOff: too slow for ``min_body_rate`` or ``body_timeout``, or evicted.
          _Disconnected: the sender went away.
        """
        config = self._config
        limit = config.max_body
        chunks: list[bytes] = []
        size = 0
        scope = place.scope

        def allow() -> str:
            seconds, reason = body_limit(
                size, config.min_body_rate, config.body_grace, config.body_timeout
            )
            scope.deadline = place.started + seconds
            return reason

        reason = allow()
        with scope:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Disconnected
                chunk: bytes = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    return None
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
                reason = allow()
        if place.evicted:  # (also when the last chunk came in the tick it was evicted)
            raise _CutOff("evicted")
        if scope.cancelled_caught:
            raise _CutOff(reason)
        return b"".join(chunks)


#: What :meth:`_HttpReceiver._process` returns: the answer, or :data:`_LATER` when it was
#: deferred (see :meth:`_HttpReceiver._answered`).
_Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]
_LATER: Final[_Answer] = (0, b"", [])
_TEXT: Final = (b"content-type", b"text/plain; charset=utf-8")


def _headers(scope: Scope) -> dict[str, str]:
    """Request headers, names lower-case; the first of a repeated header wins."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return headers
