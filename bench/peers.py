"""The peers' own virtual env, bench/.peers-venv, made and filled by the bench itself.

The peers are not dependencies of this project, and ``python-statemachine`` is
imported as ``statemachine``, our own name, so they can only live apart. The env is
made with the Python running this script, and the pins below are installed with pip;
a stamp file holding the pins makes a second run a no-op until they change. py-spy (the
sampling profiler ``profile.py`` uses) is installed there too, never in the project.

``python bench/peers.py`` makes the env and prints its path.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".peers-venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".pins"

# Pinned, so that a result names exactly what was measured. pydantic-graph stays on 1.x
# (its BaseNode API); burr is published as apache-burr since 0.42.
PINS = (
    "langgraph==1.2.24",
    "langgraph-checkpoint-sqlite==3.1.2",
    "pydantic-graph==1.107.10",
    "apache-burr==0.43.0",
    "transitions==0.9.3",
    "python-statemachine==3.2.2",
    "py-spy==0.4.3",
)

# The distributions whose versions a result reports (the pins and what they run on).
REPORTED = (
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "pydantic-graph",
    "pydantic",
    "apache-burr",
    "transitions",
    "python-statemachine",
    "py-spy",
)


def ensure() -> Path:
    """Make the env and install the pins unless the stamp says they are there; its python."""
    wanted = "\n".join(PINS) + "\n"
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return PYTHON
    if not PYTHON.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    subprocess.run(
        [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PINS],
        check=True,
    )
    STAMP.write_text(wanted)
    return PYTHON


if __name__ == "__main__":
    sys.stdout.write(f"{ensure()}\n")
