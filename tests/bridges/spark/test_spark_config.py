"""[spark] and engine = "spark" in the config, as bridges check sees them (no Spark started)."""

from __future__ import annotations

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
