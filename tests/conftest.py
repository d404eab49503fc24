"""Shared test configuration."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pg_cluster import Cluster
from support import PURE_GRAMS, FakeClock, RecordingSleep

from statemachine import (
    CheckpointCipher,
    Checkpointer,
    MemoryCheckpointer,
    PostgresCheckpointer,
    SQLiteCheckpointer,
    generate_key,
)


def pytest_configure(config: pytest.Config) -> None:
    """Put this interpreter's ``bin`` first on PATH for the mypy typing tests.

    pytest-mypy-plugins runs the first ``mypy`` on PATH; ``make pytest`` does not
    activate the virtualenv, so without this it finds none (or another version, whose
    messages differ from the pinned one).
    """
    scripts = str(Path(sys.executable).parent)
    os.environ["PATH"] = os.pathsep.join([scripts, os.environ.get("PATH", "")])


@pytest.fixture
def pure_grams(monkeypatch: pytest.MonkeyPatch) -> None:
    """The governor and the similarities make their masks with ``PURE_GRAMS.GramMasks``
    (statemachine/_grams.py as source) instead of the compiled class: for the tests of
    the algorithm itself, which replace its methods and constants with reference ones.
    tests/test_grams_compiled.py checks the compiled class against this one."""
    import statemachine._governor
    import statemachine._similarity

    monkeypatch.setattr(statemachine._governor, "GramMasks", PURE_GRAMS.GramMasks)
    monkeypatch.setattr(statemachine._similarity, "GramMasks", PURE_GRAMS.GramMasks)


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


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL server for the whole session, stopped and deleted at the end.

    Started only when a test asks for it. Missing PostgreSQL binaries fail the test
    with what to install: a PostgreSQL test is never skipped.
    """
    cluster = Cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["memory", "sqlite", "sqlite-encrypted", "postgres", "postgres-encrypted"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Checkpointer]:
    """Each test that asks for it runs against memory, SQLite and PostgreSQL, plain and encrypted.

    A PostgreSQL store gets its own empty schema in the session's cluster.
    """
    if request.param == "memory":
        yield MemoryCheckpointer()
        return
    sealer = (
        CheckpointCipher({"k1": generate_key()}, "k1") if "encrypted" in request.param else None
    )
    if request.param.startswith("postgres"):
        cluster: Cluster = request.getfixturevalue("pg_cluster")
        async with PostgresCheckpointer(cluster.fresh_dsn(), sealer=sealer) as postgres:
            yield postgres
        return
    async with SQLiteCheckpointer(tmp_path / "runs.sqlite3", sealer=sealer) as sqlite:
        yield sqlite
