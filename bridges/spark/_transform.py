"""A route's transforms on executors, one Arrow batch at a time (``mapInArrow``).

The same transform objects as ``bridges run`` (built from the config by
bridges' registry), applied per message in each Arrow batch: a message
comes out changed, or is dropped (None: filtered out is done). An async
transform is awaited on a Trio loop of the task's own. A transform that
raises sends the message to the route's dead-letter sink with the error,
as the local engine does; without one the task fails (and Spark retries
it).

The output has the source's columns plus ``target``: the destination a
transform chose (``Message.destination``), None when none did.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa
import trio

import bridges

from ._bridged import ERROR_HEADER, RouteRef, write_all
from ._reader import SOURCE_SCHEMA

#: The transformed stream (Spark DDL).
TRANSFORMED_SCHEMA = f"{SOURCE_SCHEMA}, target string"

_HEADERS = pa.map_(pa.string(), pa.string())


class TransformFailed(Exception):
    """A transform raised, and the route has no dead-letter sink."""


async def _resolve(value: Any) -> Any:
    return await value


def apply(transforms: list[Any], message: bridges.Message) -> bridges.Message | None:
    """Run ``transforms`` on ``message`` in order; None when one dropped it."""
    current: bridges.Message | None = message
    for transform in transforms:
        result = transform(current)
        if inspect.isawaitable(result):
            result = trio.run(_resolve, result)
        if result is None:
            return None
        if not isinstance(result, bridges.Message):
            raise TypeError(f"a transform returned {type(result).__name__}, not Message or None")
        current = result
    return current


@attrs.frozen
class RouteTransformer:
    """The ``mapInArrow`` function of one route; picklable (it carries only the reference)."""

    ref: RouteRef

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        route, _ = self.ref.load()
        transforms = [self.ref.build(t, "transform") for t in route.transforms]
        for batch in batches:
            yield self._batch(route, transforms, batch)

    def _batch(
        self, route: bridges.RouteConfig, transforms: list[Any], batch: pa.RecordBatch
    ) -> pa.RecordBatch:
        kept: list[int] = []
        ids: list[str] = []
        headers: list[list[tuple[str, str]]] = []
        bodies: list[bytes] = []
        targets: list[str | None] = []
        failed: list[tuple[bridges.Message, str]] = []
        columns = batch.to_pydict()
        for index in range(batch.num_rows):
            message = bridges.Message(
                columns["body"][index] or b"",
                dict(columns["headers"][index] or ()),
                columns["id"][index] or "",
            )
            try:
                result = apply(transforms, message)
            except Exception as exc:
                failed.append((message, f"transform failed: {exc!r}"))
                continue
            if result is None:
                continue
            kept.append(index)
            ids.append(result.id)
            headers.append(list(result.headers.items()))
            bodies.append(result.body)
            targets.append(result.destination)
        if failed:
            self._dead_letter(route, failed)
        take = pa.array(kept, type=pa.int64())
        return pa.RecordBatch.from_arrays(
            [
                batch.column("destination").take(take),
                batch.column("message_id").take(take),
                pa.array(ids, type=pa.string()),
                pa.array(headers, type=_HEADERS),
                pa.array(bodies, type=pa.binary()),
                batch.column("received_at").take(take),
                pa.array(targets, type=pa.string()),
            ],
            names=[*batch.schema.names, "target"],
        )

    def _dead_letter(
        self, route: bridges.RouteConfig, failed: list[tuple[bridges.Message, str]]
    ) -> None:
        if route.dead_letter is None:
            raise TransformFailed(f"route {route.name}: {failed[0][1]} (and no dead_letter sink)")
        sink = self.ref.build(route.dead_letter, "dead_letter")
        batch = [attrs.evolve(m, headers={**m.headers, ERROR_HEADER: why}) for m, why in failed]
        left = trio.run(write_all, sink, batch, route.batch.count, route.retry)
        if left:
            raise TransformFailed(f"route {route.name}: the dead-letter sink rejected {len(left)}")
