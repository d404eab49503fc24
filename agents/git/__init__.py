"""The git agent: mcp-server-git's tools, read or write by the server's own annotations.

``python -m agents.git`` runs offline on scratch repositories it makes in a temporary
folder: it prints how each of the server's tools is classified, then three scenarios
(a reviewed change committed with a person's approval; a reset and a branch change the
person refuses; a run that waits for the commit's approval, stops, and is resumed from
its SQLite checkpoint on a newly started server, committing once), and what an override
towards less caution is told without the loud opt-in.
"""

from ._agent import CAUTION, GitContext, GitPlanning, git_agent, git_server
from ._scenarios import (
    Outcome,
    Person,
    classification,
    commit_reviewed,
    less_caution_refused,
    reset_and_branch_denied,
    resumed_commit,
    scratch_repository,
)

__all__ = [
    "CAUTION",
    "GitContext",
    "GitPlanning",
    "Outcome",
    "Person",
    "classification",
    "commit_reviewed",
    "git_agent",
    "git_server",
    "less_caution_refused",
    "reset_and_branch_denied",
    "resumed_commit",
    "scratch_repository",
]
