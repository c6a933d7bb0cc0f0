"""The ``nats`` sink: JetStream publishes, the batch sent then every PubAck awaited.

Durable means JetStream's publish ack: the stream has stored the message (on
its replicas). Every publish carries ``Nats-Msg-Id`` = the message's stable
id, so JetStream's own duplicate window (``duplicate_window`` of the stream,
2 minutes by default) drops a message the route writes again after a crash
or a retry: within that window, stomp -> nats is effectively once. The
server says so in the PubAck (``duplicate``); :attr:`NatsSink.duplicates`
counts them. An id that is not visible ASCII, or holds ``%``, goes
percent-encoded (:func:`~bridges.endpoints._header_id.header_id`): a line
break would break the header block, and the encoding keeps distinct ids
distinct.

The window is the stream's, counted from the first publish of an id: a
message written again after more than ``duplicate_window`` (a bridge down
longer than that, a retry schedule that long) is stored again, a duplicate
in the stream with the same ``Nats-Msg-Id`` header. ``duplicate_window``
here (seconds) says what the route needs: on open, for a constant subject,
the sink reads the window of the stream that stores it
(:attr:`NatsSink.stream_window`) and logs a warning when it is shorter.

``jetstream = false`` publishes with core NATS instead: the batch is
followed by a flush (the server has read it), but core NATS stores nothing,
so a subscriber that is not connected at that moment never gets it. That is
at most once, and ``bridges check`` says so.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import nats.errors
import nats.js.api
import nats.js.errors
import trio
from attrs.validators import ge, gt, optional

from bridges import Context, InvalidSetting, Message, MessageRejected, Template, TemplateError

from ..._guarantee import AT_MOST_ONCE, NOT_ASKED, Guarantee, warn_if_weaker
from .._asyncio import AsyncioLoop
from .._header_id import header_id
from ._connection import MSG_ID, SUBJECT_HEADER, Connector, NatsConnection, check_subject, one_line
from ._probe import ask_storage

#: What a NATS header name may hold (nats-py's own check, before anything is sent).
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: The largest header block JetStream stores (nats-server's JSStreamHeaderExceedsMaximumErr).
MAX_JETSTREAM_HEADERS: Final = 65535
#: JetStream's answers that storing the same message again cannot fix: over the
#: stream's max_msg_size (10054), a header block over 64 KiB (10097).
_TOO_BIG: Final = frozenset({10054, 10097})
#: Bytes of a header block besides its lines: ``NATS/1.0`` CR LF ... CR LF.
_HEAD_FRAMING: Final = 12


def _head_size(headers: dict[str, str]) -> int:
    """Bytes of the HPUB header block of ``headers``.

    Raises:
      ValueError: a value (or the id) is not UTF-8 text.
    """
    size = _HEAD_FRAMING
    for name, value in headers.items():
        try:
            size += len(name) + len(value.encode()) + 4  # ": " and CR LF
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"header {name[:40]!r}: not UTF-8 text ({exc.reason} at position {exc.start}), "
                "which NATS cannot carry"
            ) from None
    return size


#: Headers a sink never sends on (delivery details of a nats source; the id goes as Nats-Msg-Id).
log = logging.getLogger("bridges.nats")

_NOT_SENT = frozenset({SUBJECT_HEADER, MSG_ID.lower(), "bridge-id"})


@attrs.frozen
class NatsSinkConfig(NatsConnection):
    """Publish to NATS JetStream (PubAck per message, Nats-Msg-Id = stable id) or core NATS.

    Attributes:
      subject: the subject to publish to, a template; a ``destination``
        transform overrides it. Without either, the message's destination.
      jetstream: true publishes to JetStream and awaits each PubAck; false
        publishes with core NATS (a flush per batch: at most once).
      confirm_timeout: how long the batch's publish acks may take before the
        write fails (and is retried), s.
      duplicate_window: the de-duplication window the route needs, s: a
        warning on open when the stream's is shorter (a repeat after the
        stream's window is stored again).
    """

    subject: str = ""
    jetstream: bool = True
    confirm_timeout: float = attrs.field(default=10.0, validator=ge(0.1))
    duplicate_window: float | None = attrs.field(default=None, validator=optional(gt(0.0)))


class NatsSink:
    """Batches published to JetStream, each message acknowledged by the stream."""

    def __init__(self, config: NatsSinkConfig, context: Context) -> None:
        self._subject: Template | None = None
        if config.subject:
            try:
                self._subject = Template.parse(config.subject)
            except TemplateError as exc:
                raise InvalidSetting("subject", str(exc)) from None
            if self._subject.constant:
                try:
                    check_subject(config.subject, wildcards=False)
                except ValueError as exc:
                    raise InvalidSetting("subject", str(exc)) from None
        self._config = config
        self._connector = Connector(config, context)
        #: The duplicate window, s, of the stream storing the constant subject, as read on
        #: the last open (with ``duplicate_window`` set); None: not read.
        self.stream_window: float | None = None
        self._asked = False
        #: Publishes JetStream dropped as duplicates (same Nats-Msg-Id within its window).
        self.duplicates = 0

    @classmethod
    def build(cls, config: NatsSinkConfig, context: Context) -> NatsSink:
        return cls(config, context)

    def describe(self) -> str:
        kind = "jetstream" if self._config.jetstream else "core (at most once)"
        subject = self._config.subject or "the message's destination"
        return f"nats {kind} {subject} on {self._connector.where}"

    def check_warnings(self) -> list[str]:
        """What ``bridges check`` should point out about this sink."""
        if self._config.jetstream:
            return []
        return [
            "nats sink with jetstream = false: core NATS stores nothing, so delivery is at "
            "most once (a subscriber that is not connected misses the message)"
        ]

    async def probe(self) -> Guarantee:
        """Connect and ask the storage of the stream behind the subject (``check --probe``)."""
        if not self._config.jetstream:
            return Guarantee(AT_MOST_ONCE, "jetstream = false: core NATS stores nothing")
        if self._subject is None or not self._subject.constant:
            return Guarantee(NOT_ASKED, "the subject is per message: each stream decides")
        async with self._connector.connect() as (aio, client, _closed):
            return await ask_storage(aio, client, subject=self._config.subject)

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_NatsWriter]:
        async with self._connector.connect() as (aio, client, closed):
            acks = None
            if self._config.jetstream:
                acks = _PubAcks(client.new_inbox())
                await aio.run(client.subscribe, acks.prefix + ".>", cb=acks.on_reply)
                if self._config.duplicate_window is not None:
                    await self._check_window(aio, client)
                if not self._asked and self._subject is not None and self._subject.constant:
                    self._asked = True  # (once: a retry opens again)
                    storage = await ask_storage(aio, client, subject=self._config.subject)
                    warn_if_weaker(log, f"nats {self._connector.where}", storage)
            yield _NatsWriter(aio, client, acks, closed, self, self._config.confirm_timeout)

    async def _check_window(self, aio: Any, client: Any) -> None:
        """Read the stream's duplicate window; warn when it is shorter than asked."""
        wanted = self._config.duplicate_window
        subject = self._config.subject
        if wanted is None or self._subject is None or not self._subject.constant:
            return
        try:
            js = await aio.call(client.jetstream)
            name = await aio.run(js.find_stream_name_by_subject, subject)
            info = await aio.run(js.stream_info, name)
        except Exception as exc:  # (no stream yet: its publishes are rejected, and say why)
            log.warning("nats sink: cannot read the duplicate window for %s: %s", subject, exc)
            return
        self.stream_window = float(info.config.duplicate_window or 0.0)
        if self.stream_window < wanted:
            log.warning(
                "nats stream %s de-duplicates Nats-Msg-Id for %g s, less than the sink's "
                "duplicate_window (%g s): a message written again later than that is stored twice",
                name,
                self.stream_window,
                wanted,
            )

    def prepare(self, message: Message, max_payload: int) -> tuple[str, dict[str, str]]:
        """The subject and headers of ``message``.

        Raises:
          ValueError: it can never be published (no subject, a bad one, a bad
            header, over the server's max_payload).
        """
        if message.destination:
            subject = message.destination
        elif self._subject is not None:
            subject = self._subject.render(message)
        else:
            raise ValueError("no subject: set the sink's subject or use a transform")
        check_subject(subject, wildcards=False)
        if len(message.body) > max_payload:
            raise ValueError(
                f"{len(message.body)} bytes is over the server's max_payload ({max_payload})"
            )
        headers: dict[str, str] = {}
        for name, value in message.headers.items():
            if name.lower() in _NOT_SENT:
                continue
            if not _TOKEN.fullmatch(name) or "\r" in value or "\n" in value:
                raise ValueError(f"header {name[:40]!r} cannot be sent over NATS")
            headers[name] = value
        if message.id:
            headers[MSG_ID] = header_id(message.id)
        # The server counts the headers into max_payload (and closes the connection
        # for a message over it): the body alone is not the whole check.
        head = _head_size(headers)
        if self._config.jetstream and head > MAX_JETSTREAM_HEADERS:
            raise ValueError(
                f"a header block of {head} bytes, over JetStream's {MAX_JETSTREAM_HEADERS}"
            )
        size = len(message.body) + head
        if size > max_payload:
            raise ValueError(
                f"{size} bytes with its headers is over the server's max_payload ({max_payload})"
            )
        return subject, headers

    def saw_duplicates(self, count: int) -> None:
        self.duplicates += count


