"""The ``nats`` sink: JetStream publishes, the batch sent then every PubAck awaited.

Durable means JetStream's publish ack: the stream has stored the message (on
its replicas). Every publish carries ``Nats-Msg-Id`` = the message's stable
id, so JetStream's own duplicate window (``duplicate_window`` of the stream,
2 minutes by default) drops a message the route writes again after a crash
or a retry: within that window, stomp -> nats is effectively once. The
server says so in the PubAck (``duplicate``); :attr:`NatsSink.duplicates`
counts them.

``jetstream = false`` publishes with core NATS instead: the batch is
followed by a flush (the server has read it), but core NATS stores nothing,
so a subscriber that is not connected at that moment never gets it. That is
at most once, and ``bridges check`` says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import nats.errors
import nats.js.errors
import trio
from attrs.validators import ge

from bridges import Context, InvalidSetting, Message, MessageRejected, Template, TemplateError

from .._asyncio import AsyncioLoop
from ._connection import MSG_ID, SUBJECT_HEADER, Connector, NatsConnection, check_subject, one_line

#: Headers a sink never sends on (delivery details of a nats source; the id goes as Nats-Msg-Id).
_NOT_SENT = frozenset({SUBJECT_HEADER, MSG_ID.lower(), "bridge-id"})


@attrs.frozen
class NatsSinkConfig(NatsConnection):
    """Publish to NATS JetStream (PubAck per message, Nats-Msg-Id = stable id) or core NATS."""

    subject: str = ""
    jetstream: bool = True
    confirm_timeout: float = attrs.field(default=10.0, validator=ge(0.1))


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

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_NatsWriter]:
        async with self._connector.connect() as (aio, client, closed):
            js = await aio.call(client.jetstream) if self._config.jetstream else None
            yield _NatsWriter(aio, client, js, closed, self, self._config.confirm_timeout)

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
            if not name or any(c in name for c in ": \r\n") or "\r" in value or "\n" in value:
                raise ValueError(f"header {name[:40]!r} cannot be sent over NATS")
            headers[name] = value
        if message.id:
            headers[MSG_ID] = message.id
        return subject, headers

    def saw_duplicates(self, count: int) -> None:
        self.duplicates += count


class _NatsWriter:
    def __init__(
        self,
        aio: AsyncioLoop,
        client: Any,
        js: Any,
        closed: trio.Event,
        sink: NatsSink,
        timeout: float,
    ) -> None:
        self._aio = aio
        self._client = client
        self._js = js
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
        if todo:
            with trio.fail_after(self._timeout):
                if self._js is None:
                    await self._aio.run(_publish_core, self._client, todo, self._timeout)
                else:
                    results = await self._aio.run(_publish_js, self._js, todo)
                    self._check(todo, results, bad)
        if bad:
            indices = sorted(bad)
            raise MessageRejected(bad[indices[0]], indices)

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
            elif isinstance(result, nats.js.errors.APIError) and result.err_code == 10054:
                bad[index] = f"over the stream's max_msg_size: {one_line(result)}"
            elif isinstance(result, nats.errors.MaxPayloadError):
                bad[index] = f"over the server's max_payload: {one_line(result)}"
            elif isinstance(result, BaseException):
                raise ConnectionError(f"publishing failed: {one_line(result)}") from result
            elif result.duplicate:
                duplicates += 1
        self._sink.saw_duplicates(duplicates)


async def _publish_js(js: Any, todo: list[tuple[int, str, bytes, dict[str, str]]]) -> list[Any]:
    """Runs in asyncio: publish the whole batch, then await every PubAck."""
    futures: list[Any] = []
    for _, subject, body, headers in todo:
        try:
            futures.append(await js.publish_async(subject, body, headers=headers))
        except nats.errors.Error as exc:
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_exception(exc)
            futures.append(done)
    return list(await asyncio.gather(*futures, return_exceptions=True))


async def _publish_core(
    client: Any, todo: list[tuple[int, str, bytes, dict[str, str]]], wait: float
) -> None:
    """Runs in asyncio: publish, then flush (PING/PONG: the server has read all of it)."""
    for _, subject, body, headers in todo:
        await client.publish(subject, body, headers=headers or None)
    await client.flush(wait)
