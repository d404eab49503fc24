"""The one part of the build that ``pyproject.toml`` cannot declare: a compiled module.

``statemachine/_grams.py`` (the convergence check's trigram bitmasks) is compiled with
mypyc, the compiler of mypy's project, into a C extension that Python imports in place of
the file (issue 23, twenty-eighth round: the run in memory ~8% faster). The file stays the
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
# The commands that build: mypycify type-checks the modules first (about 50 s), which the
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

    # --config-file= reads no configuration: pyproject.toml's names pydantic's mypy plugin,
    # which the isolated build environment does not have (nor needs: these modules import
    # only the standard library).
    extensions = list(mypycify(["--config-file=", *COMPILED], opt_level="3"))
    for extension in extensions:
        # Without a C compiler the build goes on, the module plain Python (and slower);
        # tests/test_grams_compiled.py fails when that happened unasked.
        extension.optional = True
    return extensions


setup(ext_modules=_extensions())
