"""The git agent (agents.git) on mcp-server-git: reads run freely, changes wait for a person."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mcp_support import git

from agents.git import (
    CAUTION,
    classification,
    commit_reviewed,
    less_caution_refused,
    reset_and_branch_denied,
    resumed_commit,
    scratch_repository,
)
from statemachine import Done

pytestmark = pytest.mark.anyio


def test_reads_run_freely_and_every_change_waits_for_a_person(tmp_path: Path) -> None:
    """Status, log, diffs, show and branch listing are reads; commits, resets and branch
    changes are writes, and the reset is made a plain write by the agent's override."""
    effects = {
        name: effect for name, _, effect in classification(scratch_repository(tmp_path / "r"))
    }
    assert {name for name, effect in effects.items() if effect == "read"} == {
        "git_status",
        "git_log",
        "git_diff",
        "git_diff_staged",
        "git_diff_unstaged",
        "git_show",
        "git_branch",
    }
    assert (
        effects["git_commit"] == effects["git_checkout"] == effects["git_create_branch"] == "write"
    )
    assert effects["git_reset"] == "write"
    assert CAUTION == {"git_reset": "write"}


async def test_a_reviewed_change_is_committed_after_the_persons_yes(tmp_path: Path) -> None:
    outcome = await commit_reviewed(tmp_path)
    assert isinstance(outcome.result.final, Done)
    assert outcome.asked == ["git_add", "git_commit"]
    assert outcome.commits == ["Note the plumber", "Start the notes"]


async def test_a_refused_reset_and_branch_change_leave_the_repository_as_it_was(
    tmp_path: Path,
) -> None:
    outcome = await reset_and_branch_denied(tmp_path)
    assert outcome.asked == ["git_reset", "git_create_branch"]
    assert outcome.commits == ["Start the notes"]
    assert outcome.branch == "main"
    repo = tmp_path / "denied"
    assert git(repo, "diff", "--cached", "--name-only").split() == ["notes.txt"]  # no reset
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]


async def test_a_resumed_run_commits_once_on_a_new_server(tmp_path: Path) -> None:
    outcome = await resumed_commit(tmp_path)
    assert isinstance(outcome.result.final, Done)
    assert outcome.result.history[0] == "AwaitApproval"
    assert outcome.commits == ["Note the plumber", "Start the notes"]
    assert outcome.connections == 1


async def test_less_caution_is_refused_without_the_opt_in(tmp_path: Path) -> None:
    refused = await less_caution_refused(scratch_repository(tmp_path / "r"))
    assert "dangerously_allow_less_caution=True" in refused


def test_the_demo_runs_as_a_module() -> None:
    """``python -m agents.git`` prints the classification and the three scenarios."""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "agents.git"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "git_commit         write             waits for a person" in done.stdout
    assert "3. Wait for the commit's approval" in done.stdout
    assert done.stdout.count("answer:") == 3
