"""What every command decides the same way: which store, which keys, what duration, which module.

- :class:`Refusal`: the one error a command raises to stop with a reason. It is printed
  as one line on stderr, after the command's name, and ends the process with its
  ``code`` (1 unless the command says otherwise).
- :class:`Parser`: argparse, but a command line it cannot read is one line on stderr
  (which command, what is wrong, where the help is) and exit code 2.
- :func:`store_options` (``--db``/``--dsn``/``--key-file``) and :func:`json_option`
  (``--json``): the parent parsers of every command that reads a store.
- :func:`open_store`, the one store opener of every command and the worker:
  PostgreSQL when ``--dsn`` (or ``$STATEMACHINE_DSN``, unless ``--db`` is given) names
  one, else the SQLite file ``--db`` (or ``$STATEMACHINE_DB``, else
  ``./statemachine.db``). It looks before it opens, and never creates a store unless
  asked (``statemachine init``, or ``worker --create``): a path with no file, an empty
  file, or a database without a runs store's tables is refused with exit code 2 and
  one line that says what to do, since for ``runs`` and ``stats`` (which read runs a
  program saved) it can only be a mistyped path, and a store made there would hide the
  mistake. A folder, a file that is not SQLite, or another application's database is
  refused even when asked to create: the runs' tables are never added to a database
  that is not theirs. A SQLite file is inspected read-only (``mode=ro``) first; a
  PostgreSQL database is asked whether its schema holds the ``statemachine_`` tables.
- :func:`sealer`, the one key reader: ``--key-file PATH`` (``id:base64key`` entries,
  the current key first, separated by commas or lines) or
  ``$STATEMACHINE_CHECKPOINT_KEYS`` in the same form (commas).
- :func:`duration`, the one duration grammar: a number and a unit, one of ``ms s m h d
  w`` (``200ms``, ``0.5s``, ``45s``, ``5m``, ``12h``, ``30d``, ``2w``), at most
  ``36500d`` (100 years: anything longer is a typo, and would overflow a date). The unit
  is required: a bare ``30`` could be seconds or days, and ``purge`` must not guess.
  :func:`count`, the one count grammar: a positive whole number, at most 1,000,000,000.
- :func:`resolve` reads ``MODULE[:ATTR]``; :func:`runner_factory` finds the function
  that builds a worker's runner (``worker_runner`` unless ``:FUNCTION`` names another).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

import anyio

from .. import CheckpointCorruptError, Checkpointer, Runner, SQLiteCheckpointer
from ..persist._crypto import ENV_VAR as KEYS_VAR

if TYPE_CHECKING:
    from .. import CheckpointCipher

__all__ = [
    "DB_VAR",
    "DEFAULT_DB",
    "DSN_VAR",
    "FACTORY",
    "KEYS_VAR",
    "PROG",
    "Parser",
    "Refusal",
    "close_store",
    "count",
    "duration",
    "json_option",
    "keys_given",
    "open_store",
    "resolve",
    "runner_factory",
    "sealer",
    "store_options",
    "using_store",
]

PROG: Final = "statemachine"
DB_VAR: Final = "STATEMACHINE_DB"
DSN_VAR: Final = "STATEMACHINE_DSN"
DEFAULT_DB: Final = "statemachine.db"
# What ``--agent MODULE`` calls to build a runner, unless ``MODULE:FUNCTION`` names another.
FACTORY: Final = "worker_runner"


class Refusal(Exception):
    """A command that stops with a reason: one line on stderr, exit code ``code``."""

    def __init__(self, message: str, *, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    """argparse, but a command line it cannot read is one line on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


# --- the options ---------------------------------------------------------------------------


def store_options() -> Parser:
    """``--db``, ``--dsn`` and ``--key-file``: which store, and its keys."""
    options = Parser(add_help=False)
    where = options.add_mutually_exclusive_group()
    where.add_argument(
        "--db",
        metavar="PATH",
        help=f"the runs' SQLite file (default: ${DB_VAR}, else ./{DEFAULT_DB})",
    )
    where.add_argument(
        "--dsn",
        metavar="DSN",
        help=f"a PostgreSQL connection string; used instead of --db (default: ${DSN_VAR})",
    )
    options.add_argument(
        "--key-file",
        metavar="PATH",
        help=f"keys of an encrypted store, id:base64key, current first (default: ${KEYS_VAR})",
    )
    return options


