"""Any bridges source and sink inside a Spark query: the ``bridges-route`` format.

``engine = "spark"`` reads a route's source through this format when the
source is not ``stomp`` (file, http, mqtt, redis, nats, amqp...), and writes
to its sink through it. Options name the config file, the route and the
base directory; each side builds the endpoint itself from the config, with
bridges' public registry, exactly as ``bridges run`` would:

- Source (driver): the same driver-side pump and write-ahead log as the
  ``stomp`` source (:mod:`._reader`). The route's source is opened on the
  pump's Trio loop; each envelope is logged (fsync) before it is acked, so
  a file source moves its position, an MQTT source sends its PUBACK, only
  once the message is safe under the checkpoint.
- Sink (executors): each task builds the route's sink, opens it on a Trio
  loop of its own, writes its rows in batches of the route's ``batch.count``
  (retrying by the route's ``retry`` policy), and returns only once every
  write returned, that is, once the sink holds them durably. Messages the
  sink rejects go to the route's dead-letter sink, or fail the task. A batch
  refused for a message the target cannot name (``BatchRefused``) is halved
  until that message is alone, as the engine does (:func:`write_all`). What an
  executor says (a dead letter's ``bridge-error``, a task's error, its log)
  has the config's secrets masked (``bridges.redacting``).

The config is read again on executors: it must be at the same path there
(true for ``local[*]`` and for a cluster sharing the directory), and the
``${VAR}`` secrets it names must be in the executors' environment.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

import bridges
from trio_stomp.util import unwrap_group

from ._pump import Delivery
from ._reader import SOURCE_SCHEMA, LoggedStreamReader
from ._wal import Record

log = logging.getLogger("bridges.spark")

#: The header a dead-lettered message carries: why.
ERROR_HEADER = "bridge-error"
#: The longest ``bridge-error`` text an executor writes (as the engine's), characters.
MAX_ERROR_CHARS = 500


@functools.cache
def _loaded(config_path: str, base_dir: str, mtime: float) -> bridges.Config:
    del mtime  # (part of the cache key: an edited config is read again)
    return bridges.load_config(
        config_path, bridges.default_registry(), base_dir=Path(base_dir), engine="spark"
    )


@attrs.frozen
class RouteRef:
    """Where a route is defined: what executors and the planner load it from."""

    config_path: str
    route: str
    base_dir: str

    @classmethod
    def from_options(cls, options: Any) -> RouteRef:
        missing = [k for k in ("config", "route", "basedir") if not options.get(k)]
        if missing:
            raise ValueError(f"bridges-route: missing option(s) {', '.join(missing)}")
        return cls(str(options["config"]), str(options["route"]), str(options["basedir"]))

    def load(self) -> tuple[bridges.RouteConfig, bridges.Registry]:
        """The route's config (read once per process and config version) and a registry."""
        config = _loaded(self.config_path, self.base_dir, Path(self.config_path).stat().st_mtime)
        for route in config.routes:
            if route.name == self.route:
                return route, _registry()
        raise ValueError(f"{self.config_path}: no route {self.route!r}")

    def secrets(self) -> frozenset[str]:
        """Every secret value the config resolved (see :func:`bridges.redacting`)."""
        config = _loaded(self.config_path, self.base_dir, Path(self.config_path).stat().st_mtime)
        return frozenset(config.secrets)

    def build(self, endpoint: Any, role: str) -> Any:
        """Build one endpoint (or transform) of the route, as ``bridges run`` would.

        In an executor task, the context's ``task`` is ``spark-pN``, N the
        task's partition: the same for every attempt of that partition's
        write (so a retried task fences its zombie, as a restarted
        ``bridges run`` does), and different for the tasks that write at once.
        """
        route, registry = self.load()
        task = TaskContext.get()
        context = bridges.Context(
            route=self.route,
            role=role,
            base_dir=Path(self.base_dir),
            in_flight=route.in_flight,
            task=None if task is None else f"spark-p{task.partitionId()}",
        )
        return registry.get(endpoint.kind, endpoint.type).build(endpoint.config, context)


@functools.cache
def _registry() -> bridges.Registry:
    return bridges.default_registry()


@attrs.frozen
class RouteFeed:
    """Opens a route's bridges source on the pump's loop; picklable."""

    ref: RouteRef

    @asynccontextmanager
    async def __call__(self) -> AsyncIterator[Callable[[], Awaitable[Delivery]]]:
        route, _ = self.ref.load()
        source = self.ref.build(route.source, "source")
        origin = source.describe()
        async with source.open() as receiver:

            async def receive() -> Delivery:
                while True:
                    envelope = await receiver.receive()
                    if envelope.error is None:
                        break
                    # The source could not read it whole: its own policy applies.
                    await envelope.nack(envelope.error)
                message = envelope.message
                record = Record(origin, message.id, message.id, message.headers, message.body, 0.0)
                return Delivery(attrs.evolve(record, received_at=time.time()), envelope.ack)

            yield receive


