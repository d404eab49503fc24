"""The command line's one store opener, and its checks of every duration and count.

No command makes a store unless asked (``statemachine init``, ``worker --create``): a
path with no file, an empty file, a folder, a file that is not SQLite, another
application's database, or a PostgreSQL schema without the runs' tables is refused
with exit code 2 and one line saying what to do, and the file or database is left
exactly as it was. Every duration and count an option takes is checked: too long,
too many, zero where zero means nothing, each exit 2 with the reason.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from pg_cluster import Cluster

from statemachine import SQLiteCheckpointer
from statemachine.cli import main

ADVICE = "check the path (--db PATH or $STATEMACHINE_DB; --dsn DSN for PostgreSQL)"


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *, code: int = 2) -> str:
    """The one line a refused command printed on stderr, with its exit code checked."""
    try:
        returned = main(argv)
    except SystemExit as exit_info:  # argparse's own refusal
        returned = exit_info.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    assert (returned, out) == (code, ""), err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


def tables(path: Path) -> dict[str, str]:
    """The file's tables and their SQL, read without writing."""
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))


def other_app(path: Path) -> Path:
    """Another application's SQLite database, with a row in it."""
    with closing(sqlite3.connect(path)) as db, db:  # the second `with` commits
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO users (name) VALUES ('ada')")
    return path


def a_store(path: Path) -> Path:
    """A runs store, made on purpose."""
    assert main(["init", "--db", str(path)]) == 0
    return path


# --- SQLite: what is not a store is refused, and left as it was ------------------------------


def test_a_missing_file_is_refused_by_every_command_and_never_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """runs, stats and worker all refuse a path with no file; none makes one."""
    typo = tmp_path / "typo.sqlite3"
    said = (
        f"no runs store at {str(typo)!r}: there is no such file; {ADVICE}, or make a new "
        f"store there with statemachine init --db {typo} (a worker: --create)"
    )
    assert refused(["runs", "list", "--db", str(typo)], capsys) == f"statemachine: {said}"
    assert refused(["stats", "--db", str(typo)], capsys) == f"statemachine: {said}"
    worker = ["worker", "--agent", "agents.support", "--db", str(typo), "--exit-when-idle"]
    assert refused(worker, capsys) == f"statemachine worker: {said}"
    assert not typo.exists()


def test_an_empty_file_is_refused_and_stays_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``runs list --db empty.db`` on a 0-byte file: exit 2, and no schema is written into it."""
    empty = tmp_path / "empty.db"
    empty.touch()
    assert refused(["runs", "list", "--db", str(empty)], capsys) == (
        f"statemachine: no runs store at {str(empty)!r}: it is an empty file; {ADVICE}, or "
        f"make a new store there with statemachine init --db {empty} (a worker: --create)"
    )
    assert empty.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]  # no -wal, no -shm


def test_another_applications_database_is_refused_even_when_asked_to_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runs' tables are never added to a database that is not theirs, not even by init."""
    app = other_app(tmp_path / "other_app.sqlite3")
    before = tables(app)
    said = (
        f"no runs store at {str(app)!r}: it is another application's SQLite database "
        f"(tables: users); {ADVICE}; a runs store is never made in it"
    )
    assert refused(["runs", "list", "--db", str(app)], capsys) == f"statemachine: {said}"
    assert refused(["init", "--db", str(app)], capsys) == f"statemachine init: {said}"
    worker = ["worker", "--agent", "agents.support", "--db", str(app), "--create"]
    assert refused(worker, capsys) == f"statemachine worker: {said}"
    assert tables(app) == before
    with closing(sqlite3.connect(app)) as db:
        assert db.execute("SELECT name FROM users").fetchall() == [("ada",)]


