"""The research agent: plans searches, runs them in parallel under reserved budgets, answers.

Tools (all read-only):

- ``run_searches(plan)``: the planner's output, a :class:`~._plan.Plan`; checked for
  duplicate ids, unknown dependencies and cycles before anything runs, then run by
  :func:`~._plan.run_plan`;
- ``search(query)``: one more search, the searcher's follow-up;
- ``fetch(doc_id)``: one document whole.

**Where the budget's memory lives.** Searches and fetches are counted by a
``BudgetMeter`` that each tool call builds from the *run's state*, not from memory
kept beside it: each tool takes its run's ``RunContext`` and reads (:meth:`RunSoFar.of`)
the conversation so far (the searches that ran, the fetches made, the queries already
asked), the run's ``Spend`` (model tokens) and the time it has used. So two
``run_searches`` calls of one run share one budget, and a run restored from a
checkpoint goes on with the counts it had: there is nothing else to restore.

**Stopping.** The governor's ``completion`` signal (:func:`rubric_covered`) finalizes
once the documents seen cover every rubric point; its plateau check (two results in
a row that add almost nothing) finalizes a run that keeps finding the same thing;
the step cap (6 model calls, the last of which answers) bounds everything else.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from statemachine import (
    Agent,
    BudgetExceededError,
    BudgetMeter,
    Check,
    Decision,
    LoopGovernor,
    LoopState,
    Message,
    Phases,
    Planning,
    RunContext,
    Spend,
    Transcript,
    Verdict,
    dumps,
    read_tool,
)

from ._contract import ApprovedContract, ResearchBudget
from ._corpus import CORPUS, Corpus, terms
from ._plan import (
    Plan,
    PlannedSearch,
    SearchBackend,
    SearchReport,
    budget_words,
    estimate_tokens,
    fold,
    report_of,
    run_plan,
)

__all__ = [
    "MAX_STEPS",
    "SEARCH_TOOLS",
    "FetchArgs",
    "FetchReport",
    "ResearchContext",
    "ResearchPlanning",
    "RunSoFar",
    "SearchArgs",
    "missing_points",
    "research_agent",
    "returned_documents",
    "rubric_covered",
]

MAX_STEPS = 6  # the research agent's step cap: six model calls, the last one answers
SEARCH_TOOLS = ("run_searches", "search")


@attrs.frozen
class ResearchContext:
    """The research agent's context type: the approved contract the run works under."""

    contract: ApprovedContract


class SearchArgs(BaseModel):
    """Arguments of search: one query."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Case-insensitive: the governor suppresses "Coral Bleaching" after "coral bleaching".
    query: str = Field(min_length=1, max_length=200, json_schema_extra={"case_insensitive": True})


class FetchArgs(BaseModel):
    """Arguments of fetch: the id of a document a search returned."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    doc_id: str = Field(min_length=1, max_length=20)


class FetchReport(BaseModel):
    """The result of fetch: the whole document, or why it was not fetched."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    doc_id: str
    status: Literal["ok", "no_budget", "unknown"]
    title: str = ""
    text: str = ""
    note: str = ""


def returned_documents(messages: Transcript) -> frozenset[str]:
    """The ids of the documents the run's tools returned: search hits and fetched documents."""
    found: set[str] = set()
    for message in messages:
        if message.role != "tool":
            continue
        if message.name in SEARCH_TOOLS:
            report = report_of(message.content)
            if report is not None:
                found.update(hit.doc_id for hit in report.documents)
        elif message.name == "fetch":
            fetched = _fetch_report(message.content)
            if fetched is not None and fetched.status == "ok":
                found.add(fetched.doc_id)
    return frozenset(found)


def _fetch_report(content: str) -> FetchReport | None:
    try:
        return FetchReport.model_validate_json(content)
    except ValidationError:
        return None  # a refusal or a suppression note, not a fetch result


