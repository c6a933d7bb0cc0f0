"""The build's one step that pyproject.toml cannot say: compile the codec with mypyc.

A wheel built from this tree (``pip install .``, ``pip wheel .``,
``python -m build``) holds the codec's modules (``CODEC``, in
``trio_stomp/frame/``) and the broker's hot path (``BROKER``) compiled with
mypyc, beside their ``.py`` sources, when
a C compiler and the Python headers are present: a platform wheel. Otherwise,
or with ``TRIO_STOMP_PURE=1``, it is the pure-Python wheel (``py3-none-any``),
and the build says why in one line. ``trio_stomp.frame.compiled`` and
``trio-stomp --version`` tell which one runs.

An editable install (``pip install -e .``) stays pure: setuptools would put
the compiled modules in the source tree, beside the ``.py`` files a developer
edits, and they would shadow every edit. ``scripts/compile-codec`` compiles
in place on purpose, with this same list (``setup.py build_ext --inplace``).

mypy does the same (setuptools + ``mypycify`` in its setup.py); black ships
compiled wheels with hatch-mypyc. This project builds with setuptools, and a
fallback to pure Python is a few lines here (hatch-mypyc has none).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from pathlib import Path

from setuptools import Extension, setup

#: The codec's modules that are compiled: the encoder, the frames, the head parser, the
#: parser, escaping, the headers and the message runs (one shared library).
CODEC = (
    "_encoder",
    "_escaping",
    "_frame",
    "_handmade",
    "_headers",
    "_head",
    "_parser",
    "_runs",
    "_shape",
)
#: The embedded broker's modules compiled with them, in ``trio_stomp/broker/``: its
#: MESSAGE frames put together from parts (the broker's hot path; see _wire.py).
BROKER = ("_wire",)
GROUP = "trio_stomp.frame._codec"
#: Set (to anything but "" or "0"), the build is pure Python.
PURE_VARIABLE = "TRIO_STOMP_PURE"
#: The setup.py commands that build modules and so compile the codec (of the PEP
#: 517 hooks, ``bdist_wheel``; ``egg_info``, ``dist_info`` and ``sdist`` build none,
#: so they never pay for mypyc, and ``editable_wheel`` stays pure).
BUILDS = frozenset({"bdist_wheel", "build", "build_ext", "install"})


def why_pure() -> str | None:
    """Why this build cannot or must not compile the codec, or None when it can."""
    if os.environ.get(PURE_VARIABLE, "") not in ("", "0"):
        return f"{PURE_VARIABLE} is set"
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").is_file():
        return f"no Python headers (no Python.h in {include})"
    try:
        import mypyc.build  # noqa: F401  (a build requirement; absent without build isolation)
    except ImportError:
        return "mypyc is not installed (it comes with mypy)"
    return compiler_problem(include)


def compiler_problem(include: str) -> str | None:
    """None when the C compiler that setuptools would use compiles against Python.h."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.errors import CCompilerError, DistutilsError
    from setuptools._distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "probe.c")
        source.write_text("#include <Python.h>\nint probe(void) { return 0; }\n")
        try:
            compiler.compile([str(source)], output_dir=tmp, include_dirs=[include])
        except (CCompilerError, DistutilsError, OSError):
            command = getattr(compiler, "compiler_so", None) or ["the C compiler"]
            return f"no working C compiler ({command[0]} cannot compile against Python.h)"
    return None


def codec_extensions() -> list[Extension]:
    """The compiled codec, or none (a pure build) with a one-line notice saying why."""
    commands = set(sys.argv[1:])
    if "editable_wheel" in commands:
        print(
            "trio-stomp: an editable install is pure Python "
            "(scripts/compile-codec compiles the codec in place)",
            file=sys.stderr,
        )
        return []
    if not commands & BUILDS:
        return []  # metadata or the sdist: nothing compiled
    reason = why_pure()
    if reason is not None:
        print(
            f"trio-stomp: building pure Python, without the compiled codec: {reason}",
            file=sys.stderr,
        )
        return []
    from mypyc.build import mypycify

    print("trio-stomp: compiling the codec with mypyc", file=sys.stderr)
    paths = [f"trio_stomp/frame/{name}.py" for name in CODEC]
    paths += [f"trio_stomp/broker/{name}.py" for name in BROKER]
    # mypy reads trio_stomp/__init__.py (a parent package) and what it imports, which
    # needs trio and attrs; a build environment has neither. The codec imports nothing
    # of them: what mypy says of those modules is no concern of this build.
    return list(mypycify(["--follow-imports=silent", *paths], opt_level="3", group_name=GROUP))


if __name__ == "__main__":  # as setuptools runs it; tests/test_setup.py imports it
    setup(ext_modules=codec_extensions())
