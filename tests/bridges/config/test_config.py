"""Config files: typed classes, errors naming file/route/key, secrets, the registry, the CLI."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import attrs
import pytest
from family_kit import bridges_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bridges
import trio_stomp
from bridges import (
    ConfigError,
    Problem,
    Registry,
    build_routes,
    default_registry,
    parse_config,
)
from bridges._cli import main as cli_main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
GOOD = """
[bridge]
shutdown_timeout = 3

[routes.in]
in_flight = 50
batch = { count = 10, time = 0.5 }
retry = { attempts = 2, initial = 0.5 }
source = { type = "file", path = "inbox", settle = 0 }
sink = { type = "stomp", url = "stomp://127.0.0.1:61613", destination = "/queue/a" }
dead_letter = { type = "file", path = "dead" }

[[routes.in.transforms]]
type = "set_headers"
headers = { origin = "inbox", copy = "{header:file-name}" }

[routes.out]
source = { type = "stomp", destination = "/queue/a", login = "guest", passcode = "guest" }
sink = { type = "file", path = "outbox", format = "files" }
"""


def load(text: str, tmp_path: Path, registry: Registry | None = None) -> bridges.Config:
    return parse_config(
        tomllib.loads(text),
        registry or default_registry(plugins=False),
        file="bridge.toml",
        base_dir=tmp_path,
    )


def problems(text: str, tmp_path: Path) -> list[str]:
    def load_and_build() -> None:
        config = load(text, tmp_path)
        build_routes(config, default_registry(plugins=False), checking=True)

    with pytest.raises(ConfigError) as info:
        load_and_build()
    return [str(p) for p in info.value.problems]


def test_a_good_config_becomes_typed_routes(tmp_path: Path) -> None:
    config = load(GOOD, tmp_path)
    first, second = config.routes
    assert config.bridge.shutdown_timeout == 3.0
    assert (first.name, first.in_flight, first.batch.count, first.batch.time) == ("in", 50, 10, 0.5)
    assert first.retry.attempts == 2
    assert first.retry.initial == 0.5
    assert first.source.config.path == "inbox"
    assert first.source.config.settle == 0.0
    assert first.dead_letter is not None
    assert first.dead_letter.type == "file"
    assert first.transforms[0].config.headers["copy"] == "{header:file-name}"
    assert second.source.config.passcode == "guest"
    routes = build_routes(config, default_registry(plugins=False), checking=True)
    assert [r.name for r in routes] == ["in", "out"]
    assert not (tmp_path / "inbox").exists()  # check creates nothing


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            (
                'source = { type = "file", path = "inbox", settle = 0 }',
                'source = { type = "file", path = "inbox", setle = 0 }',
            ),
            "bridge.toml: route 'in': source.setle: unknown key; did you mean 'settle'?",
        ),
        (
            ("in_flight = 50", 'in_flight = "many"'),
            "bridge.toml: route 'in': in_flight: expected an integer, got 'many' (string)",
        ),
        (("in_flight = 50", "in_flight = 0"), "bridge.toml: route 'in': in_flight: must be > 0: 0"),
        (
            ('destination = "/queue/a" }\ndead', 'destinatio = "/queue/a" }\ndead'),
            "bridge.toml: route 'in': sink.destinatio: unknown key",
        ),
        (
            ('type = "set_headers"', 'type = "set_header"'),
            "bridge.toml: route 'in': transforms[0].type: unknown transform type 'set_header'",
        ),
        (
            ('path = "outbox", format', "format"),
            "bridge.toml: route 'out': sink.path: missing (required)",
        ),
        (
            ('format = "files"', 'format = "csv"'),
            "bridge.toml: route 'out': sink.format: expected one of 'jsonl', 'files', got 'csv'",
        ),
        (
            ("retry = { attempts = 2,", "retry = { attempts = true,"),
            "bridge.toml: route 'in': retry.attempts: expected an integer, got True (boolean)",
        ),
        (
            ('copy = "{header:file-name}"', 'copy = "{heder:x}"'),
            "bridge.toml: route 'in': transforms[0].headers.copy: unknown field {heder:x}",
        ),
        (
            ('url = "stomp://127.0.0.1:61613"', 'url = "embedded"'),
            "bridge.toml: route 'in': sink.url: \"embedded\" needs [broker] embedded = true",
        ),
        (
            ('url = "stomp://127.0.0.1:61613"', 'url = ["stomp://a:1", "http://b:2"]'),
            "bridge.toml: route 'in': sink.url: unsupported URL scheme 'http'",
        ),
        (
            ("shutdown_timeout = 3", "shutdown_timeout = 3\nverbose = true"),
            "bridge.toml: bridge.verbose: unknown key",
        ),
    ],
)
def test_each_mistake_names_the_file_the_route_and_the_key(
    tmp_path: Path, change: tuple[str, str], expected: str
) -> None:
    old, new = change
    assert old in GOOD
    found = problems(GOOD.replace(old, new, 1), tmp_path)
    assert any(p.startswith(expected) for p in found), found


def test_every_problem_is_reported_not_just_the_first(tmp_path: Path) -> None:
    text = GOOD.replace("in_flight = 50", "in_flight = -1\ncolour = 1").replace(
        'format = "files"', "format = 3"
    )
    found = problems(text, tmp_path)
    assert len(found) == 3, found


def test_a_config_without_routes_or_tables_is_an_error(tmp_path: Path) -> None:
    assert problems("", tmp_path) == ["bridge.toml: routes: missing (required)"]
    assert problems("[routes]", tmp_path) == [
        "bridge.toml: routes: no routes: add a [routes.NAME] table"
    ]
    assert problems("routes = 3", tmp_path) == [
        "bridge.toml: routes: expected a table, got 3 (integer)"
    ]
    found = problems("[routes.x]\nsource = 1\nsink = { }", tmp_path)
    assert "bridge.toml: route 'x': source: expected a table, got 1 (integer)" in found
    assert any(p.startswith("bridge.toml: route 'x': sink.type: a sink needs type") for p in found)


def test_secrets_come_from_the_environment_or_from_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRIDGE_LOGIN", "alice")
    (tmp_path / "secret").write_text("s3cret\n")
    text = GOOD.replace(
        'login = "guest", passcode = "guest"', 'login = "${BRIDGE_LOGIN}", passcode_file = "secret"'
    )
    config = load(text, tmp_path)
    source = config.routes[1].source.config
    assert (source.login, source.passcode) == ("alice", "s3cret")
    assert "s3cret" not in repr(source)


def test_missing_secrets_are_errors_that_say_which(tmp_path: Path) -> None:
    text = GOOD.replace(
        'login = "guest", passcode = "guest"',
        'login = "${NOT_SET_ANYWHERE_42}", passcode_file = "nope"',
    )
    found = problems(text, tmp_path)
    assert any(
        "route 'out': source.login: environment variable NOT_SET_ANYWHERE_42 is not set" in p
        for p in found
    ), found
    assert any("route 'out': source.passcode_file: cannot read" in p for p in found), found
    both = GOOD.replace('passcode = "guest"', 'passcode = "x", passcode_file = "y"')
    found = problems(both, tmp_path)
    assert any("give 'passcode' or 'passcode_file', not both" in p for p in found)
    assert (
        load(GOOD.replace('"guest" }', '"$${literal}" }'), tmp_path)
        .routes[1]
        .source.config.passcode
        == "${literal}"
    )


def test_not_toml_and_unreadable_files_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[routes\n")
    with pytest.raises(ConfigError, match=r"bad.toml: not valid TOML: .*line 1"):
        bridges.load_config(bad, Registry())
    with pytest.raises(ConfigError, match=r"missing.toml: cannot read: No such file"):
        bridges.load_config(tmp_path / "missing.toml", Registry())


# -- registry ----------------------------------------------------------------------


@attrs.frozen
class NullConfig:
    """A sink that drops everything."""

    level: int = 0


def test_an_empty_registry_knows_nothing_and_registered_plugins_are_used(tmp_path: Path) -> None:
    registry = Registry()
    assert registry.names("source") == []
    with pytest.raises(ConfigError, match=r"unknown source type 'file' \(known: none registered"):
        load(
            '[routes.a]\nsource = { type = "file", path = "x" }\nsink = { type = "x" }',
            tmp_path,
            registry,
        )
    registry.register("sink", "null", NullConfig, lambda c, ctx: c)
    registry.register("source", "null", NullConfig, lambda c, ctx: c)
    config = load(
        '[routes.a]\nsource = { type = "null" }\nsink = { type = "null", level = 2 }',
        tmp_path,
        registry,
    )
    assert config.routes[0].sink.config == NullConfig(2)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("sink", "null", NullConfig, lambda c, ctx: c)
    clone = registry.copy()
    clone.register("sink", "null", NullConfig, lambda c, ctx: c, replace=True)
    assert registry.get("sink", "null").doc == "A sink that drops everything."


def test_plugins_load_from_the_entry_point_group(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class Entry:
        def __init__(self, name: str, fail: bool) -> None:
            self.name, self.value, self.fail = name, f"pkg:{name}", fail

        def load(self) -> Any:
            if self.fail:
                raise ImportError("broken plugin")
            return lambda registry: calls.append(self.name)

    def fake_entry_points(group: str) -> list[Entry]:
        assert group == bridges.ENTRY_POINT_GROUP == "trio_stomp.bridges"
        return [Entry("good", False), Entry("broken", True)]

    monkeypatch.setattr("bridges._registry.entry_points", fake_entry_points)
    assert Registry().load_entry_points() == ["good"]
    assert calls == ["good"]


def test_a_plugin_that_takes_a_built_ins_name_is_refused_whole_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Entry:
        name, value = "sneaky", "sneaky_pkg:register"

        def load(self) -> Any:
            def register(registry: Registry) -> None:
                registry.register("sink", "sneaky", NullConfig, lambda c, ctx: c)
                registry.register("sink", "file", NullConfig, lambda c, ctx: c)  # a built-in's

            return register

    monkeypatch.setattr("bridges._registry.entry_points", lambda group: [Entry()])
    registry = bridges.default_registry()
    line = (
        "plugin 'sneaky' (sneaky_pkg:register) refused: sink 'file' is a built-in's name "
        "(rename the plugin's types)"
    )
    assert registry.refused() == [line]
    assert "sneaky" not in registry.names("sink")  # all or nothing
    assert registry.get("sink", "file").config is not NullConfig  # the built-in kept its name
    config = tmp_path / "c.toml"
    config.write_text(
        "[routes.a]\n"
        'source = { type = "file", path = "in" }\n'
        'sink = { type = "file", path = "out" }\n'
    )
    assert cli_main(["check", str(config)]) == 0
    said = capsys.readouterr()
    assert f"bridges: warning: {line}\n" in said.err
    assert "Traceback" not in said.err + said.out


# -- properties --------------------------------------------------------------------

_values = st.one_of(
    st.integers(-5, 5),
    st.booleans(),
    st.text(max_size=5),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_keys = st.sampled_from(
    [
        "type",
        "path",
        "mode",
        "settle",
        "format",
        "url",
        "destination",
        "prefetch",
        "body",
        "confirm",
        "heartbeat",
        "passcode",
        "rotate_bytes",
        "name",
        "bogus",
        "headers",
    ]
)


_REGISTRY = default_registry(plugins=False)  # built once: imports are not what is under test


# Deterministic on a cold, loaded machine: the inputs are tiny, so a slow draw or a slow example
# is the machine (first imports, other processes), never the strategy: no timing checks.
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    source=st.dictionaries(_keys, _values, max_size=5),
    sink=st.dictionaries(_keys, _values, max_size=5),
    route_extra=st.dictionaries(
        st.sampled_from(["in_flight", "batch", "retry", "x"]), _values, max_size=2
    ),
)
def test_any_table_either_loads_or_fails_with_located_problems(
    tmp_path: Path, source: dict[str, Any], sink: dict[str, Any], route_extra: dict[str, Any]
) -> None:
    source.setdefault("type", "file")
    sink.setdefault("type", "stomp")
    data = {"routes": {"r": {"source": source, "sink": sink, **route_extra}}}
    problems: list[Problem] = []
    try:
        config = parse_config(data, _REGISTRY, file="f.toml", base_dir=tmp_path)
        build_routes(config, _REGISTRY, checking=True)
    except ConfigError as exc:
        problems = list(exc.problems)
        assert problems
    for problem in problems:
        assert problem.file == "f.toml"
        assert problem.route == "r"
        assert problem.key
        assert str(problem).startswith("f.toml: route 'r': ")


# -- the command line ----------------------------------------------------------------


def test_bridges_check_accepts_the_quickstart_and_reports_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_main(["check", str(EXAMPLES / "quickstart.toml")]) == 0
    err = capsys.readouterr().err
    assert "OK, 2 route(s)" in err
    assert "inbox-to-queue" in err
    assert not (tmp_path / "inbox").exists()
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.replace("settle = 0", "settle = -1"))
    assert cli_main(["check", str(bad)]) == 2
    assert "bad.toml: route 'in': source.settle: must be >= 0.0: -1.0" in capsys.readouterr().err


def test_bridges_version_prints_the_package_version_and_the_codecs_build() -> None:
    """From the installed command, as a user runs it: trio-stomp's version (one package)
    and which build of the codec runs."""
    out = subprocess.run([*bridges_command(), "--version"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    codec = "compiled codec" if trio_stomp.frame.compiled else "pure Python"
    assert out.stdout == f"bridges {importlib.metadata.version('trio-stomp')} ({codec})\n"


def test_every_example_config_passes_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RABBITMQ_PASSCODE", "guest")
    monkeypatch.setenv("STOMP_PASSCODE", "guest")
    monkeypatch.setenv("ORDERS_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    examples = sorted(EXAMPLES.glob("*.toml"))
    assert examples
    for example in examples:
        config = bridges.load_config(example, default_registry(plugins=False))
        build_routes(config, default_registry(plugins=False), checking=True)


def test_the_public_surface_is_pinned() -> None:
    # isidentifier: pytest's assertion rewriting may add '@py_builtins' and the like;
    # subpackages (endpoints, service, testing) are attributes once imported, not exports.
    public = sorted(
        n
        for n in dir(bridges)
        if n.isidentifier()
        and not n.startswith("_")
        and not isinstance(getattr(bridges, n), types.ModuleType)
    )
    assert public == [
        "BatchRefused", "BridgeSettings", "BrokerSettings", "BulkReceiver", "CarryingSink",
        "CarryingWriter", "Config", "ConfigError", "Context", "ENTRY_POINT_GROUP", "Envelope",
        "InvalidSetting",
        "InvalidSettings", "Message", "MessageRejected", "Plugin", "PositionError", "Positions",
        "Problem", "Receiver", "Registry", "RetryPolicy", "Route",
        "RouteConfig", "RouteStats", "Shared", "Sink", "Source", "SparkSettings", "Template",
        "TemplateError", "Transform", "Unavailable", "UnreadableEnvelope", "Worker", "Writer",
        "blocking", "build_routes", "default_registry", "load_config", "open_shared",
        "parse_config", "prepare_each", "redact", "redacting", "run_bridge", "run_routes",
        "shared_resource", "worker_thread",
    ]  # fmt: skip


def test_the_console_script_lists_plugins() -> None:
    script = Path(sys.executable).with_name("bridges")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "bridges._cli"]
    done = subprocess.run([*command, "plugins"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert "source    stomp" in done.stdout
    assert "transform json_extract" in done.stdout
    assert "``" not in done.stdout  # plain text for people, not reStructuredText
    assert 'type = "json_extract"' in done.stdout


def test_one_check_reports_every_problem_of_a_config_constructors_included(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user fixes a config in one round: a route whose sink fails the type check
    still has its source's constructor checked, and one constructor says every
    setting it refuses."""
    config = tmp_path / "c.toml"
    config.write_text(
        "[routes.a]\n"
        'source = { type = "file", path = "in", done_dir = "/abs" }\n'  # the constructor's
        'sink = { type = "file", path = "out", format = "nope" }\n'  # the type check's
        "[routes.b]\n"
        'source = { type = "file", path = "in2" }\n'
        'sink = { type = "file", path = "out2", prefix = "a/b", name = "{header:" }\n'
        "[routes.c]\n"
        "in_flite = 3\n"  # the route's own key
        'source = { type = "file", path = "in3", done_dir = "../x" }\n'
        'sink = { type = "file", path = "out3" }\n'
    )
    assert cli_main(["check", str(config)]) == 2
    lines = capsys.readouterr().err.splitlines()
    where = f"bridges: {config}: route"
    assert f"{where} 'a': source.done_dir: must be a relative path inside the directory" in lines
    assert any(line.startswith(f"{where} 'a': sink.format: expected one of") for line in lines)
    assert f"{where} 'b': sink.prefix: must be a plain file name prefix" in lines
    assert any(line.startswith(f"{where} 'b': sink.name: ") for line in lines), lines
    assert any(line.startswith(f"{where} 'c': in_flite: ") for line in lines), lines
    assert f"{where} 'c': source.done_dir: must be a relative path inside the directory" in lines
    assert len(lines) == 6, lines


def test_invalid_settings_raises_what_it_holds() -> None:
    bridges.InvalidSettings.raise_any([])
    one = bridges.InvalidSetting("a", "bad")
    with pytest.raises(bridges.InvalidSetting) as single:
        bridges.InvalidSettings.raise_any([one])
    assert single.value is one
    with pytest.raises(bridges.InvalidSettings) as several:
        bridges.InvalidSettings.raise_any([one, bridges.InvalidSetting("b", "worse")])
    assert [(e.key, e.message) for e in several.value.found] == [("a", "bad"), ("b", "worse")]
    assert str(several.value) == "a: bad; b: worse"