def json_option() -> Parser:
    """``--json``: one JSON document instead of text for a person."""
    options = Parser(add_help=False)
    options.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    return options


_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\Z")
_SECONDS: Final = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_LONGEST: Final = timedelta(days=36500)  # 100 years: a longer one is a typo
_MOST: Final = 1_000_000_000  # the largest count an option takes


def duration(what: str, hint: str, *, positive: bool = False) -> Callable[[str], timedelta]:
    """An argparse ``type`` for the one duration grammar (a number and a unit).

    A text it cannot read is refused as ``'TEXT' is not WHAT; HINT``; with
    ``positive``, a zero duration is refused too.
    """

    def read(text: str) -> timedelta:
        found = _DURATION.match(text.strip())
        if found is None:
            raise argparse.ArgumentTypeError(f"{_quoted(text)} is not {what}; {hint}")
        number, unit = found.groups()
        seconds = float(number) * _SECONDS[unit]  # inf, for more digits than a float holds
        if seconds > _LONGEST.total_seconds():  # also what timedelta could not hold
            raise argparse.ArgumentTypeError(
                f"{_quoted(text)} is too long (a duration is at most 36500d, 100 years)"
            )
        span = timedelta(seconds=seconds)
        if positive and span <= timedelta(0):
            raise argparse.ArgumentTypeError(f"{_quoted(text)} is not a positive duration")
        return span

    return read


def count(text: str) -> int:
    """An argparse ``type`` for a count: a positive whole number, at most 1,000,000,000."""
    digits = text.strip()
    significant = digits.lstrip("0")
    if not (digits.isascii() and digits.isdigit()) or not significant:
        raise argparse.ArgumentTypeError(f"{_quoted(text)} is not a positive whole number")
    # Its length first: int() refuses more than 4,300 digits.
    if len(significant) > len(str(_MOST)) or int(significant) > _MOST:
        raise argparse.ArgumentTypeError(f"{_quoted(text)} is too many (at most {_MOST:,})")
    return int(significant)


def _quoted(text: str) -> str:
    """``text`` as a message quotes it: in full, unless it is too long to read."""
    return repr(text if len(text) <= 40 else f"{text[:30]}...")


# --- the store -----------------------------------------------------------------------------


def keys_given(args: argparse.Namespace) -> bool:
    """Whether the command was given keys (``--key-file`` or the environment variable)."""
    return bool(args.key_file or os.environ.get(KEYS_VAR, "").strip())


