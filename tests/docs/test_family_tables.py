"""Every docs table that lists endpoint families lists every family the registry has.

The tables are written by hand (each row says something about its family
that no code holds), so a new family must be added to each of them: this test
finds every such table (a table with three or more rows whose first cell is a
family's type in backticks; not on the performance pages, whose tables list
what a run measured) and names the families it lacks. What a table
lists follows from its header's first cell:

- ``source`` / ``sink``: every family with an endpoint of that kind (the
  ``spark`` sink, which only ``engine = "spark"`` runs, may be left out);
- ``family``: every family but ``spark``;
- ``extra``: every family installed by an extra of its own;
- ``endpoint`` (TLS): every family that talks to a server (not ``file``, ``spark``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridges import default_registry
from bridges._builtins import FAMILIES

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: Families a table of that kind may leave out, and why.
OPTIONAL = {"spark": "the data-lake sink of engine = 'spark' has a page of its own"}


def family_tables() -> Iterator[tuple[str, str, set[str]]]:
    """(where, the header's first cell, the families its rows name) of each family table."""
    for page in sorted(DOCS.rglob("*.md")):
        if "_build" in page.parts or "performance" in page.parts:
            continue  # (the performance pages' tables list what a run measured)
        lines = page.read_text(encoding="utf-8").splitlines()
        start = 0
        while start < len(lines):
            if not lines[start].startswith("|"):
                start += 1
                continue
            end = start
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            first = [row.split("|")[1].strip() for row in lines[start:end]]
            named = {
                match[1] for cell in first[2:] if (match := re.match(r"`([a-z]+)`", cell))
            } & set(FAMILIES)
            if len(named) >= 3:
                yield f"{page.relative_to(DOCS)}:{start + 1}", first[0], named
            start = end


def required(kind: str) -> set[str]:
    registry = default_registry(plugins=False)
    assert not registry.unavailable(), "every extra is installed where the tests run"
    types: dict[str, set[str]] = {}
    for plugin in registry.plugins():
        types.setdefault(plugin.kind, set()).add(plugin.name)
    families = set(FAMILIES)
    if kind in ("source", "sink"):
        return (types[kind] & families) - set(OPTIONAL)
    if kind == "family":
        return families - {"spark"}
    if kind == "extra":
        return {name for name, (_, extra) in FAMILIES.items() if extra is not None}
    if kind == "endpoint":
        return families - {"file", "spark"}
    raise AssertionError(f"a family table whose first column is {kind!r}: say what it lists")


TABLES = list(family_tables())


def test_the_family_tables_are_found() -> None:
    assert len(TABLES) >= 10, TABLES


@pytest.mark.parametrize(("where", "kind", "named"), TABLES, ids=[t[0] for t in TABLES])
def test_each_family_table_lists_every_family(where: str, kind: str, named: set[str]) -> None:
    missing = required(kind) - named
    assert not missing, f"{where}: the {kind} table has no row for {sorted(missing)}"
