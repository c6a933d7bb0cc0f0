"""``.. bridges-config::``: the config reference, rendered from :func:`config_schema.schema`.

One section per table, one row per key: its type (as the loader's errors
name it), its default, and its description from the code. A key without a
description stops the build, naming the class to document it in.
"""

from __future__ import annotations

import importlib
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

import config_schema


def table_id(table: config_schema.Table) -> str:
    """The HTML id of ``table``'s section: ``config-TABLE``."""
    return str(nodes.make_id(f"config-{table.anchor}"))


def option_id(table: config_schema.Table, option: config_schema.Option) -> str:
    """The HTML id of ``option``'s row: ``config-TABLE-KEY`` (the tests look for it)."""
    return str(nodes.make_id(f"config-{table.anchor}-{option.name}"))


def _cell(text: str) -> list[str]:
    return text.splitlines() or [""]


def render(table: config_schema.Table, underline: str) -> list[str]:
    """reStructuredText of one table: heading, summary, then a row per key."""
    title = f"``{table.title}``"
    lines = [f".. _{table_id(table)}:", "", title, underline * len(title), ""]
    lines += [table.summary, ""]
    lines += [
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 18 22 15 45",
        "   :class: reference-table",
        "",
        "   * - Key",
        "     - Type",
        "     - Default",
        "     - Description",
    ]
    for option in table.options:
        default = "*required*" if option.default is None else f"``{option.default}``"
        description = option.description
        if option.secret:
            description += (
                f" Secret: never printed; may be given as ``{option.name}_file`` (the file's"
                " content) instead."
            )
        lines += [
            f"   * - .. _{option_id(table, option)}:",
            "",
            f"       ``{option.name}``",
            f"     - {option.type}",
            f"     - {default}",
        ]
        desc = _cell(description)
        lines += [f"     - {desc[0]}", *(f"       {line}" for line in desc[1:])]
    return [*lines, ""]


class BridgesConfig(SphinxDirective):
    """Every table and key of a bridges config file."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        tables = config_schema.schema()
        missing = list(config_schema.problems(tables))
        if missing:
            raise ExtensionError("the config schema is not documented:\n" + "\n".join(missing))
        lines: list[str] = []
        for table in tables:
            lines += render(table, "-")
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, "<bridges-config>"), container)
        for module in {table.cls.__module__ for table in tables}:
            self.env.note_dependency(importlib.import_module(module).__file__ or "")
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("bridges-config", BridgesConfig)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
