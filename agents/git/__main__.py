"""Demo: ``python -m agents.git`` runs the git agent on mcp-server-git, offline.

It makes scratch repositories in a temporary folder (removed at the end), starts
mcp-server-git on each over stdio, and runs the agent with a scripted model and a
scripted person. ``--trace`` prints every span (each MCP call is a span naming the
server and the tool, under its transition), ``--log`` one line per transition.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import anyio

from statemachine import Done, Failed

from .._demo import add_output_flags, apply_output_flags
from ._scenarios import (
    Outcome,
    classification,
    commit_reviewed,
    less_caution_refused,
    reset_and_branch_denied,
    resumed_commit,
    scratch_repository,
)


def _show(number: int, outcome: Outcome) -> None:
    result = outcome.result
    print(f"\n{number}. {outcome.title}")
    print(f"   states:    {result.trace()}")
    tools = [m.name for m in result.final.transcript if m.role == "tool"]
    print(f"   tools:     {', '.join(tools)}")
    print(f"   asked:     {', '.join(outcome.asked) or 'nobody'}")
    print(f"   commits:   {' <- '.join(outcome.commits)}  (branch {outcome.branch})")
    match result.final:
        case Done(answer=answer):
            print(f"   answer:    {answer}")
        case Failed(reason=reason):
            print(f"   failed:    {reason}")


def _show_classification(repo: Path) -> None:
    print("mcp-server-git's tools, by its own annotations (-> as this agent uses them):")
    for name, declared, effect in classification(repo):
        note = "" if effect == declared else f" -> {effect} (override: more caution)"
        approval = "runs freely" if effect == "read" else "waits for a person"
        print(f"   {name:<18} {declared:<17} {approval}{note}")


async def _scenarios(workdir: Path) -> None:
    _show(1, await commit_reviewed(workdir))
    _show(2, await reset_and_branch_denied(workdir))
    _show(3, await resumed_commit(workdir))
    refused = await less_caution_refused(workdir / "review")
    print("\nAn override that makes git_commit a read, without the opt-in:")
    print(f"   refused:   {refused}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m agents.git", description=__doc__)
    add_output_flags(parser)
    args = parser.parse_args()
    apply_output_flags(args)
    with tempfile.TemporaryDirectory(prefix="git-agent-") as folder:
        workdir = Path(folder)
        _show_classification(scratch_repository(workdir / "look"))
        anyio.run(_scenarios, workdir)


if __name__ == "__main__":
    main()
