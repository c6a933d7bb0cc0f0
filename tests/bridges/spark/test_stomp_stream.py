"""The ``stomp`` format on a real Spark (local[2]): source, sink, Parquet, the log."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bridges.spark import SOURCE_SCHEMA

from spark_kit import (  # noqa: F401 (fixtures)
    BrokerProcess,
    broker_fixture,
    drain,
    send,
    spark_fixture,
    wait_for,
)


def _parquet_rows(path: Path) -> int:
    """Rows in the complete Parquet files under ``path`` (one being written counts 0)."""
    rows = 0
    for file in path.glob("*.parquet"):
        try:
            rows += pq.read_metadata(file).num_rows
        except (OSError, pa.ArrowInvalid):
            pass
    return rows


def _source(spark: Any, broker: BrokerProcess, destination: str, checkpoint: Path) -> Any:
    return (
        spark.readStream.format("stomp")
        .option("url", broker.url)
        .option("destination", destination)
        .option("checkpointLocation", str(checkpoint))
        .option("prefetch", "500")
        .load()
    )


def test_round_trip_stomp_to_transform_to_stomp(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    inbox, outbox = f"/queue/in-{uuid.uuid4().hex}", f"/queue/out-{uuid.uuid4().hex}"
    bodies = [f"message {i}".encode() for i in range(300)]
    send(broker.url, inbox, bodies, headers={"colour": "blue"})
    checkpoint = tmp_path / "ckpt"
    upper = _source(spark, broker, inbox, checkpoint).selectExpr(
        "cast(upper(cast(body as string)) as binary) as body",
        "map('source-id', id, 'colour', headers['colour']) as headers",
    )
    query = (
        upper.writeStream.format("stomp")
        .option("url", broker.url)
        .option("destination", outbox)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        received = drain(broker.url, outbox, len(bodies), timeout=60)
    finally:
        query.stop()
    assert sorted(m.body for m in received) == sorted(b.upper() for b in bodies)
    assert {m.headers.get("colour") for m in received} == {"blue"}
    # Each message names its source message and carries a deterministic bridge-id.
    source_ids = {m.headers.get("source-id") for m in received}
    assert len(source_ids) == len(bodies)
    bridge_ids = [m.headers.get("bridge-id") for m in received]
    assert len(set(bridge_ids)) == len(bodies)
    assert all(b is not None and b.count(":") == 3 for b in bridge_ids)
    # Nothing is left on the source queue: every message was acked.
    assert drain(broker.url, inbox, 1, timeout=0.5) == []
    # The query's end closed the driver-side subscription: a message sent now
    # is not taken into a prefetch window that nobody reads any more.
    send(broker.url, inbox, [b"after the end"])
    assert [m.body for m in drain(broker.url, inbox, 1, timeout=10)] == [b"after the end"]
    # Committed batches' log segments were deleted (the last one may remain).
    assert len(list((checkpoint / "stomp-wal").glob("*.seg"))) <= 1


def test_stomp_to_parquet_rows(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    inbox = f"/queue/lake-{uuid.uuid4().hex}"
    bodies = [f"row {i}".encode() for i in range(500)]
    send(broker.url, inbox, bodies, bridge_ids="fixed")
    send(broker.url, inbox, [b"other"], headers={"kind": "x"})
    checkpoint, output = tmp_path / "ckpt", tmp_path / "lake"
    query = (
        _source(spark, broker, inbox, checkpoint)
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: _parquet_rows(output) >= len(bodies) + 1, timeout=60)
    finally:
        query.stop()
    rows = pq.read_table(output).to_pylist()
    assert len(rows) == len(bodies) + 1
    assert sorted(r["body"] for r in rows) == sorted([*bodies, b"other"])
    other = next(r for r in rows if r["body"] == b"other")
    assert other["destination"] == inbox
    assert other["id"] == other["message_id"] != ""
    assert dict(other["headers"]).get("kind") == "x"
    assert "message-id" not in dict(other["headers"])
    assert other["received_at"] is not None
    # A producer's bridge-id is the stable id.
    assert {r["id"] for r in rows if r["body"] != b"other"} == {
        f"fixed-{i}" for i in range(len(bodies))
    }
    assert spark.createDataFrame([], SOURCE_SCHEMA).columns == [
        "destination",
        "message_id",
        "id",
        "headers",
        "body",
        "received_at",
    ]


def test_a_batch_run_again_after_a_crash_yields_the_same_rows(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    inbox = f"/queue/replay-{uuid.uuid4().hex}"
    send(broker.url, inbox, [f"r{i}".encode() for i in range(200)])
    checkpoint = tmp_path / "ckpt"
    seen: dict[int, list[tuple[Any, ...]]] = {}

    def collect(frame: Any, batch: int) -> None:
        seen[batch] = sorted(
            tuple(row) for row in frame.select("id", "message_id", "body").collect()
        )

    def run(until: Any) -> None:
        query = (
            _source(spark, broker, inbox, checkpoint)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            wait_for(until, timeout=60)
        finally:
            query.stop()

    run(lambda: sum(len(rows) for rows in seen.values()) >= 200)
    last = max(b for b, rows in seen.items() if rows)
    first_run = seen.pop(last)
    # A crash after the batch ran and before Spark recorded it as done: its
    # commit entry is missing (stop() may have come first), so the restarted
    # query runs it again from the log.
    (checkpoint / "commits" / str(last)).unlink(missing_ok=True)
    run(lambda: last in seen)
    assert seen[last] == first_run
    assert len(first_run) > 0


def test_the_sink_without_transactions_and_with_a_destination_column(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    inbox = f"/queue/plain-{uuid.uuid4().hex}"
    left, right = f"/queue/left-{uuid.uuid4().hex}", f"/queue/right-{uuid.uuid4().hex}"
    send(broker.url, inbox, [f"{i}".encode() for i in range(40)])
    checkpoint = tmp_path / "ckpt"
    routed = _source(spark, broker, inbox, checkpoint).selectExpr(
        "body",
        "id",
        f"if(cast(cast(body as string) as int) % 2 = 0, '{left}', '{right}') as destination",
    )
    query = (
        routed.writeStream.format("stomp")
        .option("url", broker.url)
        .option("transactional", "false")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        evens = drain(broker.url, left, 20, timeout=60)
        odds = drain(broker.url, right, 20, timeout=60)
    finally:
        query.stop()
    assert sorted(int(m.body) for m in evens) == list(range(0, 40, 2))
    assert sorted(int(m.body) for m in odds) == list(range(1, 40, 2))
    # The id column is the bridge-id: the source message's own id.
    assert all(m.headers.get("bridge-id") for m in evens + odds)
    assert len({m.headers.get("bridge-id") for m in evens + odds}) == 40