class _PubAcks:
    """The publish acks of one writer's batches, collected from one reply subscription.

    Not nats-py's ``publish_async()``: it gives each publish an asyncio
    future (and ``gather`` a task), callbacks that cost more than the rest of
    the route together on a trio-asyncio loop. Here each publish has the
    reply subject ``PREFIX.BATCH.INDEX``, the client calls :meth:`on_reply`
    for each answer, and the batch is done when every answer is in (a batch
    number tells a late answer of a timed-out batch from the current ones).
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.batch = 0
        self.results: list[Any] = []
        self.remaining = 0
        self.done = trio.Event()

    def start(self, size: int) -> str:
        """A new batch of ``size``; returns its reply-subject prefix."""
        self.batch += 1
        self.results = [None] * size
        self.remaining = size
        self.done = trio.Event()
        if not size:
            self.done.set()
        return f"{self.prefix}.{self.batch}."

    def settle(self, index: int, result: Any) -> None:
        if self.results[index] is None:
            self.results[index] = result
            self.remaining -= 1
            if self.remaining <= 0:
                self.done.set()

    async def on_reply(self, msg: Any) -> None:
        """Runs in asyncio (inside Trio's thread): one PubAck, error, or no-responders status."""
        batch, _, index = msg.subject[len(self.prefix) + 1 :].partition(".")
        if batch != str(self.batch) or not index.isdigit() or int(index) >= len(self.results):
            return  # a late answer to an earlier batch
        self.settle(int(index), _pub_ack(msg))


def _pub_ack(msg: Any) -> Any:
    headers = msg.headers
    if headers and headers.get("Status") == "503":
        return nats.js.errors.NoStreamResponseError()
    try:
        answer = json.loads(msg.data)
    except ValueError:
        return nats.errors.Error(f"not a publish ack: {msg.data[:60]!r}")
    if "error" in answer:
        error = answer["error"]
        return nats.js.errors.APIError(
            code=error.get("code"),
            description=error.get("description"),
            err_code=error.get("err_code"),
        )
    return nats.js.api.PubAck.from_response(answer)


class _NatsWriter:
    def __init__(
        self,
        aio: AsyncioLoop,
        client: Any,
        acks: _PubAcks | None,
        closed: trio.Event,
        sink: NatsSink,
        timeout: float,
    ) -> None:
        self._aio = aio
        self._client = client
        self._acks = acks
        self._closed = closed
        self._sink = sink
        self._timeout = timeout

    async def write(self, batch: Sequence[Message]) -> None:
        if self._closed.is_set():
            raise ConnectionError("the nats connection closed")
        max_payload = self._client.max_payload
        todo: list[tuple[int, str, bytes, dict[str, str]]] = []
        bad: dict[int, str] = {}
        for index, message in enumerate(batch):
            try:
                subject, headers = self._sink.prepare(message, max_payload)
            except (ValueError, TemplateError) as exc:
                bad[index] = str(exc)
                continue
            todo.append((index, subject, message.body, headers))
        acks = self._acks
        try:
            with trio.fail_after(self._timeout):
                if acks is None:
                    await self._aio.run(_publish_core, self._client, todo, self._timeout)
                else:
                    reply = acks.start(len(todo))
                    await self._aio.run(_publish_js, self._client, todo, reply, acks)
                    await acks.done.wait()
        except trio.TooSlowError:
            raise TimeoutError(
                f"no publish ack for {len(todo)} message(s) in {self._timeout:g} s"
            ) from None
        if acks is not None:
            self._check(todo, acks.results, bad)
        if bad:
            raise MessageRejected.each(bad)

    def _check(
        self,
        todo: list[tuple[int, str, bytes, dict[str, str]]],
        results: list[Any],
        bad: dict[int, str],
    ) -> None:
        duplicates = 0
        for (index, subject, _, _), result in zip(todo, results, strict=True):
            if isinstance(result, nats.js.errors.NoStreamResponseError):
                bad[index] = f"no JetStream stream stores subject {subject!r}"
            elif isinstance(result, nats.js.errors.APIError) and result.err_code in _TOO_BIG:
                bad[index] = f"the stream refused it: {one_line(result)}"
            elif isinstance(result, nats.errors.MaxPayloadError | nats.errors.BadHeaderError):
                bad[index] = f"cannot be published: {one_line(result)}"
            elif isinstance(result, BaseException):
                raise ConnectionError(f"publishing failed: {one_line(result)}") from result
            elif result.duplicate:
                duplicates += 1
        self._sink.saw_duplicates(duplicates)


async def _publish_js(
    client: Any,
    todo: list[tuple[int, str, bytes, dict[str, str]]],
    reply: str,
    acks: _PubAcks,
) -> None:
    """Runs in asyncio: publish the whole batch, each with its own reply subject."""
    for position, (_, subject, body, headers) in enumerate(todo):
        try:
            await client.publish(subject, body, reply=f"{reply}{position}", headers=headers)
        except (nats.errors.MaxPayloadError, nats.errors.BadHeaderError) as exc:
            acks.settle(position, exc)


async def _publish_core(
    client: Any, todo: list[tuple[int, str, bytes, dict[str, str]]], wait: float
) -> None:
    """Runs in asyncio: publish, then flush (PING/PONG: the server has read all of it)."""
    for _, subject, body, headers in todo:
        await client.publish(subject, body, headers=headers or None)
    await client.flush(wait)
