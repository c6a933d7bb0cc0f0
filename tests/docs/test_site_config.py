"""The config reference against the config loader: the same keys, each described.

``docs/_ext/config_schema.py`` lists the keys of every table from the classes
the loader structures them into; the reference page renders that list. Here
the list is held against what the loader itself says it accepts: feed each
table an unknown key and read the ``(known: ...)`` of its error. A key the
loader accepts and the page would not show, or the reverse, fails; so does a
key without a description.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import config_schema  # (docs/_ext: pytest's pythonpath)
from bridges import ConfigError, default_registry, parse_config

UNKNOWN = "zz_not_a_key"
_SOURCE = {"type": "file", "path": "in"}
_SINK = {"type": "file", "path": "out"}


def _route(**table: Any) -> dict[str, Any]:
    return {"routes": {"r": {"source": _SOURCE, "sink": _SINK, **table}}}


def _config_with_unknown_key(table: config_schema.Table) -> dict[str, Any]:
    """A config whose ``table`` holds one key the loader cannot know."""
    kind, _, name = table.anchor.partition("-")
    if table.anchor in ("bridge", "broker", "spark"):
        return {table.anchor: {UNKNOWN: 1}, **_route()}
    if table.anchor == "routes":
        return _route(**{UNKNOWN: 1})
    if table.anchor in ("batch", "retry"):
        return _route(**{table.anchor: {UNKNOWN: 1}})
    endpoint = {"type": name, UNKNOWN: 1}
    if kind == "transform":
        return _route(transforms=[endpoint])
    return _route(**{kind: endpoint})


def _known(table: config_schema.Table, tmp_path: Path) -> set[str]:
    """The keys the loader says ``table`` accepts (its unknown-key error lists them)."""
    config, registry = _config_with_unknown_key(table), default_registry(plugins=False)
    with pytest.raises(ConfigError) as raised:
        parse_config(config, registry, base_dir=tmp_path)
    for problem in raised.value.problems:
        if problem.key.endswith(UNKNOWN):
            match = re.search(r"\(known: ([^)]*)\)", problem.message)
            assert match, problem
            return set(match.group(1).split(", "))
    raise AssertionError(f"{table.title}: {UNKNOWN} was not refused: {raised.value}")


@pytest.fixture(scope="module")
def schema() -> list[config_schema.Table]:
    return config_schema.schema()


def test_every_table_and_key_is_described(schema: list[config_schema.Table]) -> None:
    assert list(config_schema.problems(schema)) == []


def test_every_endpoint_and_transform_type_has_its_table(schema: list[config_schema.Table]) -> None:
    registry = default_registry(plugins=False)
    assert registry.unavailable() == []  # (the dev install has every family)
    listed = {table.anchor for table in schema}
    assert {f"{plugin.kind}-{plugin.name}" for plugin in registry.plugins()} <= listed


def test_the_reference_lists_exactly_the_keys_the_loader_accepts(
    schema: list[config_schema.Table], tmp_path: Path
) -> None:
    wrong = {}
    for table in schema:
        documented = {option.name for option in table.options}
        documented |= {f"{option.name}_file" for option in table.options if option.secret}
        if table.anchor == "spark":  # spark.NAME keys are free; "conf" is refused by name
            documented = (documented - {"spark.NAME"}) | {"conf"}
        known = _known(table, tmp_path)
        if known != documented:
            wrong[table.title] = (sorted(known - documented), sorted(documented - known))
    assert wrong == {}, "(accepted but not documented, documented but not accepted)"


def test_a_description_missing_from_a_class_is_reported() -> None:
    import attrs

    @attrs.frozen
    class Settings:
        """A table.

        Attributes:
          one: described.
          gone: a key the class does not have.
        """

        one: int = 1
        two: str = "x"

    table = config_schema.Table("t", "[t]", "A table.", Settings, config_schema.options(Settings))
    assert list(config_schema.problems([table])) == [
        "[t]: two: no description (Attributes: of "
        f"{__name__}.test_a_description_missing_from_a_class_is_reported.<locals>.Settings)",
        "[t]: gone: described, but test_a_description_missing_from_a_class_is_reported"
        ".<locals>.Settings has no such key",
    ]


def test_defaults_are_written_as_toml(schema: list[config_schema.Table]) -> None:
    options = {(t.anchor, o.name): o for t in schema for o in t.options}
    assert options[("bridge", "log_level")].default == '"info"'
    assert options[("bridge", "follow_secret_links")].default == "false"
    assert options[("source-stomp", "heartbeat")].default == "[10000, 10000]"
    assert options[("sink-file", "path")].default is None  # required
    assert options[("source-stomp", "passcode")].secret
