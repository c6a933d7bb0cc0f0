"""The ``http`` sink: outbound webhooks, one request per message, durable on a 2xx.

Each message is one request: ``url``, ``method`` and ``headers`` are
templates; the body is the message body, ``content-type`` the message's.
Every request carries ``webhook-id: <message id>`` (the id is stable across
retries and crashes, so a receiver can de-duplicate), and is signed by
``signature`` like the ``http`` source verifies it. It also carries
``Idempotency-Key`` (``idempotency_key``, on by default), the id as the
IETF draft (draft-ietf-httpapi-idempotency-key-header) spells it, a
Structured Fields string: ``Idempotency-Key: "m-17"``. A receiver that
keeps each key with the effect of its request, in the same transaction, and
answers a repeat as it answered the first (2xx), makes the pair effectively
once (docs/explanation/exactly-once.md states that contract). A message without an id
sends neither a stable ``webhook-id`` nor an ``Idempotency-Key``.

Both carry the id as :func:`~bridges.endpoints._header_id.header_id` spells it: as it is when it is
visible ASCII without ``%``, else percent-encoded (UTF-8), so any id (a file
named ``café.json``, a line break, a space) makes a valid header, the same
one each time, and two ids never share one. ``webhook-signature`` signs that
form, the one the receiver sees.

A batch goes out ``concurrency`` requests at a time, each of the
``concurrency`` workers on keep-alive connections of its own
(:mod:`.client`: HTTP/1.1 parsed by httptools; with ``http2 = true``, one
``httpx.AsyncClient`` pool instead). The outcome of each request:

- 2xx: durable;
- 408, 429, 5xx, connection errors, timeouts: transient. ``timeout`` is a
  deadline for the whole request, from connecting to the last byte of the
  (bounded) answer read, not only for each read. The write raises,
  and the route retries the batch by its retry policy; a ``Retry-After``
  (seconds or an HTTP date, at most ``max_retry_after``) delays the next
  try at least that long;
- anything else (other 4xx, 3xx): :class:`bridges.MessageRejected`, dead-
  lettered with the status and the first 200 bytes of the answer.

The sink remembers which messages of a failing batch already got their
answer, so a retry sends only the others (fewer duplicates at the
receiver); the memory is cleared when a batch completes.
"""

from __future__ import annotations

import base64
import email.utils
import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final

import attrs
import httpx
import trio
from attrs.validators import ge, gt

from bridges import Context, InvalidSetting, Message, MessageRejected, Template, TemplateError
from bridges._readfile import checked_cafile, open_verifying_context
from bridges._redact import redact_cut

from .._header_id import header_id
from .client import HttpError, Lane, Origin, request_bytes
from .signatures import Scheme, sign_headers
from .source import TRACE_HEADERS, signing_keys

log = logging.getLogger("bridges.http")

#: How much of a rejecting answer goes into ``bridge-error``, characters.
ERROR_BODY_BYTES: Final = 200
#: How much more of it is read, so that a secret it echoes across the cut is
#: found whole and masked (:mod:`bridges._redact`), bytes.
_ERROR_BODY_MARGIN: Final = 1024
#: How much of a 2xx answer is read (so the connection can be reused); more closes it.
DRAIN_BYTES: Final = 64 * 1024
#: Most answers remembered across failed writes (see ``HttpSink``).
MAX_REMEMBERED: Final = 100_000
#: Statuses that mean "try again later".
TRANSIENT: Final = frozenset({408, 429})
#: Headers a ``headers`` setting may not set (the sink sets them).
_RESERVED: Final = frozenset(
    {
        "content-length",
        "content-type",
        "host",
        "idempotency-key",
        "transfer-encoding",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "x-hub-signature-256",
    }
)
_SECRET: Final = {"secret": True}


@attrs.frozen
class HttpSinkConfig:
    """POST (or PUT...) each message to a URL; durable on a 2xx answer.

    Attributes:
      url: required: where each message is sent, a template
        (``https://hooks.example.com/{header:customer}``).
      method: the HTTP method, a template.
      headers: request headers; each value is a template.
      signature: how each request is signed: ``"standard-webhooks"``,
        ``"github"`` or ``"none"``.
      secret: the signature's secret, or a list of them (the first signs).
      bearer_token: sent as ``Authorization: Bearer ...``.
      concurrency: requests in flight at once per batch.
      timeout: the deadline of one request, answer included, s.
      cafile: trust the CAs in this file (PEM) instead of the system's.
      insecure: true verifies no certificate (not with ``cafile``).
      http2: true uses HTTP/2 where the server offers it.
      max_retry_after: the longest ``Retry-After`` of a 429 or 503 that is
        honoured, s.
      idempotency_key: send the message id as ``Idempotency-Key: "ID"`` with
        each request (with ``webhook-id``, always sent).
    """

    url: str
    method: str = "POST"
    headers: dict[str, str] = attrs.field(factory=dict)
    signature: Scheme = "none"
    secret: str | list[str] | None = attrs.field(default=None, metadata=_SECRET, repr=False)
    bearer_token: str | None = attrs.field(default=None, metadata=_SECRET, repr=False)
    concurrency: int = attrs.field(default=8, validator=ge(1))
    timeout: float = attrs.field(default=10.0, validator=gt(0.0))
    cafile: str | None = None
    insecure: bool = False
    http2: bool = False
    max_retry_after: float = attrs.field(default=60.0, validator=ge(0.0))
    idempotency_key: bool = True


