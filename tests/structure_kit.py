"""The import structure of the library, read statically (ast), for the structure tests.

- :func:`library_modules`: every module of ``trio_stomp/`` and ``bridges/``, by dotted name;
- :func:`import_graph`: module -> the modules it imports, every import counted
  (at the top, under ``TYPE_CHECKING``, inside a function): a cycle hidden in
  a function is still a cycle;
- :func:`cycles`: the groups of modules that import each other in a loop;
- :data:`LAYERS` and :func:`layer_of`: the layers, bottom up, that an import may
  only go down (or across, within one layer).

An import of a package's face (``from bridges import Context``) counts as an
import of the module that defines the name (``bridges._endpoint``): the face
re-exports it, and depending on the face is depending on that module. Nothing
is imported or run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
#: The library's top packages.
PACKAGES: Final = ("trio_stomp", "bridges")

Graph = Mapping[str, frozenset[str]]

#: The layers, bottom up: (name, what it holds). A module is in the layer of the longest
#: entry that matches it: ``pkg._`` matches the modules of ``pkg`` whose name starts with
#: ``_``; ``pkg.sub`` matches ``pkg.sub`` and all under it; a top package's name alone
#: matches only its face (``bridges/__init__.py``), which gathers names from every layer
#: of it, so it is on top.
LAYERS: Final = (
    ("trio_stomp.frame", ("trio_stomp.frame",)),
    ("trio_stomp client", ("trio_stomp._", "trio_stomp.util", "trio_stomp")),
    ("trio_stomp.broker", ("trio_stomp.broker",)),
    ("trio_stomp tools", ("trio_stomp.testing", "trio_stomp.cli")),
    ("bridges core", ("bridges._",)),
    ("bridges.endpoints", ("bridges.endpoints",)),
    ("bridges.service", ("bridges.service",)),
    ("bridges tools", ("bridges.spark", "bridges.testing")),
    ("bridges CLI", ("bridges._cli", "bridges")),
)


def _matches(entry: str, module: str) -> bool:
    if entry.endswith("_"):
        return module.startswith(entry)
    if entry in PACKAGES:
        return module == entry
    return module == entry or module.startswith(f"{entry}.")


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the layer ``module`` belongs to."""
    matches = [
        (len(entry), index)
        for index, (_, entries) in enumerate(LAYERS)
        for entry in entries
        if _matches(entry, module)
    ]
    if not matches:
        raise ValueError(f"{module} is in no layer of LAYERS")
    return max(matches)[1]


def library_modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> its file (a package by its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


class _Reader:
    """Resolves the imports of the modules of one tree, faces followed to definitions."""

    def __init__(self, modules: Mapping[str, Path]) -> None:
        self.modules = modules
        self._trees: dict[str, ast.Module] = {}

    def tree(self, module: str) -> ast.Module:
        if module not in self._trees:
            path = self.modules[module]
            self._trees[module] = ast.parse(path.read_text(encoding="utf-8"), str(path))
        return self._trees[module]

    def is_package(self, module: str) -> bool:
        return self.modules[module].name == "__init__.py"

    def base(self, module: str, node: ast.ImportFrom) -> str:
        """The absolute name of what ``from X import ...`` in ``module`` reads from."""
        if not node.level:
            return node.module or ""
        package = module if self.is_package(module) else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{node.module}" if node.module else package

    def owner(self, module: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """The module that defines ``name`` as ``module`` offers it (a face: where it came from)."""
        if f"{module}.{name}" in self.modules:
            return f"{module}.{name}"
        if not self.is_package(module) or module in seen:
            return module
        for node in self.tree(module).body:
            if isinstance(node, ast.ImportFrom) and any(
                (alias.asname or alias.name) == name for alias in node.names
            ):
                source = self.base(module, node)
                original = next(a.name for a in node.names if (a.asname or a.name) == name)
                if source in self.modules:
                    return self.owner(source, original, seen | {module})
        return module

    def imports(self, module: str) -> Iterator[str]:
        """Every module of the tree that ``module`` imports, wherever the import stands."""
        tree = self.tree(module)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = self._known_prefix(alias.name)
                    if target is None:
                        continue
                    if target == alias.name and self.is_package(target):
                        # ``import bridges`` then ``bridges.load_config``: the face's
                        # names used, each where it is defined.
                        bound = alias.asname or alias.name
                        used = _attributes_of(tree, bound) if "." not in bound else set()
                        yield from (self.owner(target, name) for name in used)
                        if used:
                            continue
                    yield target
            elif isinstance(node, ast.ImportFrom):
                source = self.base(module, node)
                if source not in self.modules:
                    continue
                for alias in node.names:
                    yield self.owner(source, alias.name)

    def _known_prefix(self, dotted: str) -> str | None:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            name = ".".join(parts[:end])
            if name in self.modules:
                return name
        return None


def _attributes_of(tree: ast.Module, name: str) -> set[str]:
    """The attributes read on the plain name ``name`` anywhere in ``tree`` (``name.attr``)."""
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == name
    }


def import_graph(modules: Mapping[str, Path] | None = None) -> dict[str, frozenset[str]]:
    """Module -> the modules of the same tree it imports (itself left out)."""
    modules = library_modules() if modules is None else modules
    reader = _Reader(modules)
    return {
        module: frozenset(target for target in reader.imports(module) if target != module)
        for module in modules
    }


def _reachable(graph: Graph, start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def cycles(graph: Graph) -> list[list[str]]:
    """The groups of modules that import each other in a loop (each of two or more), sorted.

    A group is every module that both reaches and is reached by one of them:
    a strongly connected component. The graph is small (a few hundred
    modules): reachability from each is cheap and plain to read.
    """
    reach = {module: _reachable(graph, module) for module in graph}
    groups = {
        frozenset(other for other in reach[module] if module in reach[other]) | {module}
        for module in graph
        if module in reach[module]
    }
    return sorted(sorted(group) for group in groups if len(group) > 1)


def line_counts(modules: Mapping[str, Path] | None = None) -> dict[str, int]:
    """Module -> its number of lines."""
    modules = library_modules() if modules is None else modules
    return {
        name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules.items()
    }
