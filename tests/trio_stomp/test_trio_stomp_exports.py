"""The public surfaces of trio_stomp, pinned: an export added or removed fails here.

Changing a surface is fine; doing it unnoticed is not. Update the sets below
in the same commit, and say so in the README when users see the change.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import subprocess
import sys
import types

import pytest

SUBMODULES = {"frame", "broker", "testing", "util", "cli"}

SURFACES: dict[str, set[str]] = {
    "trio_stomp": {
        "Client",
        "ClientClosed",
        "ConnectFailed",
        "ConnectionEvent",
        "ConnectionLost",
        "Frame",
        "FrameParser",
        "HEARTBEAT",
        "Headers",
        "Heartbeat",
        "LocalProtocolError",
        "Message",
        "MessageBatch",
        "ProtocolError",
        "Reconnect",
        "RemoteProtocolError",
        "RequestTimeout",
        "ServerError",
        "StompError",
        "Subscription",
        "SubscriptionOverflow",
        "Transaction",
        "TransactionError",
        "VERSIONS",
        "connect",
        "encode",
        "wrap_stream",
    },
    "trio_stomp.frame": {
        "ACK_MODES",
        "AckMode",
        "CONNECT_RESERVED_HEADERS",
        "DEFAULT_PREFETCH",
        "DELIVERY_HEADERS",
        "Event",
        "Frame",
        "FrameParser",
        "FrameSplitter",
        "HEARTBEAT",
        "Headers",
        "HeadersLike",
        "Heartbeat",
        "LocalProtocolError",
        "PREFETCH_HEADERS",
        "ProtocolError",
        "RESERVED_HEADERS",
        "RemoteProtocolError",
        "SEND_RESERVED_HEADERS",
        "SUBSCRIBE_RESERVED_HEADERS",
        "StompError",
        "VERSIONS",
        "Version",
        "compiled",
        "encode",
    },
    "trio_stomp.testing": {
        "FakePeer",
        "FaultProxy",
        "Listening",
        "RawClient",
        "Tally",
        "fault_proxy",
        "lossless_run",
        "open_raw_client",
    },
    "trio_stomp.util": {
        "Endpoint",
        "backoff_delay",
        "bracket_host",
        "format_host_port",
        "parse_host_port",
        "printable",
        "redact_url",
        "unwrap_group",
    },
    "trio_stomp.cli": {"main"},
}


def _public(module: types.ModuleType) -> set[str]:
    return {
        name
        for name in dir(module)
        if not name.startswith("_")
        and not isinstance(getattr(module, name), types.ModuleType)
        and name not in SUBMODULES
    }


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_public_surface_is_pinned(name: str) -> None:
    module = importlib.import_module(name)
    assert _public(module) == SURFACES[name]


def test_star_import_gives_the_surface() -> None:
    import trio_stomp

    assert set(trio_stomp.__all__) == SURFACES["trio_stomp"]


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_every_export_is_documented_and_comes_from_trio_stomp(name: str) -> None:
    module = importlib.import_module(name)
    for export in SURFACES[name]:
        value = getattr(module, export)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("trio_stomp"), (export, value.__module__)
            assert inspect.getdoc(value), f"{name}.{export} has no docstring"


#: The options of the two ways in, keyword-only after the first.
SESSION_OPTIONS = [
    "login",
    "passcode",
    "heartbeat",
    "versions",
    "heartbeat_tolerance",
    "connect_timeout",
    "disconnect_timeout",
    "lenient",
    "max_frame_size",
    "headers",
]
SIGNATURES = {
    "connect": [
        "url",
        "host",
        "port",
        "vhost",
        *SESSION_OPTIONS,
        "ssl_context",
        "reconnect",
        "on_event",
    ],
    "wrap_stream": ["stream", "host", *SESSION_OPTIONS],
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_the_ways_in_take_the_pinned_options(name: str) -> None:
    import trio_stomp

    parameters = inspect.signature(getattr(trio_stomp, name)).parameters
    assert sorted(parameters) == sorted(SIGNATURES[name])
    first, *rest = parameters.values()
    assert first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in rest)


def test_the_package_names_the_same_objects_as_its_modules() -> None:
    import trio_stomp
    import trio_stomp.frame

    for export in SURFACES["trio_stomp"] & SURFACES["trio_stomp.frame"]:
        assert getattr(trio_stomp, export) is getattr(trio_stomp.frame, export)
    assert issubclass(trio_stomp.ConnectionLost, trio_stomp.frame.StompError)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import trio_stomp

    with pytest.raises(AttributeError, match="conect"):
        trio_stomp.conect  # type: ignore[attr-defined]  # noqa: B018  # the typo is the point


def _imported_by(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    return set(result.stdout.split())


def test_importing_frame_imports_neither_trio_nor_anything_above_it() -> None:
    modules = _imported_by("import trio_stomp.frame")
    assert not {m for m in modules if m == "trio" or m.startswith("trio.")}
    ours = {m for m in modules if m.startswith("trio_stomp")}
    assert ours >= {"trio_stomp", "trio_stomp.frame", "trio_stomp.frame._parser"}
    assert ours == {m for m in ours if m == "trio_stomp" or m.startswith("trio_stomp.frame")}


def test_importing_util_imports_no_trio() -> None:
    modules = _imported_by("import trio_stomp.util")
    assert not {m for m in modules if m == "trio" or m.startswith("trio.")}
    assert "trio_stomp._client" not in modules


def _imports(path: pathlib.Path, package: str) -> set[str]:
    """The trio_stomp modules ``path`` imports, at run time or under TYPE_CHECKING alike."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
                names = [f"{target}.{alias.name}" for alias in node.names]
            else:
                target = node.module or ""
                names = [f"{target}.{alias.name}" for alias in node.names]
            found.update(name for name in [target, *names] if name.startswith("trio_stomp"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("trio_stomp"))
    return found


def _import_graph() -> dict[str, set[str]]:
    """trio_stomp module -> the trio_stomp modules it imports."""
    root = pathlib.Path(trio_stomp_root())
    modules: dict[str, pathlib.Path] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        # The broker's session and router refer to each other under TYPE_CHECKING
        # (broker/ is another piece of work); the client and everything else may not.
        if not name.startswith("trio_stomp.broker."):
            modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        # A package imports its own submodules to re-export them: not a cycle.
        graph[name] = {
            m
            for m in _imports(path, package)
            if m in modules and m != name and not name.startswith(f"{m}.")
        }
    return graph


def test_no_import_cycle_among_trio_stomp_modules() -> None:
    """Not even under TYPE_CHECKING: each layer knows only the ones below it (the
    client's modules, frame/, testing/, cli/; broker/ is left out, see above)."""
    graph = _import_graph()
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        seen[name] = 1
        for target in sorted(graph[name]):
            if seen.get(target) == 1:
                cycle = [*path[path.index(target) :], target] if target in path else [name, target]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if target not in seen:
                visit(target, [*path, target])
        seen[name] = 2

    for name in sorted(graph):
        if name not in seen:
            visit(name, [name])
    assert "trio_stomp._client" in graph["trio_stomp._connect"]  # the graph is not empty


def trio_stomp_root() -> str:
    import trio_stomp

    return str(pathlib.Path(trio_stomp.__file__).parent)


def test_the_broker_imports_only_frame_and_the_transport() -> None:
    """broker/ is a server built on the codec and the byte streams, never on the
    client's private modules."""
    root = pathlib.Path(trio_stomp_root()) / "broker"
    allowed = (
        "trio_stomp.frame",
        "trio_stomp.broker",
        "trio_stomp._transport",
        "trio_stomp._websocket",
        "trio_stomp.util",
        "trio_stomp._version",  # (the CONNECTED frame's server header)
    )
    for path in root.glob("*.py"):
        imported = _imports(path, "trio_stomp.broker")
        assert all(m.startswith(allowed) for m in imported), (path.name, sorted(imported))
