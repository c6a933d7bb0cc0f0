"""engine = "spark" runs an unchanged route config (the same ids as engine = "local"), and
the data-lake sink ``type = "spark"``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import bridges
from bridges.spark import start_routes

from spark_kit import (  # noqa: F401 (fixtures)
    BrokerProcess,
    broker_fixture,
    drain,
    java_home,
    send,
    spark_fixture,
    wait_for,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "spark-jsonl-to-stomp.toml"
LINES = 120


def _setup(directory: Path, broker: BrokerProcess, queue: str) -> Path:
    """The example in ``directory``, pointed at the test broker and ``queue``, with its events."""
    directory.mkdir()
    text = EXAMPLE.read_text()
    text = text.replace("stomp://127.0.0.1:61613", broker.url).replace("/queue/events", queue)
    config = directory / "route.toml"
    config.write_text(text)
    with open(directory / "events.jsonl", "w") as file:
        for n in range(LINES):
            file.write(json.dumps({"type": f"t{n % 3}", "n": n}) + "\n")
    return config


def _ids(messages: list[Any]) -> set[str]:
    return {m.headers.get("bridge-id") for m in messages}


def test_the_example_gives_the_same_ids_on_both_engines(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    local_queue, spark_queue = f"/queue/l-{uuid.uuid4().hex}", f"/queue/s-{uuid.uuid4().hex}"
    local_config = _setup(tmp_path / "local", broker, local_queue)
    spark_config = _setup(tmp_path / "spark", broker, spark_queue)
    # The local engine: bridges run, as a user would.
    script = Path(sys.executable).with_name("bridges")
    process = subprocess.Popen(
        [str(script), "run", "--engine", "local", str(local_config)],
        cwd=local_config.parent,
        stderr=subprocess.DEVNULL,
    )
    try:
        local = drain(broker.url, local_queue, LINES, timeout=60)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    # The Spark engine: the same file, its queries on the test session.
    cwd = os.getcwd()
    os.chdir(spark_config.parent)
    try:
        config = bridges.load_config(
            spark_config, bridges.default_registry(), base_dir=spark_config.parent
        )
        assert config.bridge.engine == "spark"
        queries = start_routes(spark, config, str(spark_config))
    finally:
        os.chdir(cwd)
    try:
        on_spark = drain(broker.url, spark_queue, LINES, timeout=90)
    finally:
        for query in queries:
            query.stop()
    assert len(_ids(local)) == LINES
    assert _ids(on_spark) == _ids(local)
    # The transforms ran on the executors as they do locally.
    kinds = {m.headers.get("bridge-id"): m.headers.get("kind") for m in on_spark}
    assert kinds == {m.headers.get("bridge-id"): m.headers.get("kind") for m in local}
    assert {m.headers.get("event-id") for m in on_spark} == _ids(local)


def test_ctrl_c_stops_bridges_run_on_spark_with_the_summary_and_status_0(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """As a terminal's Ctrl-C does: SIGINT to the whole process group (the JVM
    and Spark's Python workers too), once the example's events flow."""
    queue = f"/queue/c-{uuid.uuid4().hex}"
    config = _setup(tmp_path / "ctrl-c", broker, queue)
    env = {**os.environ, "JAVA_HOME": java_home(), "PYSPARK_PYTHON": sys.executable}
    script = Path(sys.executable).with_name("bridges")
    process = subprocess.Popen(
        [str(script), "run", "--quiet", str(config)],
        cwd=config.parent, stderr=subprocess.PIPE, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        assert drain(broker.url, queue, 1, timeout=90)  # (flowing: the queries run)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    lines = err.decode(errors="replace").strip().splitlines()
    assert process.returncode == 0, lines[-20:]
    assert "bridges: running 1 route(s) on Spark (local[2])" in lines
    assert lines[-1] == "bridges: stopped", lines[-20:]


def test_a_route_into_a_spark_parquet_sink(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    queue = f"/queue/lake-{uuid.uuid4().hex}"
    config_path = tmp_path / "lake.toml"
    config_path.write_text(
        f"""
[bridge]
engine = "spark"
[spark]
checkpoint = "ckpt"
trigger = "200 ms"
[routes.orders]
source = {{ type = "stomp", url = "{broker.url}", destination = "{queue}" }}
sink = {{ type = "spark", format = "parquet", path = "lake", partition_by = ["destination"] }}
[[routes.orders.transforms]]
type = "json_extract"
fields = {{ region = "customer.region" }}
[[routes.orders.transforms]]
type = "filter"
header = "region"
equals = "test"
action = "drop"
"""
    )
    regions = ["eu", "us", "test"]
    send(broker.url, queue, [json.dumps({"n": n, "customer": {"region": regions[n % 3]}}).encode()
                             for n in range(60)])  # fmt: skip
    config = bridges.load_config(config_path, bridges.default_registry(), base_dir=tmp_path)
    queries = start_routes(spark, config, str(config_path))

    def rows() -> list[dict[str, Any]]:
        from pyspark.errors import AnalysisException

        try:  # as Spark reads a file sink's output: the files its log lists
            return list(spark.read.parquet(str(tmp_path / "lake")).collect())
        except AnalysisException:  # no batch committed yet
            return []

    try:
        wait_for(lambda: len(rows()) >= 40, timeout=90)
    finally:
        for query in queries:
            query.stop()
    found = rows()
    assert len(found) == 40  # the "test" region was filtered out on the executors
    assert {dict(r["headers"])["region"] for r in found} == {"eu", "us"}
    assert {r["destination"] for r in found} == {queue}
    assert len({r["id"] for r in found}) == 40
    assert (tmp_path / "lake").is_dir()
    assert list((tmp_path / "lake").glob("destination=*"))  # partitioned as configured
