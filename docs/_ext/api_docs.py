"""The API pages read the code as this project writes it.

- Unqualified names: modules annotate with names imported under
  ``TYPE_CHECKING`` (``Path``, ``AbstractAsyncContextManager``), and the
  client's docstrings name the codec's errors by their short names; autodoc
  sees only the text. A ``missing-reference`` handler looks such a name up in
  :data:`ALIASES` and resolves it as the full name would be (here, or through
  intersphinx). A name not listed stays missing: nitpicky reports it.
- Properties: their docstrings start "What it is: details", which napoleon
  would read as a type; they are read as methods' are.
- ``async with``: what returns an async context manager is marked so, for
  sphinxcontrib-trio.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.ext import intersphinx

#: The short name, as annotations write it -> the full name of what it is.
ALIASES = {
    "Path": "pathlib.Path",
    "AbstractAsyncContextManager": "contextlib.AbstractAsyncContextManager",
    "AbstractContextManager": "contextlib.AbstractContextManager",
    # The client's modules name the codec's errors, which trio_stomp.frame documents.
    "StompError": "trio_stomp.frame.StompError",
    "RemoteProtocolError": "trio_stomp.frame.RemoteProtocolError",
    "HeadersLike": "trio_stomp.frame.HeadersLike",
}


def _resolve(
    app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.TextElement
) -> nodes.reference | None:
    if node.get("refdomain") != "py":
        return None
    full = ALIASES.get(node["reftarget"])
    if full is None:
        return None
    node = node.deepcopy()
    node["reftarget"] = full
    domain = env.get_domain("py")
    found = domain.resolve_xref(
        env, node.get("refdoc", ""), app.builder, node["reftype"], full, node, contnode
    )
    if found is not None:
        return found
    return intersphinx.missing_reference(app, env, node, contnode)


def _property_as_method(app: Sphinx) -> None:
    """Let napoleon read a property's docstring as it reads a method's.

    For a property, napoleon takes the first line as ``TYPE: text``, and this
    project writes "Where to connect: ``stomp://...``" there (its types are in
    the annotations). Read as a method's, the text stays text and sections
    (Raises:) still work.
    """
    from sphinx.ext import napoleon

    listeners = app.events.listeners["autodoc-process-docstring"]
    for index, listener in enumerate(listeners):
        if listener.handler is napoleon._process_docstring:

            def process(app: Sphinx, what: Any, *args: Any) -> None:
                as_method = what in ("property", "attribute")
                napoleon._process_docstring(app, "method" if as_method else what, *args)

            listeners[index] = listener._replace(handler=process)


def _returns_async_cm(function: Any) -> bool:
    import typing

    try:
        returned = typing.get_type_hints(function).get("return")
    except Exception:  # a name only under TYPE_CHECKING: no sniffing
        return False
    returned = typing.get_origin(returned) or returned
    return isinstance(returned, type) and hasattr(returned, "__aenter__")


def mark_async_with(app: Sphinx) -> None:
    """Mark what returns an async context manager, so sphinxcontrib-trio shows ``async with``.

    sphinxcontrib-trio sees ``@asynccontextmanager`` functions by itself; a
    function that returns an object with ``__aenter__`` (``trio_stomp.connect``,
    ``Client.subscribe``) it knows by ``__returns_acontextmanager__``, set here
    from the return annotation for every public function and method of the
    modules in the ``async_with_modules`` setting.
    """
    import importlib
    import inspect

    for name in app.config.async_with_modules:
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", None) or dir(module):
            if public.startswith("_"):
                continue
            value = getattr(module, public)
            members = [value]
            if inspect.isclass(value):
                members = [m for n, m in vars(value).items() if not n.startswith("_")]
            for member in members:
                if inspect.isfunction(member) and _returns_async_cm(member):
                    member.__returns_acontextmanager__ = True  # type: ignore[attr-defined]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("missing-reference", _resolve)
    app.connect("builder-inited", _property_as_method)
    app.add_config_value("async_with_modules", [], "env")
    app.connect("builder-inited", mark_async_with)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
