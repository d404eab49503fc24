"""The research agent: a brief, a rubric and a budget, frozen into a hashed contract.

The planner's plan of searches is checked for cycles before anything runs; searches
that do not depend on each other run in parallel, each reserving its share of the
budget first; repeated queries are suppressed; the run stops once the documents
found cover the rubric or stop adding anything, and answers citing its sources.
``python -m agents.research`` runs the scenarios offline over the shipped corpus.
"""

from ._agent import (
    MAX_STEPS,
    FetchArgs,
    FetchReport,
    ResearchContext,
    ResearchPlanning,
    RunSoFar,
    SearchArgs,
    missing_points,
    research_agent,
    returned_documents,
    rubric_covered,
)
from ._contract import ApprovedContract, Contract, ResearchBudget
from ._corpus import CORPUS, Corpus, Document, Hit, terms
from ._door import DoorCall, Role, StructuredDoor, WriterOutput, answer_of, role_of
from ._plan import (
    RESULT_TOKENS,
    Plan,
    PlanError,
    PlannedSearch,
    SearchBackend,
    SearchOutcome,
    SearchReport,
    plan_problems,
    run_plan,
)
from ._scenarios import (
    Outcome,
    RecordingBackend,
    approved_contract,
    cyclic_plan,
    plateau,
    repeated_queries,
    rubric_coverage,
    tight_search_budget,
)

__all__ = (
    "CORPUS",
    "MAX_STEPS",
    "RESULT_TOKENS",
    "ApprovedContract",
    "Contract",
    "Corpus",
    "Document",
    "DoorCall",
    "FetchArgs",
    "FetchReport",
    "Hit",
    "Outcome",
    "Plan",
    "PlanError",
    "PlannedSearch",
    "RecordingBackend",
    "ResearchBudget",
    "ResearchContext",
    "ResearchPlanning",
    "Role",
    "RunSoFar",
    "SearchArgs",
    "SearchBackend",
    "SearchOutcome",
    "SearchReport",
    "StructuredDoor",
    "WriterOutput",
    "answer_of",
    "approved_contract",
    "cyclic_plan",
    "missing_points",
    "plan_problems",
    "plateau",
    "repeated_queries",
    "research_agent",
    "returned_documents",
    "role_of",
    "rubric_covered",
    "rubric_coverage",
    "run_plan",
    "terms",
    "tight_search_budget",
)
