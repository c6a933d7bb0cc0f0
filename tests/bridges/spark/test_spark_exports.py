"""bridges.spark's public surface is pinned; register() makes format("stomp") known."""

from __future__ import annotations

from typing import Any

import bridges.spark

from spark_kit import spark_fixture  # noqa: F401 (a fixture)


def test_the_public_surface_is_pinned() -> None:
    assert sorted(bridges.spark.__all__) == [
        "SOURCE_SCHEMA",
        "StompDataSource",
        "register",
        "run_on_spark",
        "start_routes",
    ]
    for name in bridges.spark.__all__:
        assert getattr(bridges.spark, name) is not None
    assert bridges.spark.StompDataSource.name() == "stomp"


def test_importing_the_package_starts_no_trio_loop_or_thread() -> None:
    import threading

    assert not [t for t in threading.enumerate() if t.name.startswith("bridges-spark-pump")]


def test_a_bad_option_is_an_error_naming_it(spark: Any, tmp_path: Any) -> None:
    import pytest

    reader = spark.readStream.format("stomp").option("url", "stomp://127.0.0.1:1")
    with pytest.raises(Exception, match="destination"):
        reader.option("checkpointLocation", str(tmp_path)).load().writeStream.format(
            "console"
        ).start().awaitTermination(30)