class HttpTransient(Exception):
    """A request failed in a way worth retrying (5xx, 408, 429, a connection error)."""


def _parse(key: str, text: str) -> Template:
    try:
        return Template.parse(text)
    except TemplateError as exc:
        raise InvalidSetting(key, str(exc)) from None


class HttpSink:
    """Messages as HTTP requests, durable once answered 2xx."""

    def __init__(self, config: HttpSinkConfig, context: Context) -> None:
        self.config = config
        httpx_log = logging.getLogger("httpx")
        if httpx_log.level == logging.NOTSET:
            httpx_log.setLevel(logging.WARNING)  # not a line per request at info
        self._url = _parse("url", config.url)
        if self._url.constant:
            _check_url(config.url, "url")
        elif not config.url.lower().startswith(("http://", "https://")):
            raise InvalidSetting("url", "must start with http:// or https://")
        self._method = _parse("method", config.method)
        self._headers: list[tuple[str, Template]] = []
        for name, value in config.headers.items():
            if name.lower() in _RESERVED or not name.isascii() or not name.strip():
                raise InvalidSetting(f"headers.{name}", "this header cannot be set here")
            self._headers.append((name, _parse(f"headers.{name}", value)))
        self._keys = signing_keys(config.signature, config.secret)
        if config.bearer_token is not None and not config.bearer_token:
            raise InvalidSetting("bearer_token", "is empty")
        if config.cafile is not None and config.insecure:
            raise InvalidSetting("insecure", "give cafile or insecure, not both")
        self._cafile = checked_cafile("cafile", config.cafile, context)
        # Answers to messages of a batch that failed as a whole: id(message) ->
        # (message, None if delivered else why rejected). The message is kept so
        # that its id() is not reused while the entry lives.
        self.answered: dict[int, tuple[Message, str | None]] = {}
        self._not_before = 0.0
        self._targets: dict[str, tuple[Origin, bytes, bytes, str | None]] = {}

    @classmethod
    def build(cls, config: HttpSinkConfig, context: Context) -> HttpSink:
        return cls(config, context)

    def describe(self) -> str:
        return f"http {self.config.method} {_redact(self.config.url)}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_HttpWriter]:
        config = self.config
        verify: ssl.SSLContext | bool = True
        if config.insecure:
            log.warning("%s: TLS certificates are not verified (insecure = true)", self.describe())
            verify = False
        elif self._cafile is not None:
            verify = await open_verifying_context(self._cafile)
        if not config.http2:
            context = _ssl_context(verify, https=not config.url.lower().startswith("http://"))
            lanes = [Lane(context) for _ in range(config.concurrency)]
            try:
                yield _HttpWriter(self, None, lanes)
            finally:
                for lane in lanes:
                    await lane.aclose()
            return
        limits = httpx.Limits(
            max_connections=config.concurrency, max_keepalive_connections=config.concurrency
        )
        async with httpx.AsyncClient(
            verify=verify,
            http2=config.http2,
            limits=limits,
            timeout=config.timeout,
            trust_env=False,
            follow_redirects=False,
        ) as client:
            yield _HttpWriter(self, client, [])

    def prepare(self, message: Message) -> tuple[str, str, list[tuple[str, str]]]:
        """The method, URL and headers (``content-length`` and ``host`` aside) for ``message``.

        Raises:
          TemplateError, ValueError: it cannot be built (a bad URL or header).
        """
        url = self._url.render(message)
        if not self._url.constant:
            _check_url(url, "url")
        headers = [
            ("content-type", message.headers.get("content-type", "application/octet-stream"))
        ]
        for name in TRACE_HEADERS:  # W3C trace context, carried (bridges._trace)
            value = message.headers.get(name)
            if value is not None:
                headers.append((name, _header_value(value)))
        for name, template in self._headers:
            headers.append((name, _header_value(template.render(message))))
        msg_id = header_id(message.id) if message.id else uuid.uuid4().hex
        headers.append(("webhook-id", msg_id))
        if message.id and self.config.idempotency_key:
            headers.append(("idempotency-key", idempotency_key(message.id)))
        if self._keys:
            signed = sign_headers(
                self.config.signature, self._keys, msg_id, int(time.time()), message.body
            )
            headers.extend(signed.items())
        if self.config.bearer_token is not None:
            headers.append(("authorization", f"Bearer {self.config.bearer_token}"))
        method = self._method.render(message).upper()
        if not method.isalpha():
            raise ValueError(f"not an HTTP method: {method[:20]!r}")
        return method, url, headers

    def target(self, url: str) -> tuple[Origin, bytes, bytes, str | None]:
        """Where ``url`` goes: origin, request target, ``host`` header and Basic credentials.

        Raises:
          ValueError: not an http(s) URL with a host.
        """
        known = self._targets.get(url)
        if known is not None:
            return known
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise ValueError(f"cannot build the request: {exc}") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError("cannot build the request: not an http(s) URL with a host")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        auth = None
        if parsed.userinfo:  # (as httpx does: user info in the URL is Basic auth)
            pair = f"{parsed.username}:{parsed.password}".encode()
            auth = "Basic " + base64.b64encode(pair).decode("ascii")
        found = (Origin(parsed.scheme, parsed.host, port), parsed.raw_path, parsed.netloc, auth)
        if self._url.constant:
            self._targets[url] = found
        return found

    def request(self, client: httpx.AsyncClient, message: Message) -> httpx.Request:
        """The request for ``message`` as httpx builds it (the ``http2 = true`` path).

        Raises:
          TemplateError, ValueError: it cannot be built (a bad URL or header).
        """
        method, url, headers = self.prepare(message)
        try:
            return client.build_request(method, url, content=message.body, headers=headers)
        except (httpx.InvalidURL, UnicodeEncodeError) as exc:
            raise ValueError(f"cannot build the request: {exc}") from None

    async def wait_retry_after(self) -> None:
        """Wait until the last ``Retry-After`` answer allows the next request."""
        await trio.sleep_until(self._not_before)

    def defer(self, retry_after: str | None) -> None:
        """Honour a ``Retry-After`` answer: no request before it (capped)."""
        if not retry_after:
            return
        seconds: float | None = None
        text = retry_after.strip()
        if text.isdigit():
            seconds = float(text)
        else:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError):
                return
            seconds = when.timestamp() - time.time()
        seconds = min(max(seconds, 0.0), self.config.max_retry_after)
        self._not_before = max(self._not_before, trio.current_time() + seconds)


