"""Intersphinx inventories that need no network: the build runs offline (CI has none).

- Python: the ``objects.inv`` that Debian's ``python3.X-doc`` package ships
  (``/usr/share/doc/python3.X/html/objects.inv``, for the running X), linked
  to docs.python.org. ``scripts/test`` installs the package; without it the
  build stops with a line saying so.
- Trio and httpx publish no inventory that a package ships (httpx's docs are
  MkDocs, which writes none), so one is written here from the installed
  package: every public name of its public modules, linked to the page of
  the project's site that documents it. Written at ``config-inited`` into
  ``docs/_build/inventories/``, before intersphinx reads it (``builder-inited``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config

PYTHON_URL = "https://docs.python.org/3"
TRIO_URL = "https://trio.readthedocs.io/en/stable"
HTTPX_URL = "https://www.python-httpx.org"

#: trio's module -> the page of trio's reference that documents its names.
_TRIO_MODULES = {
    "trio": "reference-core.html",
    "trio.abc": "reference-io.html",
    "trio.socket": "reference-io.html",
    "trio.lowlevel": "reference-lowlevel.html",
    "trio.testing": "reference-testing.html",
    "trio.to_thread": "reference-core.html",
    "trio.from_thread": "reference-core.html",
}
#: trio's own source files whose top-level names are documented with the I/O reference.
_TRIO_IO = (
    "_highlevel", "_ssl", "_file_io", "_path", "_subprocess", "_unix_pipes", "_dtls",
    "_socket", "_abc",
)  # fmt: skip


def python_inventory() -> Path:
    """Debian's inventory of the running Python's documentation.

    Raises:
      FileNotFoundError: the ``python3.X-doc`` package is not installed.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    path = Path(f"/usr/share/doc/python{version}/html/objects.inv")
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the docs link to Python's own through it "
            f"(apt-get install python{version}-doc)"
        )
    return path


def _role(value: object) -> str | None:
    if inspect.isclass(value):
        return "py:exception" if issubclass(value, BaseException) else "py:class"
    if inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.ismethod(value):
        return "py:function"
    if callable(value):  # functools.partial, trio's wrapped functions
        return "py:function"
    if inspect.ismodule(value):
        return None
    return "py:data"


def _public(module: Any) -> Iterator[tuple[str, object]]:
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in names:
        try:
            yield name, getattr(module, name)
        except AttributeError:
            continue


def _source(value: object) -> str:
    """The file that defines ``value`` (trio sets its public names' ``__module__`` to "trio")."""
    code = getattr(value, "__code__", None)
    if code is None and inspect.isclass(value):
        functions = (getattr(v, "__code__", None) for v in vars(value).values())
        code = next((c for c in functions if c is not None), None)
    return code.co_filename if code is not None else ""


def trio_entries() -> Iterator[tuple[str, str, str]]:
    """(name, role, URI) for every public name of trio's public modules."""
    for module_name, page in _TRIO_MODULES.items():
        module = importlib.import_module(module_name)
        yield module_name, "py:module", f"{page}#module-{module_name}"
        for name, value in _public(module):
            role = _role(value)
            if role is None:
                continue
            where = page
            if module_name == "trio" and Path(_source(value)).name.startswith(_TRIO_IO):
                where = "reference-io.html"
            full = f"{module_name}.{name}"
            yield full, role, f"{where}#{full}"
            if role == "py:class":
                for member, _ in _public(value):
                    yield f"{full}.{member}", "py:method", f"{where}#{full}.{member}"


def httpx_entries() -> Iterator[tuple[str, str, str]]:
    """(name, role, URI) for every public name of httpx: its API page or its exceptions page."""
    import httpx

    yield "httpx", "py:module", "api/"
    for name, value in _public(httpx):
        role = _role(value)
        if role is None:
            continue
        page = "exceptions/" if role == "py:exception" else "api/"
        yield f"httpx.{name}", role, f"{page}#{name.lower()}"
        if role == "py:class":
            for member, _ in _public(value):
                yield f"httpx.{name}.{member}", "py:method", f"{page}#{name.lower()}"


def write_inventory(path: Path, project: str, entries: Iterator[tuple[str, str, str]]) -> None:
    """Write a Sphinx inventory (format version 2) of ``entries``."""
    seen: set[tuple[str, str]] = set()
    lines = []
    for name, role, uri in entries:
        if (name, role) in seen:
            continue
        seen.add((name, role))
        lines.append(f"{name} {role} 1 {uri} -\n")
    header = f"# Sphinx inventory version 2\n# Project: {project}\n# Version: \n"
    header += "# The remainder of this file is compressed using zlib.\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header.encode() + zlib.compress("".join(lines).encode()))


#: project -> (site, what lists its names)
GENERATED: dict[str, tuple[str, Callable[[], Iterator[tuple[str, str, str]]]]] = {
    "trio": (TRIO_URL, trio_entries),
    "httpx": (HTTPX_URL, httpx_entries),
}


def inventory_dir(confdir: str | Path) -> Path:
    """Where the generated inventories go (under the build directory, not in git)."""
    return Path(confdir) / "_build" / "inventories"


def _write_all(app: Sphinx, config: Config) -> None:
    for project, (_, entries) in GENERATED.items():
        write_inventory(inventory_dir(app.confdir) / f"{project}.inv", project, entries())


def mapping(confdir: str | Path) -> dict[str, tuple[str, str]]:
    """``intersphinx_mapping`` for conf.py: every inventory a local file."""
    result = {"python": (PYTHON_URL, str(python_inventory()))}
    for project, (site, _) in GENERATED.items():
        result[project] = (site, str(inventory_dir(confdir) / f"{project}.inv"))
    return result


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", _write_all)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