def test_tables_named_as_ours_that_are_not_ours_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An application's own ``runs`` table is not a runs store's: refused, untouched."""
    path = tmp_path / "jobs.db"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE runs (run_id TEXT, started TEXT)")
    before = tables(path)
    assert refused(["runs", "list", "--db", str(path)], capsys) == (
        f"statemachine: no runs store at {str(path)!r}: its tables named as a runs store's "
        "are not one's (runs lacks agent, phase, seq, status, updated_at, waiting_for; "
        f"checkpoints lacks blob, kind, phase, run_id, seq); {ADVICE}; a runs store is never "
        "made in it"
    )
    assert tables(path) == before


def test_a_folder_or_a_file_that_is_not_sqlite_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Neither can become a store: init refuses them too."""
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    assert refused(["init", "--db", str(text)], capsys) == (
        f"statemachine init: no runs store at {str(text)!r}: it is not a SQLite database; "
        f"{ADVICE}; a runs store is never made in it"
    )
    assert text.read_text() == "not a database\n"
    assert refused(["runs", "list", "--db", str(tmp_path)], capsys) == (
        f"statemachine: no runs store at {str(tmp_path)!r}: it is not a file; {ADVICE}; a "
        "runs store is never made in it"
    )


def test_an_empty_sqlite_database_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SQLite file with no tables holds no runs: refused, but init may make it a store."""
    path = tmp_path / "blank.db"
    sqlite3.connect(path).execute("PRAGMA user_version = 1").connection.close()
    assert refused(["stats", "--db", str(path)], capsys).startswith(
        f"statemachine: no runs store at {str(path)!r}: it is an empty SQLite database;"
    )
    assert tables(path) == {}
    assert main(["init", "--db", str(path)]) == 0
    assert {"runs", "checkpoints"} <= set(tables(path))


# --- making a store on purpose ---------------------------------------------------------------


def test_init_makes_a_store_once_and_leaves_one_there_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """init on no file, or an empty one, makes a store; on a store it changes nothing."""
    path = tmp_path / "deep" / "runs.db"
    assert main(["init", "--db", str(path)]) == 0
    assert capsys.readouterr().out == (
        f"made a new, empty runs store: the checkpoint store {str(path)!r}\n"
    )
    assert main(["runs", "list", "--db", str(path)]) == 0
    assert capsys.readouterr().out == "no runs match\n"
    made = tables(path)
    assert main(["init", "--db", str(path)]) == 0
    assert capsys.readouterr().out == (
        f"the checkpoint store {str(path)!r} is a runs store already; nothing was changed\n"
    )
    assert tables(path) == made
    empty = tmp_path / "empty.db"
    empty.touch()
    assert main(["init", "--db", str(empty)]) == 0
    assert {"runs", "checkpoints", "claims", "leases", "effects"} <= set(tables(empty))


def test_a_worker_makes_its_store_only_with_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``worker --create`` starts before the first run is submitted; the store is made."""
    path = tmp_path / "runs.db"
    argv = ["worker", "--agent", "agents.support", "--db", str(path), "--exit-when-idle"]
    assert main([*argv, "--create"]) == 0
    assert capsys.readouterr().out == "processed 0 runs\n"
    assert {"runs", "checkpoints"} <= set(tables(path))
    assert main(argv) == 0  # a store now: no --create needed


