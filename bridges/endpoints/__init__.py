"""Endpoint families: one package per family, registered by import path.

Each family is a package ``bridges.endpoints.<family>`` whose ``__init__``
defines ``register(registry: bridges.Registry) -> None``. The families are
named in :data:`bridges._builtins.FAMILIES` and imported only by
:func:`bridges.default_registry`, one at a time: a family whose third-party
client library is not installed (an ImportError while importing it) is
recorded as unavailable with the extra that installs it, so ``bridges
plugins`` lists it and ``bridges check`` names it, and every other family
still works.
"""
