"""The ``redis`` sink: each message one ``XADD`` entry, a batch pipelined in one round trip.

A batch is sent as one pipeline (no MULTI): every ``XADD`` of the batch goes
out in one write and the replies come back together. *Durable* means every
XADD returned its entry id, which says as much as the server's persistence
settings make it say:

- ``appendonly yes`` + ``appendfsync always``: the entry is in the AOF and
  fsynced before Redis replies: it survives a crash of Redis and of the
  machine (the test config).
- ``appendfsync everysec`` (Redis's default with AOF): written to the AOF
  before the reply, fsynced within about a second: it survives Redis being
  killed, but a power cut may lose the last second or two.
- no AOF (RDB snapshots only, or none): the entry lives in memory until the
  next snapshot; a Redis crash loses what came after it.

For replicated setups ``wait_replicas = N`` ends the pipeline with
``WAIT N timeout`` (on the same connection as the writes): the batch counts
as written only once N replicas have it, else the write fails and is retried.

Each entry holds the body in ``body_field``, the message's headers as
fields, and its stable id in ``bridge-id`` (a ``redis`` source hands that id
out again). A message that can never be written (no stream, a header that
collides with the body field, over ``max_bytes``, a stream the server refuses
with WRONGTYPE or NOPERM) is rejected to the dead-letter sink. When the server
refuses some entries of a pipelined batch, the others were already added:
the engine writes them again, so they appear twice with the same
``bridge-id`` (the usual at-least-once duplicate).

Idempotent append (``dedup_window``, on by default): each batch goes as one
Lua script (``EVALSHA``) that, for every message with an id, looks the id up
in a sorted set beside its stream (``STREAM:bridge-ids``, the ids of the
last ``dedup_window`` entries the sink added there) and adds the entry and
the id together, or nothing when the id is there already. A script runs
atomically and reaches the AOF and the replicas as one ``MULTI``/``EXEC`` of
its effects: the entry and its id are one durable write, so a crash never
leaves one without the other. A message the engine writes again (after a
crash, a refused batch, a failed WAIT) whose id is among the last
``dedup_window`` ids added to that stream is therefore a no-op: with a
source whose ids are stable, effectively once. Redis 7.0 (the installed
server) has no idempotent ``XADD`` of its own, hence the script. Its cost
and its window are in docs/explanation/exactly-once.md. ``dedup_window = 0`` sends plain
pipelined ``XADD``s (at least once). Messages with an empty id are always
added.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import coredis
import coredis.exceptions
from attrs.validators import ge, optional
from coredis.tokens import PureToken

from bridges import (
    Context,
    InvalidSetting,
    Message,
    MessageRejected,
    Template,
    TemplateError,
    prepare_each,
)
from bridges._guarantee import Guarantee, warn_if_weaker
from bridges._readfile import checked_cafile

from ._connection import (
    DELIVERY_HEADERS,
    ID_FIELD,
    RedisConnection,
    RedisEndpointError,
    Server,
    open_client,
    tls_context,
)
from ._probe import ask_persistence

log = logging.getLogger("bridges.redis")

#: Redis's own bound on one bulk string (proto-max-bulk-len's default): 512 MiB.
DEFAULT_MAX_BYTES: Final = 512 * 1024 * 1024
#: Stream names longer than this are refused here (Redis allows 512 MiB keys; nobody means that).
MAX_STREAM_NAME: Final = 1024
#: Ids kept per stream by default for the idempotent append (a sorted set of that many members).
DEFAULT_DEDUP_WINDOW: Final = 100_000
#: The key of a stream's recent ids: ``STREAM`` + this (same hash tag as the stream).
IDS_SUFFIX: Final = ":bridge-ids"
#: One batch, idempotently. KEYS: stream, ids key, per message. ARGV: window, maxlen
#: ("" for none), then per message its id, its number of fields and the fields. Per
#: message it returns the new entry id, "" for an id already added, or "!" + the error.
DEDUP_SCRIPT: Final = """
local window, maxlen = tonumber(ARGV[1]), ARGV[2]
local out, a = {}, 3
for i = 1, #KEYS / 2 do
  local stream, seen, id, n = KEYS[2 * i - 1], KEYS[2 * i], ARGV[a], tonumber(ARGV[a + 1])
  local fields = {}
  for j = 1, 2 * n do fields[j] = ARGV[a + 1 + j] end
  a = a + 2 + 2 * n
  local found = false
  if id ~= "" then found = redis.pcall("ZSCORE", seen, id) end
  if type(found) == "table" and found.err then
    out[i] = "!" .. found.err
  elseif found then
    out[i] = ""
  else
    local added
    if maxlen == "" then
      added = redis.pcall("XADD", stream, "*", unpack(fields))
    else
      added = redis.pcall("XADD", stream, "MAXLEN", "~", maxlen, "*", unpack(fields))
    end
    if type(added) == "table" and added.err then
      out[i] = "!" .. added.err
    else
      out[i] = added
      if id ~= "" then
        redis.call("ZADD", seen, tonumber(string.match(added, "^%d+")), id)
        redis.call("ZREMRANGEBYRANK", seen, 0, -window - 1)
      end
    end
  end
