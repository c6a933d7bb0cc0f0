"""Endpoints and transforms registered by name, with a config class and a constructor.

The config's ``type = "stomp"`` picks the plugin; the rest of the table is
structured into the plugin's config class (an attrs class), and the
constructor ``build(config, context)`` makes the source, sink or transform.
Constructors must not connect or create anything: ``bridges check`` calls
them too.

The built-in endpoint families (``file``, ``stomp``, ``http``, ``mqtt``,
``redis``, ``nats``, ``amqp``) are packages under ``bridges.endpoints``,
each with a ``register(registry)``; :meth:`Registry.load_family` imports
one, and records it as *unavailable* (with the extra to install) when its
client library is missing, instead of failing.

Third-party plugins come from the entry-point group
:data:`ENTRY_POINT_GROUP`: each entry point names a function
``register(registry)`` that calls :meth:`Registry.register`::

    # pyproject.toml of your package
    [project.entry-points."trio_stomp.bridges"]
    redis = "bridges_redis:register"

A :class:`Registry` starts empty, so tests see only what they register;
:func:`bridges.default_registry` (:mod:`bridges._builtins`) has the
built-ins and the installed plugins. This module is the mechanism alone: it
names no endpoint and no transform.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Final, Literal

import attrs

from ._endpoint import Context

ENTRY_POINT_GROUP: Final = "trio_stomp.bridges"
KINDS: Final = ("source", "sink", "transform")

Kind = Literal["source", "sink", "transform"]

log = logging.getLogger("bridges")


@attrs.frozen
class Plugin:
    """One registered endpoint or transform."""

    kind: Kind
    name: str
    config: type[Any]
    build: Callable[[Any, Context], Any]
    doc: str = ""


@attrs.frozen
class Unavailable:
    """An endpoint family that could not be loaded, and what to do about it.

    Attributes:
      family: its name, which is also the ``type`` its endpoints are used by.
      reason: one line, e.g. ``needs paho (pip install 'trio-stomp[mqtt]')``.
    """

    family: str
    reason: str


def install_hint(extra: str | None) -> str:
    """How to get a family's dependencies: ``pip install 'trio-stomp[EXTRA]'``."""
    return "" if extra is None else f"pip install 'trio-stomp[{extra}]'"