def _ssl_context(verify: ssl.SSLContext | bool, *, https: bool) -> ssl.SSLContext | None:
    """The TLS context of the sink's own connections (None: no https URL is possible)."""
    if isinstance(verify, ssl.SSLContext):
        context = verify
    elif not https:
        return None
    else:
        context = ssl.create_default_context()
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])
    return context


def _check_url(url: str, key: str) -> None:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidSetting(key, f"not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidSetting(key, f"expected http(s)://HOST/..., got {_redact(url)!r}")


def _describe(exc: BaseException) -> str:
    """An httpx error in one line; its own text is often empty (the cause says why)."""
    cause: BaseException | None = exc
    for _ in range(6):  # httpx -> httpcore -> trio -> ssl: the last one knows
        if cause is None or str(cause):
            break
        cause = cause.__cause__ or cause.__context__
    text = str(cause) if cause is not None and str(cause) else "no detail"
    return f"{type(exc).__name__}: {text}"


def idempotency_key(message_id: str) -> str:
    """``message_id`` as an ``Idempotency-Key`` value: a Structured Fields string (RFC 8941).

    The id as :func:`~bridges.endpoints._header_id.header_id` spells it, quoted
    (``\\`` and ``"`` escaped).
    """
    key = header_id(message_id)
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _header_value(value: str) -> str:
    if any(c in value for c in "\r\n\0"):
        raise ValueError("a header value has a line break or NUL")
    return value


def _redact(url: str) -> str:
    """``url`` as far as its host: user info, path and query may all hold tokens
    (Slack's and Discord's webhook URLs carry theirs in the path)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return "<invalid URL>"
    port = f":{parsed.port}" if parsed.port is not None else ""
    rest = "/..." if parsed.raw_path not in (b"", b"/") else "/"
    return f"{parsed.scheme}://{parsed.host}{port}{rest}"


class _HttpWriter:
    def __init__(self, sink: HttpSink, client: httpx.AsyncClient | None, lanes: list[Lane]) -> None:
        self._sink = sink
        self._client = client
        self._lanes = lanes
        self._concurrency = sink.config.concurrency

    async def write(self, batch: Sequence[Message]) -> None:
        sink = self._sink
        await sink.wait_retry_after()
        answered = sink.answered
        results: list[str | BaseException | None] = [None] * len(batch)
        todo = []
        for index, message in enumerate(batch):
            known = answered.get(id(message))
            if known is not None and known[0] is message:
                results[index] = known[1]
            else:
                todo.append(index)
        if todo:
            await self._send_all(batch, todo, results)
        failed = [r for r in results if isinstance(r, BaseException)]
        if len(answered) > MAX_REMEMBERED:  # batches that never complete: forget (resend)
            answered.clear()
        for index in todo:
            result = results[index]
            if not isinstance(result, BaseException):
                answered[id(batch[index])] = (batch[index], result)
        if failed:
            raise HttpTransient(
                f"{len(failed)} of {len(batch)} request(s) failed; the first: {failed[0]}"
            ) from failed[0]
        rejected = {i: r for i, r in enumerate(results) if isinstance(r, str)}
        if rejected:
            for i in rejected:  # once dead-lettered, forgotten
                answered.pop(id(batch[i]), None)
            raise MessageRejected.each(rejected)
        answered.clear()

    async def _send_all(
        self, batch: Sequence[Message], todo: list[int], results: list[str | BaseException | None]
    ) -> None:
        pending = iter(todo)

        async def worker(lane: Lane | None) -> None:
            for index in pending:
                results[index] = await self._send_one(batch[index], lane)

        async with trio.open_nursery() as nursery:
            for number in range(min(self._concurrency, len(todo))):
                nursery.start_soon(worker, self._lanes[number] if self._lanes else None)

    async def _send_one(self, message: Message, lane: Lane | None) -> str | BaseException | None:
        """None: delivered; a string: rejected (why); an exception: transient."""
        timeout = self._sink.config.timeout
        # A deadline for the whole exchange, the (bounded) body read included: a
        # target that sends its answer a byte at a time cannot hold it for ever
        # (httpx's own timeouts apply to each read and write).
        with trio.move_on_after(timeout):
            if lane is None:
                return await self._exchange(message)
            return await self._exchange_on(lane, message)
        try:
            method, url, _ = self._sink.prepare(message)
            where = f"{method} {_redact(url)}"
        except (TemplateError, ValueError):  # (it could be built a moment ago)
            where = self._sink.describe()
        return HttpTransient(f"{where}: no complete answer within timeout = {timeout:g} s")

    async def _exchange_on(self, lane: Lane, message: Message) -> str | BaseException | None:
        sink = self._sink
        try:
            method, url, headers = sink.prepare(message)
            origin, target, host, auth = sink.target(url)
            if auth is not None:
                headers.append(("authorization", auth))
            data = request_bytes(method, target, host, headers, message.body)
        except (TemplateError, ValueError) as exc:
            return str(exc)
        try:
            answer = await lane.exchange(origin, data, DRAIN_BYTES, head=method == "HEAD")
        except HttpError as exc:
            return HttpTransient(f"{method} {_redact(url)}: {exc}")
        if 200 <= answer.status < 300:
            return None
        where = f"{method} {_redact(url)}"
        return self._failed(where, answer.status, answer.reason, answer.headers, answer.body)

    def _failed(
        self, where: str, status: int, reason: str, headers: Mapping[str, str], body: bytes
    ) -> str | BaseException:
        """A non-2xx answer: transient (retried) or the reason it is rejected."""
        text = body[: ERROR_BODY_BYTES + _ERROR_BODY_MARGIN].decode("utf-8", "replace")
        snippet = redact_cut(text, ERROR_BODY_BYTES)
        reason = f" {reason}" if reason else ""
        summary = f"{where}: HTTP {status}{reason}: {snippet!r}"
        if status in TRANSIENT or status >= 500:
            self._sink.defer(headers.get("retry-after"))
            return HttpTransient(summary)
        return summary

    async def _exchange(self, message: Message) -> str | BaseException | None:
        """One request through httpx (``http2 = true``)."""
        sink = self._sink
        assert self._client is not None
        try:
            request = sink.request(self._client, message)
        except (TemplateError, ValueError) as exc:
            return str(exc)
        where = f"{request.method} {_redact(str(request.url))}"
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            return HttpTransient(f"{where}: {_describe(exc)}")
        try:
            status = response.status_code
            if 200 <= status < 300:
                await _read_some(response, DRAIN_BYTES)
                return None
            body = await _read_some(response, ERROR_BODY_BYTES + _ERROR_BODY_MARGIN)
            return self._failed(where, status, response.reason_phrase, response.headers, body)
        except httpx.TransportError as exc:
            return HttpTransient(f"{where}: {_describe(exc)}")
        finally:
            await response.aclose()


async def _read_some(response: httpx.Response, limit: int) -> bytes:
    """Up to about ``limit`` bytes of the body; a longer body is left (its connection closed)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(chunks)


__all__ = ["HttpSink", "HttpSinkConfig", "HttpTransient"]
