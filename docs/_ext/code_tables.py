"""Reference tables read from the code: exit codes, limits and metrics.

- ``.. exit-codes:: MODULE...``: every ``EXIT_*`` constant of the modules,
  by value, with its ``#:`` comment.
- ``.. named-limits:: PACKAGE...``: every documented module-level limit of
  the packages (``MAX_*``, ``MIN_*``, ``DEFAULT_MAX_*``, ``*_TIMEOUT``), by
  module, with its value and ``#:`` comment.
- ``.. attrs-limits:: CLASS``: the fields of an attrs class of limits
  (``trio_stomp.broker.Limits``) with their defaults and ``Attributes:``.
- ``.. bridges-metrics::``: the metrics ``/metrics`` serves, collected from
  :class:`bridges.service._metrics.RouteMetrics` over one example route, as
  a scrape sees them: name, type, labels, help.

A constant or field without its comment stops the build: nothing is listed
without saying what it is.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError, PycodeError
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

import config_schema

LIMIT_NAME = re.compile(r"^(DEFAULT_)?(MAX|MIN)_\w+$|^[A-Z]\w*_TIMEOUT$")


def constants(module: ModuleType, pattern: re.Pattern[str]) -> Iterator[tuple[str, Any, str]]:
    """``(name, value, doc)`` of the constants ``module`` itself assigns whose names match."""
    analyzer = _analyzer(module)
    if analyzer is None:
        return
    docs = analyzer.find_attr_docs()
    source = analyzer.code
    for name, value in vars(module).items():
        if not pattern.match(name) or isinstance(value, bool):
            continue
        if not isinstance(value, int | float):
            continue
        if not re.search(rf"^{name}\b[^=\n]*=", source, re.MULTILINE):
            continue  # imported, not defined here
        yield name, value, " ".join(docs.get(("", name), [])).strip()


def _analyzer(module: ModuleType) -> ModuleAnalyzer | None:
    """Sphinx's reading of ``module``'s source; a compiled module (mypyc, after
    scripts/compile-codec) is read from the ``.py`` beside it. None for mypyc's
    shared library, which has no source."""
    try:
        return ModuleAnalyzer.for_module(module.__name__)
    except PycodeError:
        name = module.__name__.rpartition(".")[2]
        source = Path(module.__file__ or "").with_name(f"{name}.py")
        if not source.is_file():
            return None
        return ModuleAnalyzer.for_file(str(source), module.__name__)


def modules(package: str) -> Iterator[ModuleType]:
    """``package`` and every module under it (``__main__`` left out: it runs)."""
    root = importlib.import_module(package)
    yield root
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        if not info.name.endswith("__main__"):
            yield importlib.import_module(info.name)


def quantity(value: float) -> str:
    """``16777216`` -> ``16,777,216 (16 MiB)``."""
    if isinstance(value, float):
        return f"{value:g}"
    text = f"{value:,}"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{text} ({value // size} {unit})"
    return text


_ROLE = re.compile(r":(\w+):`([~.]?)(?!trio_stomp\.|bridges\.)([A-Za-z_][\w.]*)`")


def qualified(doc: str, module: str) -> str:
    """``doc`` (a comment of ``module``) with its cross-references named in full.

    A comment names its module's own classes as they are written there
    (``:meth:`Batcher.flush```); on this page they are looked up in full
    (``bridges.endpoints._asyncio.Batcher.flush``), shown by their short name.
    """
    return _ROLE.sub(lambda m: f":{m.group(1)}:`~{module}.{m.group(3)}`", doc)


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], widths: str) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", f"   :widths: {widths}"]
    lines += ["   :class: reference-table", ""]
    for row in [header, *rows]:
        first, *rest = row
        lines.append(f"   * - {first}")
        lines += [f"     - {cell}" for cell in rest]
    return [*lines, ""]


class _Rendered(SphinxDirective):
    """A directive whose output is reStructuredText made by :meth:`lines`."""

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.section()
        container.document = self.state.document
        text = StringList(self.lines(), f"<{self.name}>")
        nested_parse_with_titles(self.state, text, container)
        return list(container.children)

    def _depend(self, module: ModuleType) -> None:
        if module.__file__:
            self.env.note_dependency(module.__file__)


def _undocumented(what: list[str]) -> ExtensionError:
    return ExtensionError("undocumented (add a #: comment): " + ", ".join(what))


class ExitCodes(_Rendered):
    """Every ``EXIT_*`` constant of the modules named, by value."""

    required_arguments = 1
    final_argument_whitespace = True

    def lines(self) -> list[str]:
        rows: dict[int, list[tuple[str, str]]] = {}
        missing = []
        for name in self.arguments[0].split():
            module = importlib.import_module(name)
            self._depend(module)
            for constant, value, doc in constants(module, re.compile(r"^EXIT_\w+$")):
                if not doc:
                    missing.append(f"{name}.{constant}")
                rows.setdefault(value, []).append((constant, doc.removeprefix("Exit status: ")))
        if missing:
            raise _undocumented(missing)
        table = [
            (f"``{value}``", ", ".join(f"``{c}``" for c, _ in rows[value]),
             " ".join(doc for _, doc in rows[value]))
            for value in sorted(rows)
        ]  # fmt: skip
        return _table(("Status", "Name", "Meaning"), table, "10 30 60")


class NamedLimits(_Rendered):
    """Every documented limit constant of the packages named, by module."""

    required_arguments = 1
    final_argument_whitespace = True

    def lines(self) -> list[str]:
        lines: list[str] = []
        missing = []
        for package in self.arguments[0].split():
            for module in modules(package):
                self._depend(module)
                found = list(constants(module, LIMIT_NAME))
                if not found:
                    continue
                missing += [f"{module.__name__}.{name}" for name, _, doc in found if not doc]
                title = f"``{module.__name__}``"
                rows = [
                    (f"``{name}``", quantity(value), qualified(doc, module.__name__))
                    for name, value, doc in found
                ]
                lines += [title, "~" * len(title), ""]
                lines += _table(("Name", "Value", "What it bounds"), rows, "30 20 50")
        if missing:
            raise _undocumented(missing)
        return lines


class AttrsLimits(_Rendered):
    """The fields of an attrs class of limits, with defaults and ``Attributes:``."""

    required_arguments = 1

    def lines(self) -> list[str]:
        module_name, _, name = self.arguments[0].rpartition(".")
        module = importlib.import_module(module_name)
        self._depend(module)
        cls = getattr(module, name)
        docs = config_schema.attribute_docs(cls)
        rows, missing = [], []
        for field in attrs.fields(cls):
            doc = docs.get(field.name, "")
            if not doc:
                missing.append(f"{self.arguments[0]}.{field.name}")
            default = field.default
            rows.append((f"``{field.name}``", quantity(default), " ".join(doc.split())))
        if missing:
            raise ExtensionError("undocumented (add it to Attributes:): " + ", ".join(missing))
        return _table(("Field", "Default", "What it bounds"), rows, "30 20 50")


def scrape() -> list[tuple[str, str, list[str], str]]:
    """``(name as exposed, type, labels, help)`` of every metric ``/metrics`` serves.

    Collected from the real :class:`~bridges.service._metrics.RouteMetrics`
    over one route (in-memory endpoints) and an embedded broker: a family's
    labels are those of its samples, or those it declares when it has none.
    """
    import trio

    from bridges import Route
    from bridges.service._health import Health
    from bridges.service._metrics import RouteMetrics
    from bridges.service._notify import Notifier
    from bridges.service._service import Service
    from bridges.testing import FakeSink, FakeSource
    from trio_stomp.broker import open_broker

    logging.getLogger("trio_stomp").setLevel(logging.WARNING)  # (the broker's start line)

    async def collect() -> list[Any]:
        source = FakeSource()
        source.refused = {"max_pending": 0}  # type: ignore[attr-defined]  # (as http's has)
        source.lost = 0  # type: ignore[attr-defined]  # (as kafka's has)
        route = Route("example", source, FakeSink())
        service = Service(Notifier(), Health([route], 60.0))
        async with open_broker(port=0) as broker:
            metrics = RouteMetrics(service, broker)
            assert route.stats.observe is not None  # (RouteMetrics hooked it)
            route.stats.observe(1, trio.current_time(), trio.current_time())
            return list(metrics.registry.collect())

    found = []
    for family in trio.run(collect):
        named = {label for sample in family.samples for label in sample.labels} - {"le"}
        labels = sorted(named | set(getattr(family, "_labelnames", ())))
        name = f"{family.name}_total" if family.type == "counter" else family.name
        found.append((name, family.type, labels, family.documentation))
    return found


class BridgesMetrics(_Rendered):
    """The metrics of ``[bridge] http``'s ``/metrics``."""

    def lines(self) -> list[str]:
        rows = [
            (f"``{name}``", kind, ", ".join(f"``{label}``" for label in labels) or "-", help_)
            for name, kind, labels, help_ in scrape()
        ]
        return _table(("Metric", "Type", "Labels", "Help"), rows, "35 10 15 40")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("exit-codes", ExitCodes)
    app.add_directive("named-limits", NamedLimits)
    app.add_directive("attrs-limits", AttrsLimits)
    app.add_directive("bridges-metrics", BridgesMetrics)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