end
return out
"""
#: Script errors that writing the same entry again can never fix.
_REFUSED_TEXT: Final = ("WRONGTYPE", "NOPERM", "no permissions", "can't run this command")
#: Server errors that writing the same entry again can never fix.
_REFUSALS: Final = (coredis.exceptions.WrongTypeError, coredis.exceptions.AuthorizationError)


@attrs.frozen
class RedisSinkConfig(RedisConnection):
    """Append to a Redis stream (XADD, pipelined per batch).

    Attributes:
      stream: required: the stream's key, a template; a ``destination``
        transform overrides it.
      body_field: the entry's field that holds the message body (the
        headers are the other fields).
      maxlen: trim the stream to about this many entries (``XADD MAXLEN ~
        N``); default: no trimming.
      max_bytes: a larger message is rejected, bytes (Redis's default
        ``proto-max-bulk-len``: 512 MiB).
      wait_replicas: more than 0: each batch is durable only once this many
        replicas have it (``WAIT``).
      wait_timeout: how long ``WAIT`` waits for the replicas, s.
      dedup_window: the ids kept per stream (in ``STREAM:bridge-ids``) for the
        idempotent append, which skips a repeated id; 0: off (at least once).
    """

    stream: str = ""
    body_field: str = "body"
    maxlen: int | None = attrs.field(default=None, validator=optional(ge(1)))
    max_bytes: int = attrs.field(default=DEFAULT_MAX_BYTES, validator=ge(1))
    wait_replicas: int = attrs.field(default=0, validator=ge(0))
    wait_timeout: float = attrs.field(default=1.0, validator=ge(0.001))
    dedup_window: int = attrs.field(default=DEFAULT_DEDUP_WINDOW, validator=ge(0))


class RedisSink:
    """Batches appended to Redis streams, durable once every XADD returned its id."""

    def __init__(self, config: RedisSinkConfig, context: Context) -> None:
        if not config.stream:
            raise InvalidSetting("stream", "missing (required)")
        try:
            self._stream = Template.parse(config.stream)
        except TemplateError as exc:
            raise InvalidSetting("stream", str(exc)) from None
        if not config.body_field or config.body_field == ID_FIELD:
            raise InvalidSetting("body_field", f"must be a name other than {ID_FIELD!r}")
        self._config = config
        self._context = context
        self._server = Server.from_config(config)
        checked_cafile("ca_file", config.ca_file, context)
        self._body_field = config.body_field.encode()
        self._asked = False

    @classmethod
    def build(cls, config: RedisSinkConfig, context: Context) -> RedisSink:
        """The registry's constructor (connects to nothing)."""
        return cls(config, context)

    def describe(self) -> str:
        """``redis STREAM on URL``."""
        return f"redis {self._config.stream} on {self._server.where}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_RedisWriter]:
        """Connect (PING answered); leaving the block disconnects."""
        ssl_context = await tls_context(self._config, self._server, self._context)
        async with open_client(self._config, self._server, ssl_context) as client:
            if not self._asked:  # (once: a retry opens again)
                self._asked = True
                warn_if_weaker(log, f"redis {self._server.where}", await ask_persistence(client))
            writer = _RedisWriter(self, client)
            if self._config.dedup_window:
                writer.script = _text(await client.script_load(DEDUP_SCRIPT))
            yield writer

    async def probe(self) -> Guarantee:
        """Connect and ask the server what it keeps (``bridges check --probe``)."""
        ssl_context = await tls_context(self._config, self._server, self._context)
        async with open_client(self._config, self._server, ssl_context) as client:
            return await ask_persistence(client)

    def entry(self, message: Message) -> tuple[str, dict[bytes, bytes]]:
        """The stream and the fields of ``message``'s entry.

        Raises:
          ValueError: it can never be written (why, in one line).
        """
        stream = message.destination or self._stream.render(message)
        if not stream or len(stream) > MAX_STREAM_NAME:
            raise ValueError(f"stream name of {len(stream)} characters (1 to {MAX_STREAM_NAME})")
        if len(message.body) > self._config.max_bytes:
            raise ValueError(
                f"body of {len(message.body)} bytes is over max_bytes ({self._config.max_bytes})"
            )
        fields: dict[bytes, bytes] = {self._body_field: message.body}
        for name, value in message.headers.items():
            if name in DELIVERY_HEADERS or name == ID_FIELD:
                continue
            key = name.encode("utf-8", "surrogateescape")
            if key == self._body_field or not key:
                raise ValueError(f"header {name!r} would overwrite the body field")
            fields[key] = value.encode("utf-8", "surrogateescape")
        fields[ID_FIELD.encode()] = message.id.encode("utf-8", "surrogateescape")
        return stream, fields


