"""The package's version: pyproject.toml's, as installed (the package metadata).

One source for ``trio_stomp.__version__``, the embedded broker's ``server``
header and both commands' ``--version``: a release changes pyproject.toml
and nothing else. :func:`build` names the codec's build that runs, which
``--version`` and the benchmarks' first line add. Read on first use and cached: importing
``importlib.metadata`` costs some 25 ms, which ``import trio_stomp`` (a Spark
executor importing the codec, say) should not pay.
"""

from __future__ import annotations

import functools

#: The distribution whose metadata holds the version (pyproject.toml's ``name``).
DISTRIBUTION = "trio-stomp"


@functools.cache
def version() -> str:
    """The installed version of trio-stomp, e.g. ``"0.1.0"``.

    ``"0+unknown"`` when the package runs from a tree that was never
    installed (no metadata): a version that says so rather than a stale one
    written in the source.
    """
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def build() -> str:
    """Which build of the codec runs: ``"compiled codec"`` (mypyc: the platform
    wheel, or ``scripts/compile-codec`` in a clone) or ``"pure Python"``."""
    from . import frame

    return "compiled codec" if frame.compiled else "pure Python"
