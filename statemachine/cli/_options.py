"""What every command decides the same way: which store, which keys, what duration, which module.

- :class:`Refusal`: the one error a command raises to stop with a reason. It is printed
  as one line on stderr, after the command's name, and ends the process with its
  ``code`` (1 unless the command says otherwise).
- :class:`Parser`: argparse, but a command line it cannot read is one line on stderr
  (which command, what is wrong, where the help is) and exit code 2.
- :func:`store_options` (``--db``/``--dsn``/``--key-file``) and :func:`json_option`
  (``--json``): the parent parsers of every command that reads a store.
- :func:`open_store`, the one store opener: PostgreSQL when ``--dsn`` (or
  ``$STATEMACHINE_DSN``, unless ``--db`` is given) names one, else the SQLite file
  ``--db`` (or ``$STATEMACHINE_DB``, else ``./statemachine.db``). Its one rule for a
  SQLite file that does not exist: it is refused, never created, unless the command
  waits for runs to be submitted (``create=True``: the worker). ``runs`` and ``stats``
  read and steer runs that a program saved, so for them a missing file can only be a
  mistyped path, which must not become a new, empty store; a worker may be started
  before the first run is submitted, and its store is created then.
- :func:`sealer`, the one key reader: ``--key-file PATH`` (``id:base64key`` entries,
  the current key first, separated by commas or lines) or
  ``$STATEMACHINE_CHECKPOINT_KEYS`` in the same form (commas).
- :func:`duration`, the one duration grammar: a number and a unit, one of ``ms s m h d
  w`` (``200ms``, ``0.5s``, ``45s``, ``5m``, ``12h``, ``30d``, ``2w``). The unit is
  required: a bare ``30`` could be seconds or days, and ``purge`` must not guess.
- :func:`resolve` reads ``MODULE[:ATTR]``; :func:`runner_factory` finds the function
  that builds a worker's runner (``worker_runner`` unless ``:FUNCTION`` names another).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
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


def duration(what: str, hint: str, *, positive: bool = False) -> Callable[[str], timedelta]:
    """An argparse ``type`` for the one duration grammar (a number and a unit).

    A text it cannot read is refused as ``'TEXT' is not WHAT; HINT``; with
    ``positive``, a zero duration is refused too.
    """

    def read(text: str) -> timedelta:
        found = _DURATION.match(text.strip())
        if found is None:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}; {hint}")
        number, unit = found.groups()
        try:
            span = timedelta(seconds=float(number) * _SECONDS[unit])
        except OverflowError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is too long (a duration is at most 999999999 days)"
            ) from None
        if positive and span <= timedelta(0):
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration")
        return span

    return read


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


def open_store(args: argparse.Namespace, *, create: bool = False) -> Checkpointer:
    """The store the options name (see the module's docstring).

    A SQLite file that does not exist is refused, unless ``create`` (a command that
    waits for runs to be submitted): then it is created when first used.
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
                "(pip install 'statemachine[postgres]'), or use --db for a SQLite file"
            ) from None
        return PostgresCheckpointer(dsn, sealer=keys)
    path = Path(args.db or os.environ.get(DB_VAR) or DEFAULT_DB)
    if not create and not path.is_file():
        raise Refusal(
            f"no database at {str(path)!r}; give the runs' SQLite file with --db PATH "
            f"(or ${DB_VAR}), or a PostgreSQL store with --dsn"
        )
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
    store = open_store(args)
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