class _RedisWriter:
    def __init__(self, sink: RedisSink, client: coredis.Redis[bytes]) -> None:
        config = sink._config  # noqa: SLF001 (the writer is part of its sink)
        self._sink = sink
        self._client = client
        self._where = sink._server.where  # noqa: SLF001
        self._trim: dict[str, Any] = {}
        if config.maxlen is not None:
            self._trim = {
                "trim_strategy": PureToken.MAXLEN,
                "threshold": config.maxlen,
                "trim_operator": PureToken.APPROXIMATELY,
            }
        self._replicas = config.wait_replicas
        self._wait_ms = max(1, int(config.wait_timeout * 1000))
        self._window = str(config.dedup_window).encode()
        self._maxlen = b"" if config.maxlen is None else str(config.maxlen).encode()
        #: The SHA of :data:`DEDUP_SCRIPT` as loaded on this connection; None: plain XADDs.
        self.script: str | None = None
        #: Messages the last write found already added (their ids in the stream's window).
        self.skipped = 0

    async def write(self, batch: Sequence[Message]) -> None:
        entries = self._entries(batch)
        if self.script is not None:
            await self._write_once(batch, entries, self.script)
            return
        async with self._client.pipeline(transaction=False, raise_on_error=False) as pipe:
            for stream, fields in entries:
                pipe.xadd(stream, fields, **self._trim)
            if self._replicas:
                with warnings.catch_warnings():
                    # coredis suggests ensure_replication(); WAIT in the same pipeline is
                    # exactly that, on the connection that made the writes.
                    warnings.simplefilter("ignore")
                    pipe.wait(self._replicas, self._wait_ms)
        # (the results as a tuple: awaiting each request costs a coroutine per message)
        results = pipe.results or ()
        if len(results) != len(entries) + bool(self._replicas):
            raise RedisEndpointError(f"redis {self._where}: the pipeline returned no results")
        self._check(entries, results)

    async def _write_once(
        self, batch: Sequence[Message], entries: list[tuple[str, dict[bytes, bytes]]], sha: str
    ) -> None:
        """The batch as one :data:`DEDUP_SCRIPT` call (then WAIT, when asked).

        Redis checks the ACL on a script's keys before running it, and refuses
        the whole call for one key the user may not touch, having written
        nothing: then each message goes as a call of its own (one pipeline),
        so that only those the ACL refuses are rejected.
        """
        calls = [self._call(batch, entries)]
        results = await self._run(sha, calls)
        each = results[0]
        if isinstance(each, BaseException) and _refusal(str(each)) and len(batch) > 1:
            calls = [self._call([m], [e]) for m, e in zip(batch, entries, strict=True)]
            results = await self._run(sha, calls)
            flat: list[object] = []
            for result in results[: len(calls)]:
                if isinstance(result, BaseException):
                    flat.append(b"!" + str(result).encode())
                else:
                    flat.extend(result if isinstance(result, list | tuple) else [result])
            each = flat
        elif isinstance(each, BaseException) and _refusal(str(each)):
            each = [b"!" + str(each).encode()]
        self._settle(entries, each, results[len(calls) :])

    def _call(
        self, batch: Sequence[Message], entries: Sequence[tuple[str, dict[bytes, bytes]]]
    ) -> tuple[list[str], list[bytes]]:
        """KEYS and ARGV of one :data:`DEDUP_SCRIPT` call for ``batch``."""
        keys: list[str] = []
        args: list[bytes] = [self._window, self._maxlen]
        for message, (stream, fields) in zip(batch, entries, strict=True):
            keys += (stream, stream + IDS_SUFFIX)
            args += (message.id.encode("utf-8", "surrogateescape"), b"%d" % len(fields))
            for name, value in fields.items():
                args += (name, value)
        return keys, args

    async def _run(
        self, sha: str, calls: list[tuple[list[str], list[bytes]]]
    ) -> tuple[object, ...]:
        """The script calls (and WAIT, when asked) in one pipeline; their results."""
        async with self._client.pipeline(transaction=False, raise_on_error=False) as pipe:
            for keys, args in calls:
                pipe.evalsha(sha, keys, args)
            if self._replicas:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # (see write)
                    pipe.wait(self._replicas, self._wait_ms)
        results = pipe.results or ()
        if len(results) != len(calls) + bool(self._replicas):
            raise RedisEndpointError(f"redis {self._where}: the pipeline returned no results")
        return results

    def _settle(
        self,
        entries: list[tuple[str, dict[bytes, bytes]]],
        each: object,
        waited: tuple[object, ...],
    ) -> None:
        """Check the script's answer per message (and WAIT's): see :meth:`_check`."""
        if isinstance(each, BaseException):
            raise RedisEndpointError(f"redis {self._where}: EVALSHA failed: {each}") from each
        if not isinstance(each, list | tuple) or len(each) != len(entries):
            raise RedisEndpointError(f"redis {self._where}: the script returned {each!r:.80}")
        outcomes: list[object] = []
        skipped = 0
        for index, result in enumerate(each):
            text = _text(result)
            if not text.startswith("!"):
                skipped += not text
                outcomes.append(text)
            elif _refusal(text):
                outcomes.append(coredis.exceptions.WrongTypeError(text[1:]))
            else:
                outcomes.append(RedisEndpointError(f"XADD to {entries[index][0]!r}: {text[1:]}"))
        self.skipped = skipped
        self._check(entries, (*outcomes, *waited))

    def _entries(self, batch: Sequence[Message]) -> list[tuple[str, dict[bytes, bytes]]]:
        return prepare_each(batch, self._sink.entry)  # (TemplateError is a ValueError)

    def _check(
        self, entries: list[tuple[str, dict[bytes, bytes]]], results: tuple[object, ...]
    ) -> None:
        refused: dict[int, str] = {}
        for index, result in enumerate(results[: len(entries)]):
            if isinstance(result, _REFUSALS):
                refused[index] = f"redis {entries[index][0]!r}: {result}"
            elif isinstance(result, BaseException):
                raise RedisEndpointError(f"redis {self._where}: XADD failed: {result}") from result
        if refused:
            raise MessageRejected.each(refused)
        if self._replicas:
            count = results[-1]
            if isinstance(count, BaseException):
                raise RedisEndpointError(f"redis {self._where}: WAIT failed: {count}") from count
            if not isinstance(count, int) or count < self._replicas:
                raise RedisEndpointError(
                    f"redis {self._where}: WAIT: {count} of {self._replicas} replica(s) "
                    f"acknowledged within {self._wait_ms} ms"
                )


def _text(value: object) -> str:
    """A reply (bytes or str) as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _refusal(text: str) -> bool:
    """Whether a script's error is one writing the same entry again can never fix."""
    lowered = text.lower()
    return any(refusal.lower() in lowered for refusal in _REFUSED_TEXT)
