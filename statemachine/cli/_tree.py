"""The one argparse tree of ``statemachine COMMAND ...``: every command, action and option.

Only argparse and the shared options are imported here, so that ``--help`` and a
command line that cannot be read cost nothing of what the commands themselves load.
"""

from __future__ import annotations

import argparse
from typing import Final

from .. import RunStatus
from ._options import FACTORY, PROG, Parser, count, duration, json_option, store_options

__all__ = ["tree"]

# The one duration grammar (``_options.duration``), worded for what each option means.
_AGE: Final = duration("an age", "write a number and a unit: 30d, 12h, 90m, 45s or 2w")
_SPAN: Final = duration(
    "a duration", "write a number with a unit: 200ms, 0.2s, 30s, 5m, 1h", positive=True
)


def tree() -> Parser:
    """The parser of ``statemachine``'s whole command line."""
    top = Parser(
        prog=PROG,
        description="Read and steer saved runs, measure them, draw agents, run workers.",
        epilog=f"{PROG} COMMAND --help tells more.",
    )
    commands = top.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=Parser
    )
    store, output = store_options(), json_option()
    _runs(commands, [store, output])
    stats = commands.add_parser(
        "stats",
        parents=[store, output],
        help="time in each phase, retry and fallback rates",
        description="Time spent in each phase, and the retry and fallback rates.",
    )
    stats.add_argument("--agent", metavar="NAME", help="only runs of this agent")
    _diagram(commands)
    _worker(commands, [store])
    _inbox(commands, [store])
    commands.add_parser(
        "init",
        parents=[store],
        help="make a new, empty runs store (SQLite file or PostgreSQL tables)",
        description=(
            "Make a new, empty runs store where --db or --dsn says: a SQLite file that does "
            "not exist yet (or is empty), or the tables in a PostgreSQL database's current "
            "schema. No other command makes one. A store there already is left as it is; "
            "another application's database is refused."
        ),
    )
    return top


class _Actions:
    """The actions of ``runs``, each with the store and ``--json`` options."""

    def __init__(self, runs: Parser, parents: list[Parser]) -> None:
        self._sub = runs.add_subparsers(
            dest="action", metavar="ACTION", required=True, parser_class=Parser
        )
        self._parents = parents

    def add(self, name: str, help_: str, *, run_id: bool = True) -> Parser:
        """The parser of ``runs NAME``, taking a run's ID unless ``run_id`` is false."""
        described = f"{help_[0].upper()}{help_[1:]}."
        action = self._sub.add_parser(
            name, parents=self._parents, help=help_, description=described
        )
        if run_id:
            action.add_argument("run_id", metavar="ID")
        return action


def _runs(commands: argparse._SubParsersAction[Parser], parents: list[Parser]) -> None:
    runs = commands.add_parser(
        "runs",
        help="list, show, approve, deny, resume, stop, abort, purge runs",
        description="List, inspect and steer saved runs.",
    )
    actions = _Actions(runs, parents)
    listing = actions.add("list", "list runs, oldest update first", run_id=False)
    listing.add_argument(
        "--status",
        action="append",
        choices=[status.value for status in RunStatus],
        help="only runs in this status (repeat for several)",
    )
    listing.add_argument("--agent", metavar="NAME", help="only runs of this agent")
    listing.add_argument(
        "--waiting",
        action="store_true",
        help="only runs waiting for a person to approve or deny a call",
    )
    actions.add("show", "a run's timeline, spend, verdicts and pending approval")
    actions.add("verify", "check every checkpoint of a run against its chain's head (an audit)")
    approve = actions.add("approve", "approve the call a run waits on (a worker or resume goes on)")
    approve.add_argument("--by", required=True, metavar="NAME", help="who approves")
    deny = actions.add("deny", "deny the call a run waits on; the model is told the reason")
    deny.add_argument("--by", required=True, metavar="NAME", help="who denies")
    deny.add_argument("--reason", required=True, help="why, in words the model can use")
    _steering(actions)


