"""[spark] and engine = "spark" in the config, as bridges check sees them (no Spark started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import bridges

_ROUTE = {
    "source": {"type": "stomp", "url": "stomp://127.0.0.1:61613", "destination": "/queue/a"},
    "sink": {"type": "spark", "format": "parquet", "path": "lake"},
}


def _parse(data: dict[str, Any], **kwargs: Any) -> bridges.Config:
    return bridges.parse_config(data, bridges.default_registry(plugins=False), **kwargs)


def _problems(data: dict[str, Any], **kwargs: Any) -> list[str]:
    with pytest.raises(bridges.ConfigError) as caught:
        _parse(data, **kwargs)
    return [f"{p.key}: {p.message}" for p in caught.value.problems]


def test_the_spark_table_takes_spark_settings_flat_or_dotted() -> None:
    config = _parse(
        {
            "bridge": {"engine": "spark"},
            "spark": {
                "master": "local[2]",
                "checkpoint": "ckpt",
                "trigger": "250 ms",
                "spark": {"ui": {"enabled": False}, "executor": {"cores": 2}},
                "spark.sql.shuffle.partitions": "4",
            },
            "routes": {"a": _ROUTE},
        }
    )
    assert config.bridge.engine == "spark"
    assert config.spark.master == "local[2]"
    assert config.spark.trigger == "250 ms"
    assert config.spark.conf == {
        "spark.ui.enabled": "false",
        "spark.executor.cores": "2",
        "spark.sql.shuffle.partitions": "4",
    }


def test_engine_spark_needs_a_checkpoint_and_no_embedded_broker() -> None:
    problems = _problems(
        {"bridge": {"engine": "spark"}, "broker": {"embedded": True}, "routes": {"a": _ROUTE}}
    )
    assert any(p.startswith("spark.checkpoint: missing") for p in problems)
    assert any(p.startswith("broker.embedded: not with engine") for p in problems)


def test_a_spark_sink_needs_the_spark_engine_and_the_flag_overrides_the_file() -> None:
    problems = _problems({"routes": {"a": _ROUTE}})
    assert problems == [
        'sink.type: "spark" needs [bridge] engine = "spark" (or bridges run --engine spark)'
    ]
    config = _parse({"spark": {"checkpoint": "c"}, "routes": {"a": _ROUTE}}, engine="spark")
    assert config.bridge.engine == "spark"


def test_connect_headers_of_a_stomp_source_are_refused_under_spark() -> None:
    source = {**_ROUTE["source"], "connect_headers": {"client-id": "c1"}}
    problems = _problems(
        {"spark": {"checkpoint": "c"}, "routes": {"a": {**_ROUTE, "source": source}}},
        engine="spark",
    )
    assert problems == [
        'source.connect_headers: not with engine = "spark" (the Spark stomp source sends none)'
    ]


def test_bad_spark_settings_are_named() -> None:
    problems = _problems(
        {
            "bridge": {"engine": "spark"},
            "spark": {"checkpoint": "c", "trigger": "soon", "conf": {}, "colour": "red"},
            "routes": {"a": _ROUTE},
        }
    )
    assert any(p.startswith("spark.conf: give Spark settings as spark.NAME") for p in problems)
    problems = _problems(
        {
            "bridge": {"engine": "spark"},
            "spark": {"checkpoint": "c", "trigger": "soon", "colour": "red"},
            "routes": {"a": _ROUTE},
        }
    )
    assert any(p.startswith("spark.trigger:") for p in problems)
    assert any(p.startswith("spark.colour: unknown key") for p in problems)


def test_bridges_check_with_the_engine_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bridges._cli import main

    config = tmp_path / "route.toml"
    config.write_text(
        '[spark]\ncheckpoint = "ckpt"\n[routes.a]\n'
        'source = { type = "stomp", url = "stomp://127.0.0.1:61613", destination = "/queue/a" }\n'
        'sink = { type = "spark", format = "parquet", path = "lake" }\n'
    )
    assert main(["check", str(config)]) == 2
    assert 'needs [bridge] engine = "spark"' in capsys.readouterr().err
    assert main(["check", "--engine", "spark", str(config)]) == 0
    err = capsys.readouterr().err
    assert "-> spark parquet" in err
    assert "engine spark: master local[*], checkpoint ckpt" in err


def test_stomp_options_are_checked_when_the_query_is_defined() -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from bridges.spark._options import StompOptions
    from bridges.spark._sink import StompStreamWriter

    with pytest.raises(ValueError, match="checkpointLocation: missing"):
        StompOptions.from_options({"url": "stomp://h", "destination": "/q"}, role="source")
    with pytest.raises(ValueError, match="unknown option"):
        StompOptions.from_options({"url": "stomp://h", "colour": "red"}, role="sink")
    with pytest.raises(ValueError, match="prefetch: must be >= 1"):
        StompOptions.from_options({"url": "stomp://h", "prefetch": "0"}, role="sink")
    options = StompOptions.from_options(
        {"url": "stomp://a:1, stomp://b:2", "checkpointLocation": "file:/c/", "destination": "/q",
         "header.selector": "x = 1", "transactional": "false"},
        role="source",
    )  # fmt: skip
    assert options.urls == ("stomp://a:1", "stomp://b:2")
    assert options.wal_path == "/c/stomp-wal"
    assert options.subscribe_headers == (("selector", "x = 1"),)
    assert options.transactional is False
    no_body = StructType([StructField("text", StringType())])
    with pytest.raises(ValueError, match="needs a body column"):
        StompStreamWriter(options, no_body)
    no_destination = StompOptions.from_options({"url": "stomp://h"}, role="sink")
    with pytest.raises(ValueError, match="destination option or a destination column"):
        StompStreamWriter(no_destination, StructType([StructField("body", StringType())]))
