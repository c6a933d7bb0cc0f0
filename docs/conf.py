"""Sphinx configuration for the trio-stomp documentation site (built by scripts/docs).

Nitpicky, and scripts/docs turns every warning into an error: a cross-reference
that finds no target (an API name, a page, a heading) fails the build. The
reference section is generated from the code by the extensions in ``_ext/``.
"""

from __future__ import annotations

import logging
import sys
from importlib.metadata import version as _version
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE / "_ext"))

import offline_inventories  # noqa: E402  (in _ext, on the path only from here)

project = "trio-stomp"
author = "the trio-stomp developers"
copyright = "2026, the trio-stomp developers"
release = _version("trio-stomp")

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.napoleon",
    "sphinxcontrib_trio",
    "offline_inventories",
    "api_docs",
    "config_reference",
    "cli_reference",
    "code_tables",
]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
nitpicky = True


class _EmptySection(logging.Filter):
    """A section whose pages are still to be written is not an error (each section's
    index has a glob toctree, which picks up a new page). Sphinx gives this warning
    no type, so ``suppress_warnings`` cannot name it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "subtype", None) != "empty_glob"


logging.getLogger("sphinx.sphinx.directives.other").addFilter(_EmptySection())

html_theme = "furo"
html_title = "trio-stomp"
html_static_path = ["_static"]
# The site's own icon: without one a browser asks the server for /favicon.ico (a 404).
html_favicon = "_static/favicon.svg"
html_css_files = ["reference.css"]

#: The API pages' modules; a function that returns an async context manager shows
#: ``async with`` (see _ext/api_docs.py).
async_with_modules = [
    "trio_stomp", "trio_stomp.frame", "trio_stomp.testing", "trio_stomp.broker",
    "trio_stomp.util", "bridges", "bridges.testing",
]  # fmt: skip

# sphinxcontrib-trio (``async with``, ``await`` on the API pages) plugs into autodoc's
# class-based documenters, which Sphinx 9 keeps only behind this switch.
autodoc_use_legacy_class_based = True
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
# Napoleon: an "Attributes:" section documents each attribute (attrs fields have no
# docstring of their own, so autodoc lists none of them twice): :attr: finds them.
napoleon_use_ivar = False
# An attribute's type is in the signature; the raw annotation (a string under
# ``from __future__ import annotations``) would be resolved from the wrong module.
napoleon_attr_annotations = False

# Offline: every inventory is a local file (see _ext/offline_inventories.py).
intersphinx_mapping = offline_inventories.mapping(_HERE)
intersphinx_timeout = 1

# Docstrings name private modules and helpers for whoever reads the code
# (``:mod:`bridges._redact```); the site documents only public names, so such a
# reference renders as text. Every other target must resolve.
nitpick_ignore_regex = [
    (r"py:.*", r"(\w+\.)*_\w+(\.\w+)*"),  # a private module or name
    (r"py:class", r"_?T\w*"),  # type variables
    (r"py:class", r"collections\.abc\.Callable\[\[\]"),  # Sphinx misreads Callable[[], X]
]
# Types that public signatures name but the site does not document (an internal
# alias of a callable; what ``run_bridge`` returns, from ``bridges.service``; what
# ``redacting`` takes and yields).
nitpick_ignore = [
    ("py:class", "Opener"),
    ("py:class", "Stopped"),
    ("py:class", "Secrets"),  # what ``redacting`` yields, from ``bridges._redact``
    ("py:class", "Redactor"),
]