def _steering(actions: _Actions) -> None:
    """``runs resume``, ``stop``, ``abort`` and ``purge``."""
    resume = actions.add(
        "resume", "go on with a run: here with --agent, else by the next free worker"
    )
    resume.add_argument(
        "--agent",
        metavar="MODULE[:FUNCTION]",
        help=(
            f"run it here, with the runner the module's {FACTORY}(checkpointer) builds "
            "(the worker command's factory); without it the run is left to the workers"
        ),
    )
    resume.add_argument("--note", default="", help="who lets a paused run go on, and why")
    actions.add("stop", "stop a run (a worker driving it: at its next checkpoint)")
    actions.add("abort", "end a run for good; nothing is undone, the record stays")
    purge = actions.add(
        "purge", "remove completed and aborted runs older than a window", run_id=False
    )
    purge.add_argument(
        "--older-than", required=True, type=_AGE, metavar="AGE", help="e.g. 30d, 12h, 90m, 2w"
    )


def _diagram(commands: argparse._SubParsersAction[Parser]) -> None:
    diagram = commands.add_parser(
        "diagram",
        help="print an agent's graph as Mermaid; --check the README",
        description=(
            "Print an agent's graph, read from its phases' advance annotations, as Mermaid. "
            "TARGET is a module (its Agent values, else the phase classes it exports) or "
            "MODULE:ATTRIBUTE (an Agent, a Phases, or a function that takes no arguments)."
        ),
    )
    diagram.add_argument("target", nargs="?", metavar="TARGET")
    files = diagram.add_mutually_exclusive_group()
    files.add_argument(
        "--check",
        nargs="?",
        const="README.md",
        metavar="FILE",
        help="exit 1 when a diagram block of FILE (default README.md) does not match the code",
    )
    files.add_argument(
        "--write",
        nargs="?",
        const="README.md",
        metavar="FILE",
        help="regenerate the diagram blocks of FILE (default README.md)",
    )


def _worker(commands: argparse._SubParsersAction[Parser], parents: list[Parser]) -> None:
    worker = commands.add_parser(
        "worker",
        parents=parents,
        help="process runs from a shared store until stopped",
        description=(
            "Process runs from a shared store until stopped (SIGTERM or SIGINT: the phase "
            "under way is finished and its run given back)."
        ),
    )
    worker.add_argument(
        "--agent",
        action="append",
        required=True,
        metavar="MODULE[:FUNCTION]",
        help=f"module whose {FACTORY}(checkpointer) builds a Runner (repeat for more agents)",
    )
    # No defaults here: the Worker's own apply (the help repeats them).
    worker.add_argument(
        "--lease", type=_SPAN, metavar="DURATION", help="how long a run stays held (default 30s)"
    )
    worker.add_argument(
        "--poll", type=_SPAN, metavar="DURATION", help="the wait when idle (default 200ms)"
    )
    worker.add_argument("--max-runs", type=count, metavar="N", help="stop after N runs")
    worker.add_argument(
        "--max-failures",
        type=count,
        metavar="N",
        help="hold a run for a person after it failed N times in a row (default 5)",
    )
    worker.add_argument(
        "--exit-when-idle",
        action="store_true",
        help="stop when no run is left to take (held runs, and failed ones waiting to be "
        "retried, are not)",
    )
    worker.add_argument(
        "--create",
        action="store_true",
        help="make the store if there is none yet (as init does); else a missing one is refused",
    )
    worker.add_argument("--owner", help="this worker's name in the lease history (host:pid)")


def _inbox(commands: argparse._SubParsersAction[Parser], parents: list[Parser]) -> None:
    inbox = commands.add_parser(
        "inbox",
        parents=parents,
        help="serve the approvals inbox: a web page where operators decide",
        description=(
            "Serve the approvals inbox (the inbox extra): the runs that need a person, each "
            "run's page, and approve, deny, resume, stop, abort and settle, for the operators "
            "of the configuration file. It binds to loopback unless the file or --host says "
            "otherwise."
        ),
    )
    inbox.add_argument("--config", metavar="PATH", help="the inbox's TOML configuration file")
    inbox.add_argument("--host", help="the address to bind (default: the file's, else 127.0.0.1)")
    inbox.add_argument("--port", type=count, help="the port (default: the file's, else 8765)")
    inbox.add_argument(
        "--agent",
        action="append",
        metavar="MODULE[:FUNCTION]",
        help=f"a module whose {FACTORY}(checkpointer) builds a runner: its agent's graph and "
        "budgets are shown on its runs' pages (repeat for more agents)",
    )
    secrets = inbox.add_mutually_exclusive_group()
    secrets.add_argument(
        "--hash-password",
        action="store_true",
        help="read a password and print its argon2 hash for the configuration file",
    )
    secrets.add_argument(
        "--new-token",
        action="store_true",
        help="print a fresh token and the token_hash line for the configuration file",
    )