@attrs.frozen(kw_only=True)
class RunSoFar:
    """What a run has used, read from its state: what the tools' meters start from."""

    searches: int = 0
    fetches: int = 0
    tokens: int = 0
    # folded query -> where it ran ("call-3/s1"), so a repeat is not run again
    queries: Mapping[str, str] = attrs.field(factory=lambda: MappingProxyType({}))
    clock: Callable[[], float] = time.monotonic
    started: float | None = None

    @classmethod
    def of(cls, ctx: RunContext) -> RunSoFar:
        """What the run of a tool call has used: the searches that ran and the fetches
        made (from the tool results so far), its model tokens, and its time."""
        return cls.counted(ctx.messages, ctx.spent, elapsed=ctx.elapsed)

    @classmethod
    def counted(
        cls,
        messages: Iterable[Message],
        spent: Spend,
        *,
        elapsed: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> RunSoFar:
        """Count the searches that ran and the fetches made, from the tool results in
        ``messages``; ``elapsed`` seconds used so far, on ``clock``."""
        searches = fetches = 0
        queries: dict[str, str] = {}
        for message in messages:
            if message.role != "tool":
                continue
            if message.name in SEARCH_TOOLS:
                report = report_of(message.content)
                for outcome in report.ran if report is not None else ():
                    searches += 1
                    queries.setdefault(fold(outcome.query), f"{message.tool_call_id}/{outcome.id}")
            elif message.name == "fetch":
                fetched = _fetch_report(message.content)
                if fetched is not None and fetched.status == "ok":
                    fetches += 1
        return cls(
            searches=searches,
            fetches=fetches,
            tokens=spent.tokens,
            queries=MappingProxyType(queries),
            clock=clock,
            started=clock() - elapsed,
        )

    def meter(self, budget: ResearchBudget, unit: Literal["search", "fetch"]) -> BudgetMeter:
        """A meter of searches (or fetches) as tool calls, tokens and seconds, from here on."""
        limit = budget.searches if unit == "search" else budget.fetches
        used = self.searches if unit == "search" else self.fetches
        return BudgetMeter(
            budget.for_agent().model_copy(update={"tool_calls": limit}),
            Spend(tokens=self.tokens, tool_calls=used),
            clock=self.clock,
            started=self.started,
        )


_ROLE_TEXT = {
    "planner": (
        "You are the planner. Call run_searches once with a plan: searches with an id, "
        "a query and depends_on (the ids that must run first). Searches that do not "
        "depend on each other run in parallel. A plan whose dependencies form a cycle is "
        "refused whole."
    ),
    "searcher": (
        "You are the searcher. Read the results above. Call fetch(doc_id) to read a "
        "document whole, or search(query) for what is still missing; a query that "
        "already ran is not run again. When the rubric is covered, answer as the writer."
    ),
}
_WRITER_TEXT = (
    'As the writer, answer with JSON only: {"answer": "...", "sources": ["d01", ...]}, '
    "citing only documents that search or fetch returned to you."
)


class ResearchPlanning(Planning[ResearchContext]):
    """Planning for research: the instructions carry the contract and the role of the step.

    The role is the planner until a search result is in the conversation, then the
    searcher; every step's instructions also say how the writer answers, because the
    model may answer at any step and must answer at the last.
    """

    def role(self) -> Literal["planner", "searcher"]:
        """Who the model is at this step."""
        searched = any(
            m.role == "tool" and m.name in SEARCH_TOOLS and report_of(m.content) is not None
            for m in self.transcript
        )  # a refused plan is still the planner's to send again
        return "searcher" if searched else "planner"

    def instructions(self) -> str:
        """The contract (brief, rubric, budget, hash), the step's role, and the writer's form."""
        approved = self.ctx.contract
        contract = approved.contract
        budget = contract.budget
        rubric = "\n".join(f"{n}. {point}" for n, point in enumerate(contract.rubric, 1))
        return (
            f"You research a brief under a contract approved by {approved.approved_by} "
            f"(sha256 {approved.contract_hash[:12]}).\n"
            f"Brief: {contract.brief}\n"
            f"The answer must cover:\n{rubric}\n"
            f"Budget: {budget.searches} searches, {budget.fetches} fetches, "
            f"{budget.tokens} tokens, {budget.seconds:g} seconds.\n"
            f"{_ROLE_TEXT[self.role()]}\n{_WRITER_TEXT}"
        )


# Only what documents say counts as evidence: titles, summaries and fetched text,
# never the queries or the notes the tools add (a query names what it looks for).
_DOCUMENT_TEXT = re.compile(r'"(?:title|summary|text)":"((?:[^"\\]|\\.)*)"')


def missing_points(loop: LoopState, rubric: tuple[str, ...]) -> tuple[str, ...]:
    """The rubric points the documents seen so far do not cover.

    A point is covered when every term of it (stemmed, stopwords aside) appears in
    the titles, summaries or fetched text that the run's results showed the model.
    """
    shown = " ".join(text for result in loop.evidence for text in _DOCUMENT_TEXT.findall(result))
    seen = terms(shown)
    return tuple(point for point in rubric if not terms(point) <= seen)


def rubric_covered(loop: LoopState, ctx: Any) -> str | None:
    """The completion signal: a reason once the documents seen cover every rubric point."""
    rubric: tuple[str, ...] = ctx.contract.contract.rubric
    if missing_points(loop, rubric):
        return None
    points = "1 point" if len(rubric) == 1 else f"{len(rubric)} points"
    return f"every rubric point is covered by the documents found ({points})"


def _same_contract(approved: ApprovedContract) -> Check:
    def check(loop: LoopState, ctx: Any) -> Decision:
        held: ApprovedContract = ctx.contract
        if held.contract_hash != approved.contract_hash:
            reason = (
                f"contract: the run holds contract {held.contract_hash[:12]} but the agent "
                f"was built for {approved.contract_hash[:12]}; build the agent from the "
                "approved contract the run holds"
            )
            return Decision(Verdict.ABORT, reason, check="contract")
        return Decision(Verdict.CONTINUE)

    return check


def _fetched(corpus: Corpus, doc_id: str, meter: BudgetMeter) -> FetchReport:
    """Document ``doc_id`` of ``corpus`` whole, if ``meter`` has room for one more fetch."""
    document = corpus.fetch(doc_id)
    if document is None:
        return FetchReport(
            doc_id=doc_id,
            status="unknown",
            note=f"there is no document {doc_id}; fetch an id a search returned",
        )
    report = FetchReport(
        doc_id=document.doc_id, status="ok", title=document.title, text=document.text
    )
    tokens = estimate_tokens(dumps(report))
    try:
        reservation = meter.reserve(tool_calls=1, tokens=tokens, purpose=f"fetch {doc_id}")
    except BudgetExceededError as error:
        note = f"not fetched: {budget_words(error, meter, 'fetch')}"
        return FetchReport(doc_id=doc_id, status="no_budget", note=note)
    with reservation:
        reservation.commit(tool_calls=1, tokens=tokens)
    return report


def research_agent(
    approved: ApprovedContract,
    *,
    corpus: Corpus = CORPUS,
    backend: SearchBackend | None = None,
) -> Agent[ResearchContext]:
    """The research agent for one approved contract, searching ``corpus`` (or ``backend``).

    The contract's token and time budget is the agent's ``Budget`` (every model call's
    tokens are charged to it); its searches and fetches are metered by the tools.
    """
    budget = approved.contract.budget
    searcher = backend or corpus.search

    @read_tool(timeout=30.0)
    async def run_searches(args: Plan, ctx: RunContext) -> SearchReport:
        """Run a plan of searches; searches that do not depend on each other run in parallel.

        Each search reserves its share of the budget before it runs; one that does not
        fit is reported "no_budget", and a query that already ran is not run again.
        """
        so_far = RunSoFar.of(ctx)
        meter = so_far.meter(budget, "search")
        return await run_plan(args, backend=searcher, meter=meter, earlier=so_far.queries)

    @read_tool(timeout=30.0)
    async def search(args: SearchArgs, ctx: RunContext) -> SearchReport:
        """Run one search over the corpus: the documents sharing the most terms with the query."""
        plan = Plan(searches=(PlannedSearch(id="search", query=args.query),))
        so_far = RunSoFar.of(ctx)
        meter = so_far.meter(budget, "search")
        return await run_plan(plan, backend=searcher, meter=meter, earlier=so_far.queries)

    @read_tool
    async def fetch(args: FetchArgs, ctx: RunContext) -> FetchReport:
        """Read one document whole, by the doc_id a search returned."""
        return _fetched(corpus, args.doc_id, RunSoFar.of(ctx).meter(budget, "fetch"))

    return Agent(
        name="research",
        tools=[run_searches, search, fetch],
        budget=budget.for_agent(),
        max_steps=MAX_STEPS,
        governor=LoopGovernor(
            completion=rubric_covered,
            checks=(_same_contract(approved),),
            # Six steps: two results in a row that add nothing is already a third of the run.
            plateau_steps=2,
        ),
        phases=Phases(planning=ResearchPlanning),
    )
