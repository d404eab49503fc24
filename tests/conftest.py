"""Shared test configuration."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support import FakeClock, RecordingSleep


def pytest_configure(config: pytest.Config) -> None:
    """Put this interpreter's ``bin`` first on PATH for the mypy typing tests.

    pytest-mypy-plugins runs the first ``mypy`` on PATH; ``make pytest`` does not
    activate the virtualenv, so without this it finds none (or another version, whose
    messages differ from the pinned one).
    """
    scripts = str(Path(sys.executable).parent)
    os.environ["PATH"] = os.pathsep.join([scripts, os.environ.get("PATH", "")])


@pytest.fixture
def anyio_backend() -> str:
    """Async tests marked ``@pytest.mark.anyio`` run on asyncio."""
    return "asyncio"


@pytest.fixture
def fake_clock() -> FakeClock:
    """A clock at 0.0 that moves only when advanced."""
    return FakeClock()


@pytest.fixture
def recording_sleep() -> RecordingSleep:
    """A sleep that returns at once and records the delay."""
    return RecordingSleep()
