"""A user's own agent, in a folder outside the checkout, type-checks against the install.

Issue 19: an editable install finds the package through an import hook that mypy and
pyright cannot follow, so `make install` also writes a path entry naming the checkout.
Both checkers run here from a temporary folder, as a user next to a checkout runs them,
on a file that must pass and on one whose illegal transition they must reject (which
they can only do when they see the library's real types, not a missing import's Any).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

AGENT = textwrap.dedent(
    """
    from pydantic import BaseModel

    from statemachine import Agent, Done, Failed, Planning, Runtime

    class Ctx(BaseModel):
        customer: str

    agent = Agent[Ctx](name="mine")

    async def step(phase: Planning[Ctx], rt: Runtime) -> Done[Ctx] | Failed[Ctx]:
        return phase.fail("no plan")
    """
)

ILLEGAL = textwrap.dedent(
    """
    from statemachine import Done, Failed, Runtime, ToolCalling

    async def step(phase: Failed[None], rt: Runtime) -> ToolCalling[None]:
        return phase.advance(rt)
    """
)


def _environment() -> dict[str, str]:
    """The user's shell with the project's venv active; nothing pointing at the checkout."""
    env = {key: value for key, value in os.environ.items() if key not in ("MYPYPATH", "PYTHONPATH")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYRIGHT_PYTHON_IGNORE_WARNINGS"] = "1"
    return env


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "my_project"
    folder.mkdir()
    (folder / "my_agent.py").write_text(AGENT)
    (folder / "illegal.py").write_text(ILLEGAL)
    (folder / "pyrightconfig.json").write_text('{"typeCheckingMode": "strict"}\n')
    return folder


def _run(folder: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command),
        cwd=folder,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_mypy_outside_the_checkout_finds_the_package(outside: Path) -> None:
    done = _run(outside, str(BIN / "mypy"), "--strict", "--no-incremental", "my_agent.py")
    assert done.returncode == 0, done.stdout + done.stderr
    rejected = _run(outside, str(BIN / "mypy"), "--strict", "--no-incremental", "illegal.py")
    assert rejected.returncode == 1, rejected.stdout + rejected.stderr
    assert "import-not-found" not in rejected.stdout
    assert 'illegal.py:5: error: "Failed[None]" has no attribute "advance"' in rejected.stdout


def test_pyright_outside_the_checkout_finds_the_package(outside: Path) -> None:
    python = str(BIN / "python")
    done = _run(outside, str(BIN / "pyright"), "--pythonpath", python, "my_agent.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 errors" in done.stdout
    rejected = _run(outside, str(BIN / "pyright"), "--pythonpath", python, "illegal.py")
    assert rejected.returncode == 1, rejected.stdout + rejected.stderr
    assert "reportMissingImports" not in rejected.stdout
    assert 'Cannot access attribute "advance" for class "Failed[None]"' in rejected.stdout
