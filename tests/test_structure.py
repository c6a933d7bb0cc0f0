"""The library's structure: no import cycle, no import up a layer, no module over 600 lines.

Read statically (tests/structure_kit.py: ast, nothing imported), so the whole
check costs well under a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest
from architecture_kit import PICTURE, render
from structure_kit import (
    LAYERS,
    cycles,
    import_graph,
    layer_of,
    library_modules,
    line_counts,
)

#: The most lines a library module may have: a module is read in one sitting.
MAX_LINES: Final = 600


@pytest.fixture(scope="module")
def graph() -> dict[str, frozenset[str]]:
    """The library's import graph, read once for the tests of this module (a second)."""
    return import_graph()


def test_no_import_cycle_in_trio_stomp_or_bridges(graph: dict[str, frozenset[str]]) -> None:
    found = list(cycles(graph))
    assert not found, "modules that import each other in a loop:\n" + "\n".join(
        " <-> ".join(group) for group in found
    )


def test_no_module_imports_from_a_layer_above_its_own(graph: dict[str, frozenset[str]]) -> None:
    up = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert not up, "imports that reach up a layer:\n" + "\n".join(up)


def test_no_library_module_is_over_600_lines() -> None:
    long = {name: lines for name, lines in line_counts().items() if lines > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by idea): {long}"


def test_the_architecture_picture_is_current(graph: dict[str, frozenset[str]]) -> None:
    drawn = render(graph)
    assert PICTURE.read_text(encoding="utf-8") == drawn, (
        "docs/explanation/architecture.svg is stale: .venv/bin/python tests/architecture_kit.py"
    )


# -- the kit finds what it must ------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> dict[str, frozenset[str]]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(library_modules(root, ("pkg",)))


def test_a_cycle_hidden_in_a_function_or_under_type_checking_is_found(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/_a.py": "def f():\n    from ._b import g\n",
            "pkg/_b.py": "import typing\nif typing.TYPE_CHECKING:\n    from ._a import f\n",
            "pkg/_c.py": "from . import _a\n",
        },
    )
    assert cycles(graph) == [["pkg._a", "pkg._b"]]
    assert graph["pkg._c"] == {"pkg._a"}


def test_an_import_through_a_face_counts_as_one_of_the_defining_module(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "from ._core import Thing as Thing\nfrom .sub import run as run\n",
            "pkg/_core.py": "X = 1\nclass Thing: ...\n",
            "pkg/sub/__init__.py": "from ._run import run as run\n",
            "pkg/sub/_run.py": "from pkg import Thing\n",
            "pkg/sub/_other.py": "import pkg\nprint(pkg.Thing, pkg.run)\n",
        },
    )
    assert graph["pkg.sub._run"] == {"pkg._core"}  # not the face, which imports sub back
    assert graph["pkg.sub._other"] == {"pkg._core", "pkg.sub._run"}
    assert cycles(graph) == []


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("trio_stomp.frame._parser", "trio_stomp.frame"),
        ("trio_stomp._client", "trio_stomp client"),
        ("trio_stomp", "trio_stomp client"),
        ("trio_stomp.broker._session", "trio_stomp.broker"),
        ("bridges._engine", "bridges core"),
        ("bridges.endpoints.file.tail", "bridges.endpoints"),
        ("bridges.service._tasks", "bridges.service"),
        ("bridges.spark._pump", "bridges tools"),
        ("bridges", "bridges CLI"),
    ],
)
def test_each_module_has_its_layer(module: str, layer: str) -> None:
    assert LAYERS[layer_of(module)][0] == layer


def test_every_library_module_is_in_a_layer() -> None:
    for module in library_modules():
        layer_of(module)  # raises for a module no layer names