class Registry:
    """Name -> :class:`Plugin`, per kind. Starts empty."""

    def __init__(self) -> None:
        self._plugins: dict[tuple[str, str], Plugin] = {}
        self._unavailable: dict[str, Unavailable] = {}
        self._refused: list[str] = []

    def register(
        self,
        kind: Kind,
        name: str,
        config: type[Any],
        build: Callable[[Any, Context], Any],
        *,
        doc: str = "",
        replace: bool = False,
    ) -> None:
        """Register ``build(config_instance, context)`` as ``kind`` ``name``.

        Args:
          kind: "source", "sink" or "transform".
          name: what ``type = "..."`` says in the config.
          config: an attrs class; its fields are the table's keys.
          build: the constructor. It may raise
            :class:`bridges.InvalidSetting` for settings that are wrong
            together; it must not connect.
          doc: one line for ``bridges plugins``; defaults to the config
            class's first docstring line.
          replace: allow replacing an earlier registration.

        Raises:
          ValueError: an unknown kind, a config that is not an attrs class,
            or a name already taken (without ``replace``).
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if not attrs.has(config):
            raise ValueError(f"the config of {kind} {name!r} must be an attrs class")
        if (kind, name) in self._plugins and not replace:
            raise ValueError(f"{kind} {name!r} is already registered")
        if not doc:
            doc = (config.__doc__ or "").strip().splitlines()[0] if config.__doc__ else ""
        doc = doc.replace("``", "")  # (docstrings are reStructuredText; users read plain text)
        self._plugins[(kind, name)] = Plugin(kind, name, config, build, doc)

    def get(self, kind: Kind, name: str) -> Plugin:
        """The plugin registered as ``kind`` ``name``.

        Raises:
          KeyError: none is; the message lists the names there are.
        """
        try:
            return self._plugins[(kind, name)]
        except KeyError:
            missing = self._unavailable.get(name)
            if missing is not None:
                raise KeyError(f"{kind} type {name!r} is not available: {missing.reason}") from None
            known = ", ".join(self.names(kind)) or "none registered"
            raise KeyError(f"unknown {kind} type {name!r} (known: {known})") from None

    def names(self, kind: Kind) -> list[str]:
        """Registered names of one kind, sorted."""
        return sorted(name for k, name in self._plugins if k == kind)

    def plugins(self) -> list[Plugin]:
        """Every registration, by kind then name."""
        return [self._plugins[key] for key in sorted(self._plugins)]

    def unavailable(self) -> list[Unavailable]:
        """The families that could not be loaded, by name."""
        return [self._unavailable[name] for name in sorted(self._unavailable)]

    def refused(self) -> list[str]:
        """One line for each installed plugin that was refused (see :meth:`load_entry_points`)."""
        return list(self._refused)

    def mark_unavailable(self, family: str, reason: str) -> None:
        """Record that ``family`` cannot be used here, and why (see :meth:`get`)."""
        self._unavailable[family] = Unavailable(family, reason)

    def copy(self) -> Registry:
        """An independent registry with the same registrations."""
        clone = Registry()
        clone._plugins = dict(self._plugins)
        clone._unavailable = dict(self._unavailable)
        clone._refused = list(self._refused)
        return clone

    def load_family(self, family: str, module: str, extra: str | None = None) -> bool:
        """Import ``module`` and call its ``register(registry)``.

        All or nothing: the family's registrations land only if its
        ``register`` completes. An ImportError (its client library, or the
        package itself, is not installed) records the family as unavailable
        with ``pip install 'trio-stomp[EXTRA]'``, for ``bridges plugins`` and
        for a config that names it.

        A package without ``register`` (one being written) or whose
        ``register`` raises is recorded as unavailable too, with the reason.

        Returns:
          True when the family was registered.

        Raises:
          ValueError: the family registers a name already taken.
        """
        staging = Registry()
        try:
            package = importlib.import_module(module)
        except ImportError as exc:
            needs = f"needs {exc.name}" if exc.name and exc.name != module else "not installed"
            hint = install_hint(extra)
            self.mark_unavailable(family, f"{needs} ({hint})" if hint else f"{needs}: {exc}")
            return False
        register: Callable[[Registry], None] | None = getattr(package, "register", None)
        if register is None:
            self.mark_unavailable(family, f"{module} defines no register(registry)")
            return False
        try:
            register(staging)
        except Exception as exc:
            # One broken family must not stop every bridge on the machine.
            log.exception("endpoint family %r failed to register; skipped", family)
            self.mark_unavailable(family, f"failed to register: {exc!r}")
            return False
        for plugin in staging.plugins():
            self.register(plugin.kind, plugin.name, plugin.config, plugin.build, doc=plugin.doc)
        self._unavailable.pop(family, None)
        return True

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Call every ``register(registry)`` of the entry-point ``group``.

        A plugin that fails to load is logged and skipped: one broken
        package must not stop every bridge on the machine. Each plugin is
        all or nothing, as a family is (:meth:`load_family`): one that names
        a type already registered (or a built-in family that is not
        installed here) is refused whole, with one line in :meth:`refused`
        (which ``bridges check`` and ``bridges plugins`` say), and the
        built-in keeps its name.

        Returns:
          The names of the entry points loaded.
        """
        loaded = []
        for entry in entry_points(group=group):
            staging = Registry()
            try:
                register = entry.load()
                register(staging)
            except Exception:
                log.exception("plugin %r (%s) failed to load; skipped", entry.name, entry.value)
                continue
            taken = [
                f"{plugin.kind} {plugin.name!r}"
                for plugin in staging.plugins()
                if (plugin.kind, plugin.name) in self._plugins or plugin.name in self._unavailable
            ]
            if taken:
                self._refused.append(
                    f"plugin {entry.name!r} ({entry.value}) refused: {', '.join(taken)} "
                    "is a built-in's name (rename the plugin's types)"
                )
                continue
            for plugin in staging.plugins():
                self.register(plugin.kind, plugin.name, plugin.config, plugin.build, doc=plugin.doc)
            loaded.append(entry.name)
        return loaded