def test_a_store_written_before_this_change_still_opens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file written by an earlier version (tests/data/legacy-runs.db) is a runs store."""
    legacy = tmp_path / "legacy.db"
    legacy.write_bytes((Path(__file__).parent / "data" / "legacy-runs.db").read_bytes())
    assert main(["runs", "list", "--db", str(legacy)]) == 0
    assert "RUN" in capsys.readouterr().out


# --- PostgreSQL ----------------------------------------------------------------------------


def schema_tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' "
            "AND relnamespace = current_schema()::regnamespace"
        ).fetchall()
    return {name for (name,) in rows}


def test_a_postgres_schema_without_the_runs_tables_is_refused_until_init(
    pg_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """runs, stats and worker refuse a schema with no runs store and make nothing in it."""
    dsn = pg_cluster.fresh_dsn("opener")
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER)")
    said = refused(["runs", "list", "--dsn", dsn], capsys)
    assert said.startswith("statemachine: no runs store in the PostgreSQL store ")
    assert said.endswith(
        ": its current schema has no statemachine_checkpoints or statemachine_runs table; "
        "check the DSN (--dsn DSN or $STATEMACHINE_DSN), or make a new store there with "
        "statemachine init --dsn DSN (a worker: --create)"
    )
    assert "password" not in said
    worker = ["worker", "--agent", "agents.support", "--dsn", dsn, "--exit-when-idle"]
    assert refused(worker, capsys).startswith("statemachine worker: no runs store in ")
    assert schema_tables(dsn) == {"invoices"}
    assert main(["init", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.startswith("made a new, empty runs store: the PostgreSQL")
    assert {"invoices", "statemachine_runs", "statemachine_checkpoints"} <= schema_tables(dsn)
    assert main(["runs", "list", "--dsn", dsn]) == 0
    assert capsys.readouterr().out == "no runs match\n"
    fresh = pg_cluster.fresh_dsn("opener")
    assert main([*worker[:3], "--dsn", fresh, "--exit-when-idle", "--create"]) == 0
    assert "statemachine_runs" in schema_tables(fresh)


def test_a_postgres_server_that_cannot_be_reached_is_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not a missing store but a server down: exit 1, and the password is not shown."""
    dsn = "postgresql://ada:s3cret@127.0.0.1:9/nowhere?connect_timeout=2"
    said = refused(["runs", "list", "--dsn", dsn], capsys, code=1)
    assert said.startswith("statemachine: cannot connect to the PostgreSQL store '")
    assert "s3cret" not in said


# --- durations and counts ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["runs", "purge", "--older-than", "99999999999999w"],
            "statemachine runs purge: argument --older-than: '99999999999999w' is too long (a "
            "duration is at most 36500d, 100 years) (see statemachine runs purge --help)",
        ),
        (
            ["runs", "purge", "--older-than", "36501d"],
            "statemachine runs purge: argument --older-than: '36501d' is too long (a duration "
            "is at most 36500d, 100 years) (see statemachine runs purge --help)",
        ),
        (
            ["worker", "--agent", "m", "--lease", "9" * 400 + "s"],
            "is too long (a duration is at most 36500d, 100 years)",
        ),
        (
            ["worker", "--agent", "m", "--lease", "0.0000001ms"],
            "argument --lease: '0.0000001ms' is not a positive duration",
        ),
        (["worker", "--agent", "m", "--poll", "0s"], "'0s' is not a positive duration"),
        (["worker", "--agent", "m", "--max-runs", "0"], "'0' is not a positive whole number"),
        (["worker", "--agent", "m", "--max-runs", "-3"], "'-3' is not a positive whole number"),
        (["worker", "--agent", "m", "--max-runs", "2.5"], "'2.5' is not a positive whole number"),
        (
            ["worker", "--agent", "m", "--max-runs", "9" * 5000],
            "is too many (at most 1,000,000,000)",
        ),
        (
            ["worker", "--agent", "m", "--max-failures", "0"],
            "argument --max-failures: '0' is not a positive whole number",
        ),
    ],
)
def test_every_duration_and_count_is_checked(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Overflow, zero and negative values: one line, exit 2, before anything is opened."""
    line = refused([*argv, "--db", str(tmp_path / "none.db")], capsys)
    assert said in line
    assert len(line) < 400
    assert not (tmp_path / "none.db").exists()


def test_the_longest_age_still_purges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """36500d is accepted, and a purge that old computes its cut-off without overflow."""
    path = a_store(tmp_path / "runs.db")
    capsys.readouterr()
    assert main(["runs", "purge", "--older-than", "36500d", "--db", str(path)]) == 0
    assert capsys.readouterr().out.startswith("removed 0 completed or aborted run(s)")


def test_the_store_the_commands_open_is_the_library_store(tmp_path: Path) -> None:
    """The opener hands back the library's own store: what init made is what code reads."""
    path = a_store(tmp_path / "runs.db")

    async def read() -> int:
        async with SQLiteCheckpointer(path) as store:
            return len(await store.registry())

    import anyio

    assert anyio.run(read) == 0
