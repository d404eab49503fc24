"""The test suite on every Python the package supports: ``make test-all`` runs these sessions.

One session per version (``nox -s tests-3.12``), each in a virtualenv of its own under
``.nox/``, with the package installed editable and its ``dev`` extra. Arguments after
``--`` go to pytest (``nox -s tests-3.13 -- -x tests/test_worker.py``). The local-model
tests (``-m local``) are not run here: ``make test-local`` runs them on one version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nox

PYTHONS = ("3.11", "3.12", "3.13")  # requires-python = ">=3.11", and the classifiers

# A missing interpreter fails its session instead of skipping it (nox's default outside
# CI), and nox never downloads one: a version that is not installed is not tested.
nox.options.error_on_missing_interpreters = True
nox.options.download_python = "never"
nox.options.default_venv_backend = "venv"
# Kept between runs: the install step then only brings the environment up to date.
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests"]


def _pyenv_bins() -> list[str]:
    """The ``bin`` folder of each installed pyenv version that matches one of ``PYTHONS``.

    pyenv puts only its selected version on PATH (the others' shims answer "command not
    found"), and nox looks for ``python3.12`` on PATH: these folders go first, so every
    installed version is found whichever one is selected. ``pyenv prefix 3.12`` names the
    newest 3.12 installed. Without pyenv, the interpreters on PATH are used.
    """
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    pyenv = shutil.which("pyenv") or shutil.which("pyenv", path=os.path.join(root, "bin"))
    if pyenv is None:
        return []
    bins = []
    for version in PYTHONS:
        found = subprocess.run(
            [pyenv, "prefix", version], capture_output=True, text=True, check=False
        )
        if found.returncode == 0 and found.stdout.strip():
            bins.append(os.path.join(found.stdout.strip(), "bin"))
    return bins


os.environ["PATH"] = os.pathsep.join([*_pyenv_bins(), os.environ.get("PATH", "")])


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """pytest, every test but the local-model ones, on one Python version."""
    session.install("--quiet", "--upgrade", "pip")
    session.install("--quiet", "-e", ".[dev]")
    # As `make install` does: a path entry naming the checkout, which mypy and pyright
    # follow (the editable install's import hook they cannot), for tests that run them.
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = session.run_install("python", "-c", where, silent=True)
    if isinstance(purelib, str):  # None when installing is skipped (nox --no-install)
        Path(purelib.strip(), "statemachine_agents_checkout.pth").write_text(f"{Path.cwd()}\n")
    session.run("pytest", "-m", "not local", *session.posargs)
