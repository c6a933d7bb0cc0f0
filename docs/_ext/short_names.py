"""Unqualified names in annotations resolved, and docstrings read as this project writes them.

Modules annotate with names imported under ``TYPE_CHECKING`` or from
``typing`` aliases (``Path``, ``AbstractAsyncContextManager``); autodoc sees
only the text. A ``missing-reference`` handler looks such a name up in
:data:`ALIASES` and resolves it as the full name would be (here, or through
intersphinx). A name not listed stays missing: nitpicky reports it.
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


def _attrs_init_hints(app: Sphinx, obj: Any, bound_method: bool) -> None:
    """Give an attrs class's generated ``__init__`` the resolved types of its fields.

    attrs copies the fields' annotations into ``__init__`` as written: under
    ``from __future__ import annotations`` those are strings that only the
    class's module can resolve (``list[Message]``), and autodoc would render
    them as bare names.
    """
    import sys
    import typing

    import attrs

    owner, _, method = getattr(obj, "__qualname__", "").rpartition(".")
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if method != "__init__" or module is None:
        return
    cls: Any = module
    for part in owner.split("."):
        cls = getattr(cls, part, None)
    if not isinstance(cls, type) or not attrs.has(cls):
        return
    try:
        hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    except Exception:  # a name only under TYPE_CHECKING: leave the text as it is
        return
    init = cls.__init__
    annotations = dict(getattr(init, "__annotations__", {}))
    for field in attrs.fields(cls):
        name = field.alias or field.name
        if name in annotations and field.name in hints:
            annotations[name] = hints[field.name]
    init.__annotations__ = annotations


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
    app.connect("autodoc-before-process-signature", _attrs_init_hints)
    app.connect("builder-inited", _property_as_method)
    app.add_config_value("async_with_modules", [], "env")
    app.connect("builder-inited", mark_async_with)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
