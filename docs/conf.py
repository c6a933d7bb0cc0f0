"""Sphinx configuration for the trio-stomp documentation site (built by scripts/docs)."""

from __future__ import annotations

from importlib.metadata import version as _version

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
]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
nitpicky = True

html_theme = "furo"
html_title = "trio-stomp"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
