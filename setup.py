"""The one part of the build that ``pyproject.toml`` cannot declare: a compiled module.

``statemachine/_grams.py`` (the convergence check's trigram bitmasks) is compiled with
mypyc, the compiler of mypy's project, into a C extension that Python imports in place of
the file (issue 23, twenty-eighth round: the run in memory ~9% faster). The file stays the
source, and the tests check the compiled module against it. ``STATEMACHINE_PURE=1`` builds
nothing: the package is then plain Python, as on an interpreter mypyc does not support.
"""

from __future__ import annotations

import os
import platform
import sys

from setuptools import Extension, setup

# The modules compiled: each imports nothing of the package's, so mypy reads them alone.
COMPILED = ["statemachine/_grams.py"]
# The commands that build: mypycify type-checks the modules first, which the
# build backend's other calls of this file (its requirements, the metadata) do not need.
_BUILDING = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def _extensions() -> list[Extension]:
    if (
        os.environ.get("STATEMACHINE_PURE") == "1"
        or platform.python_implementation() != "CPython"
        or _BUILDING.isdisjoint(sys.argv[1:])
    ):
        return []
    from mypyc.build import mypycify

    # The modules import only the standard library, so mypy reads nothing else: no
    # configuration (--config-file=: pyproject.toml's names pydantic's mypy plugin) and
    # not the package around them (--follow-imports=skip: statemachine/__init__.py imports
    # pydantic, attrs and the rest, which the build environment need not have).
    options = ["--config-file=", "--follow-imports=skip", "--ignore-missing-imports"]
    extensions = list(mypycify([*options, *COMPILED], opt_level="3"))
    for extension in extensions:
        # Without a C compiler the build goes on, the module plain Python (and slower);
        # tests/test_grams_compiled.py fails when that happened unasked.
        extension.optional = True
    return extensions


setup(ext_modules=_extensions())