class RouteDataSource(DataSource):
    """``format("bridges-route")``: a route's source as a stream, its sink as a sink."""

    @classmethod
    def name(cls) -> str:
        return "bridges-route"

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        ref = RouteRef.from_options(self.options)
        checkpoint = self.options.get("checkpointlocation")
        if not checkpoint:
            raise ValueError("bridges-route: checkpointLocation is required for a source")
        route, _ = ref.load()
        return LoggedStreamReader(
            RouteFeed(ref),
            f"{checkpoint}/source-wal",
            window=route.in_flight,
            max_per_trigger=None,
            partitions=int(self.options.get("numpartitions", "2")),
            rows_per_partition=2000,
            name=f"route {ref.route}",
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RouteStreamWriter(RouteRef.from_options(self.options))


class Written(WriterCommitMessage):
    """What one task reports: rows written, and how many went to the dead-letter sink."""

    def __init__(self, count: int, dead: int) -> None:
        self.count = count
        self.dead = dead


def row_message(row: Row) -> bridges.Message:
    """A row of the (transformed) stream as the message a bridges sink writes."""
    body = row["body"]
    data = body.encode() if isinstance(body, str) else bytes(body or b"")
    target = row["target"] if "target" in row.__fields__ else None
    return bridges.Message(data, dict(row["headers"] or {}), row["id"] or "", target)


class RouteStreamWriter(DataSourceStreamWriter):
    """Writes each task's rows to the route's sink (see the module)."""

    def __init__(self, ref: RouteRef) -> None:
        self._ref = ref

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        messages = [row_message(row) for row in iterator]
        dead = trio.run(self._write, messages) if messages else 0
        return Written(len(messages), dead)

    async def _write(self, messages: list[bridges.Message]) -> int:
        route, _ = self._ref.load()
        # The executor resolved the config's secrets as the driver did: what it says (its
        # log, a dead letter's bridge-error, the task's error) masks them the same way.
        with bridges.redacting(self._ref.secrets()):
            sink = self._ref.build(route.sink, "sink")
            rejected = await write_all(sink, messages, route.batch.count, route.retry)
            if rejected:
                await self._dead_letter(route, rejected)
        return len(rejected)

    async def _dead_letter(
        self, route: bridges.RouteConfig, rejected: Sequence[tuple[bridges.Message, str]]
    ) -> None:
        if route.dead_letter is None:
            reasons = "; ".join(sorted({reason for _, reason in rejected}))
            raise bridges.MessageRejected(
                bridges.redact(f"{len(rejected)} rejected, no dead_letter: {reasons}")
            )
        sink = self._ref.build(route.dead_letter, "dead_letter")
        batch = [
            attrs.evolve(m, headers={**m.headers, ERROR_HEADER: reason}) for m, reason in rejected
        ]
        leftover = await write_all(sink, batch, route.batch.count, route.retry)
        if leftover:
            raise bridges.MessageRejected(f"the dead-letter sink rejected {len(leftover)}")


def _one_line(exc: BaseException) -> str:
    """An error as the one redacted line a dead letter's ``bridge-error`` carries."""
    text = " ".join(bridges.redact(str(exc)).split()) or type(exc).__name__
    if not isinstance(exc, bridges.MessageRejected | bridges.BatchRefused):
        text = f"{type(exc).__name__}: {text}"
    return bridges.redact(text[:MAX_ERROR_CHARS])


async def write_all(
    sink: bridges.Sink, messages: list[bridges.Message], size: int, retry: bridges.RetryPolicy
) -> list[tuple[bridges.Message, str]]:
    """Write ``messages`` durably in batches of ``size``; return what the sink rejected.

    One open sink for all of them; a failure closes it and opens it again
    after the retry policy's delay, from the batch that failed. A batch the
    target refused for a message it cannot name (:class:`bridges.BatchRefused`)
    is written again in halves, each on a freshly opened sink, until that
    message is alone, as ``bridges run``'s engine does: alone, it is retried by
    the retry policy, then rejected (dead-lettered) with the target's reason,
    and every other message is written.
    """
    rejected: list[tuple[bridges.Message, str]] = []
    batches = collections.deque(messages[i : i + size] for i in range(0, len(messages), size))
    attempt = 0
    while batches:
        try:
            async with sink.open() as writer:
                while batches:
                    batch = batches[0]
                    try:
                        await writer.write(batch)
                    except bridges.MessageRejected as exc:
                        out = set(range(len(batch)) if exc.indices is None else exc.indices)
                        reason = exc.reason_for
                        rejected += [
                            (m, bridges.redact(reason(i))) for i, m in enumerate(batch) if i in out
                        ]
                        batches[0] = [m for i, m in enumerate(batch) if i not in out]
                        if not batches[0]:
                            batches.popleft()
                        continue
                    batches.popleft()
                    attempt = 0
        except Exception as exc:
            error = unwrap_group(exc)
            batch = batches[0]
            if isinstance(error, bridges.BatchRefused) and len(batch) > 1:
                # Which message? Write each half on a fresh sink until it is alone.
                half = len(batch) // 2
                batches.popleft()
                batches.extendleft([batch[half:], batch[:half]])
                attempt = 0
                log.info(
                    "%s refused %d message(s) (%s); writing them in halves",
                    sink.describe(), len(batch), _one_line(error),
                )  # fmt: skip
                continue
            attempt += 1
            if attempt >= retry.attempts:
                if isinstance(error, bridges.BatchRefused):  # alone: given up, like the engine
                    rejected.append((batch[0], _one_line(error)))
                    batches.popleft()
                    attempt = 0
                    continue
                raise
            delay = retry.delay(attempt)
            log.warning(
                "%s: write failed (%s); again in %.1f s", sink.describe(), _one_line(error), delay
            )
            await trio.sleep(delay)
    return rejected