def sealer(args: argparse.Namespace) -> CheckpointCipher | None:
    """The cipher of the keys given (``--key-file``, else ``$STATEMACHINE_CHECKPOINT_KEYS``)."""
    from .. import CheckpointCipher  # only a sealed store pays for the cipher's module

    if not args.key_file:
        return CheckpointCipher.from_env() if keys_given(args) else None
    path = Path(args.key_file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise Refusal(f"cannot read the key file {str(path)!r} ({error.strerror})") from None
    entries = ",".join(part.strip() for part in re.split(r"[,\n]", text) if part.strip())
    if not entries:
        raise Refusal(
            f"the key file {str(path)!r} holds no key; write id:base64key entries in it, "
            "the current key first"
        )
    where = f"key file {path}"
    return CheckpointCipher.from_env(where, environ={where: entries})


# A SQLite file starts with these 16 bytes; a runs store has these tables, with these columns.
_SQLITE_HEADER: Final = b"SQLite format 3\x00"
_OUR_TABLES: Final = {
    "runs": frozenset({"run_id", "agent", "status", "phase", "waiting_for", "updated_at", "seq"}),
    "checkpoints": frozenset({"run_id", "seq", "kind", "phase", "blob"}),
}
_PG_TABLES: Final = ("statemachine_runs", "statemachine_checkpoints")
_PG_CONNECT_TIMEOUT: Final = 10  # seconds, unless the DSN says otherwise


class _NotAStore(Exception):
    """Why a place holds no runs store; ``creatable`` when a store may be made there."""

    def __init__(self, message: str, *, creatable: bool) -> None:
        super().__init__(message)
        self.creatable = creatable


def _sqlite_tables(path: Path) -> dict[str, set[str]]:
    """The tables of the SQLite file at ``path`` and their columns, read without writing."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    db = sqlite3.connect(uri, uri=True)
    try:
        names = [
            name
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {
            name: {row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", (name,))}
            for name in names
        }
    finally:
        db.close()


def _check_sqlite(path: Path) -> None:
    """Raise :class:`_NotAStore` unless ``path`` is a runs store's SQLite file."""
    if not path.exists():
        raise _NotAStore("there is no such file", creatable=True)
    if not path.is_file():
        raise _NotAStore("it is not a file", creatable=False)
    with path.open("rb") as file:
        head = file.read(len(_SQLITE_HEADER))
    if not head:
        raise _NotAStore("it is an empty file", creatable=True)
    if head != _SQLITE_HEADER:
        raise _NotAStore("it is not a SQLite database", creatable=False)
    try:
        tables = _sqlite_tables(path)
    except sqlite3.Error as error:
        raise _NotAStore(f"it cannot be read as SQLite ({error})", creatable=False) from None
    if not tables:
        raise _NotAStore("it is an empty SQLite database", creatable=True)
    lacking = {
        table: sorted(columns - tables.get(table, set()))
        for table, columns in _OUR_TABLES.items()
        if not columns <= tables.get(table, set())
    }
    if not lacking:
        return
    if not set(_OUR_TABLES) & set(tables):
        listed = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise _NotAStore(
            f"it is another application's SQLite database (tables: {listed})", creatable=False
        )
    said = "; ".join(f"{table} lacks {', '.join(columns)}" for table, columns in lacking.items())
    raise _NotAStore(f"its tables named as a runs store's are not one's ({said})", creatable=False)


async def _check_postgres(dsn: str, where: str) -> None:
    """Raise :class:`_NotAStore` unless the database holds a runs store's tables.

    A server that cannot be reached is a :class:`Refusal` (exit 1), as the store says it.
    """
    from psycopg import AsyncConnection, OperationalError
    from psycopg.conninfo import conninfo_to_dict

    options: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in conninfo_to_dict(dsn):
        options["connect_timeout"] = _PG_CONNECT_TIMEOUT
    try:
        connection = await AsyncConnection.connect(dsn, **options)
    except OperationalError as error:
        reason = " ".join(str(error).split())
        raise Refusal(
            f"cannot connect to {where} ({reason}); check the DSN's host, port, dbname, user "
            "and password, and that the server is running and accepts connections from here"
        ) from None
    try:
        cursor = await connection.execute(
            "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND relname = ANY(%s) "
            "AND relnamespace = current_schema()::regnamespace",
            (list(_PG_TABLES),),
        )
        found = {name for (name,) in await cursor.fetchall()}
    finally:
        await connection.close()
    if found != set(_PG_TABLES):
        absent = " or ".join(sorted(set(_PG_TABLES) - found))
        raise _NotAStore(f"its current schema has no {absent} table", creatable=True)


def _refused(problem: _NotAStore, create: bool, *, where: str, check: str, init: str) -> Refusal:
    """The refusal for a place that holds no runs store: what to do about it, in one line.

    ``where`` says where it looked (``at PATH``, ``in`` a database); ``check`` names the
    options to look at; ``init`` is the store option of
    ``statemachine init`` that would make a store there.
    """
    said = f"no runs store {where}: {problem}; check {check}"
    if problem.creatable and not create:
        said += f", or make a new store there with {PROG} init {init} (a worker: --create)"
    elif not problem.creatable:
        said += "; a runs store is never made in it"
    return Refusal(said, code=2)


async def open_store(args: argparse.Namespace, *, create: bool = False) -> Checkpointer:
    """The store the options name, once it is known to be a runs store (see the module).

    ``create``: the command was asked to create it (``init``, ``worker --create``); a
    store is then made where there is none (no file, an empty file or database), and
    never in another application's database. Anything else is a :class:`Refusal` with
    exit code 2.
    """
    keys = sealer(args)
    # An explicit --db wins over $STATEMACHINE_DSN.
    dsn = args.dsn or ("" if args.db else os.environ.get(DSN_VAR, ""))
    if dsn:
        try:
            from .. import PostgresCheckpointer
        except ImportError as error:
            raise Refusal(
                f"the PostgreSQL store is not available here ({error}); install psycopg "
                "(pip install 'statemachine-agents[postgres]'), or use --db for a SQLite file"
            ) from None
        postgres = PostgresCheckpointer(dsn, sealer=keys)  # a bad DSN is refused here
        where = postgres._where  # the DSN without its password
        try:
            await _check_postgres(dsn, where)
        except _NotAStore as problem:
            if not (create and problem.creatable):
                raise _refused(
                    problem,
                    create,
                    where=f"in {where}",
                    check=f"the DSN (--dsn DSN or ${DSN_VAR})",
                    init="--dsn DSN",
                ) from None
        return postgres
    path = Path(args.db or os.environ.get(DB_VAR) or DEFAULT_DB)
    try:
        _check_sqlite(path)
    except _NotAStore as problem:
        if not (create and problem.creatable):
            raise _refused(
                problem,
                create,
                where=f"at {str(path)!r}",
                check=f"the path (--db PATH or ${DB_VAR}; --dsn DSN for PostgreSQL)",
                init=f"--db {shlex.quote(str(path))}",
            ) from None
    return SQLiteCheckpointer(path, sealer=keys)


async def close_store(store: Checkpointer) -> None:
    """Close ``store`` if it holds connections, even when the command was cancelled."""
    aclose: Callable[[], Any] | None = getattr(store, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


async def using_store(
    args: argparse.Namespace,
    command: Callable[[Checkpointer, argparse.Namespace], Awaitable[int]],
) -> int:
    """Run ``command`` on the store the options name, then close it; its exit code.

    A checkpoint that is not JSON, read without keys, is most likely sealed: the
    refusal says to give the keys rather than that the store is damaged.
    """
    store = await open_store(args)
    try:
        return await command(store, args)
    except CheckpointCorruptError as error:
        if keys_given(args) or "is not JSON" not in error.detail:
            raise
        raise Refusal(
            f"the checkpoints of run {error.run_id!r} are not plain JSON: the store is "
            f"encrypted (or damaged). Give its keys with --key-file PATH or ${KEYS_VAR}"
        ) from None
    finally:
        await close_store(store)


# --- modules -------------------------------------------------------------------------------


def resolve(spec: str, *, default: str = "", noun: str = "", code: int = 1) -> object | None:
    """What ``MODULE[:ATTR]`` names, or ``None`` when the module has no such attribute.

    ATTR may be a dotted path; without it, the module's ``default`` attribute (the
    module itself when there is no default). A module that cannot be imported is a
    :class:`Refusal` with exit code ``code``, naming the module after ``noun``.
    """
    module_name, _, attribute = spec.partition(":")
    named = f"{noun} {module_name!r}" if noun else module_name
    if not module_name:
        raise Refusal(f"{spec!r} names no module; write MODULE or MODULE:ATTRIBUTE", code=code)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise Refusal(f"cannot import {named}: {error}", code=code) from None
    path = attribute or default
    value: object = module
    for part in path.split(".") if path else ():
        if not hasattr(value, part):
            return None
        value = getattr(value, part)
    return value


def runner_factory(spec: str) -> Callable[[Checkpointer], Runner[Any]]:
    """The function ``--agent MODULE[:FUNCTION]`` names, checked to build a :class:`Runner`.

    It is the agent's own code, so what it returns is checked when it is called.
    """
    module_name, _, function = spec.partition(":")
    found = resolve(spec, default=FACTORY, noun="the agent module")
    if not callable(found):
        raise Refusal(
            f"{module_name} has no {function or FACTORY}(checkpointer) that builds a Runner; "
            "define one, or name the function as MODULE:FUNCTION"
        )
    make: Callable[[Checkpointer], object] = found

    def build(store: Checkpointer) -> Runner[Any]:
        built = make(store)
        if not isinstance(built, Runner):
            raise Refusal(f"{spec} returned {type(built).__name__}, not a Runner")
        runner: Runner[Any] = built
        return runner

    return build
