"""``statemachine COMMAND ...`` (``python -m statemachine``): the operators' command line.

One argparse tree (``_tree``) with the options every command shares (``_options``):
``runs`` (list, show, approve, deny, stop, resume, abort, purge), ``stats``,
``diagram``, ``worker``, ``inbox`` (the approvals inbox's web server) and ``init``
(the one command that makes a new store). Each command's code is in a module of its
own, imported only when that command runs: ``diagram`` does not pay for the worker's
imports.

Every command prints aligned text for a person, or one JSON document with ``--json``.
Exit codes: 0 done; 1 refused (an unknown run, a run not in a state where the command
applies, a wrong key, a store that cannot be reached), with one line on stderr and
never a traceback; 2 a command line that cannot be read (one line on stderr:
:func:`main` raises ``SystemExit(2)``, as argparse does, and ``SystemExit(0)`` after
``--help``), or a store option that names no runs store (no file there, an empty file,
another application's database; ``_options.open_store``); 130 interrupted.
``diagram`` also answers 2 for a target that names no agent.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Sequence
from typing import Final

from .. import StatemachineError, UnknownRunError
from ._options import PROG, Refusal
from ._tree import tree

__all__ = ["main"]

# How each command's refusals begin (as they always have).
_SAYS: Final = {
    "runs": PROG,
    "stats": PROG,
    "diagram": "diagram",
    "worker": f"{PROG} worker",
    "init": f"{PROG} init",
    "inbox": f"{PROG} inbox",
}


def main(argv: Sequence[str]) -> int:
    """Run the command ``argv`` names (``sys.argv[1:]``); return its exit code."""
    args = tree().parse_args(list(argv))
    say = _SAYS[args.command]
    try:
        return _run(args)
    except KeyboardInterrupt:
        _refuse(f"{say}: interrupted")
        return 130
    except Exception as error:
        return _report(_unwrapped(error), say)


def _run(args: argparse.Namespace) -> int:
    """The command's own module, imported now, runs it."""
    match args.command:
        case "runs":
            from . import _runs

            return _runs.run(args)
        case "stats":
            from . import _stats

            return _stats.run(args)
        case "diagram":
            from . import _diagram

            return _diagram.run(args)
        case "worker":
            from . import _worker

            return _worker.run(args)
        case "init":
            from . import _init

            return _init.run(args)
        case "inbox":
            from . import _inbox

            return _inbox.run(args)
    raise AssertionError(f"no module runs the command {args.command!r}")


def _unwrapped(error: BaseException) -> BaseException:
    """The one error inside task groups' exception groups (the runner drives in one)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _report(error: BaseException, say: str) -> int:
    """Say what went wrong in one line on stderr, after ``say``; return the exit code."""
    match error:
        case Refusal():
            _refuse(f"{say}: {error}")
            return error.code
        case UnknownRunError():
            _refuse(
                f"{say}: no run {error.run_id!r} in {error.store}: it was never saved there, "
                f"or was purged; {PROG} runs list shows the runs there are"
            )
        case StatemachineError():
            _refuse(f"{say}: {error}")
        case BrokenPipeError():
            # The reader went away (``| head``): say nothing more, to a stdout that is gone.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        case sqlite3.Error() | OSError():
            _refuse(f"{say}: {type(error).__name__}: {error}")
        case _:
            # Not one of ours (an agent's own code, say): still one line, named by its type.
            _refuse(f"{say}: unexpected {type(error).__name__}: {error}")
    return 1


def _refuse(message: str) -> None:
    print(" ".join(message.split()), file=sys.stderr)
