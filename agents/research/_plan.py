"""Plans of searches: checked for cycles before anything runs, then run in parallel.

A :class:`Plan` is a list of searches, each with an id, a query and the ids it
depends on. Validating a plan (the model's ``run_searches`` arguments) refuses
duplicate ids, unknown dependencies and dependency cycles, so a bad plan becomes
feedback to the model and *no* search of it runs.

:func:`run_plan` runs a valid plan: a search starts once every search it depends on
has run, and searches that are ready together run in parallel in one anyio task
group. Each one first reserves its worst case (one search, and the tokens its
result may add to the conversation) from a :class:`~statemachine.BudgetMeter`, then
commits what it used; a search that cannot reserve is not run and says why. So
however the searches interleave, the meter's committed spend plus its open
reservations never pass the budget. A query that already ran (in this run, or
earlier in the same plan) is not run again.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, model_validator

from statemachine import BudgetExceededError, BudgetMeter, Reservation, dumps

from ._corpus import Hit

__all__ = [
    "MAX_HITS",
    "MAX_SEARCHES",
    "RESULT_TOKENS",
    "Plan",
    "PlanError",
    "PlannedSearch",
    "SearchBackend",
    "SearchOutcome",
    "SearchReport",
    "budget_words",
    "estimate_tokens",
    "fold",
    "plan_problems",
    "report_of",
    "run_plan",
]

MAX_SEARCHES = 12
MAX_HITS = 2
# The most one search's outcome can add to the conversation, in tokens: a 200-character
# query and MAX_HITS hits of a 60-character title and a 160-character summary, as JSON.
# A search reserves this much and commits what its outcome actually holds.
RESULT_TOKENS = 400

SearchBackend = Callable[[str], Awaitable[Sequence[Hit]]]


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` by the usual rule of thumb: four characters a token."""
    return math.ceil(len(text) / 4)


def budget_words(error: BudgetExceededError, meter: BudgetMeter, unit: str) -> str:
    """Why one more ``unit`` (a search, a fetch) did not fit, in the research budget's words.

    The meter counts searches (or fetches) as its tool calls, so its own message
    would say "tool calls"; the other limits (tokens, seconds) keep the meter's words.
    """
    if error.budget == "tool_calls":
        done, running = meter.spent.tool_calls, meter.reserved.tool_calls
        return (
            f"the {unit} budget is used up: {done} done and {running} running "
            f"of {meter.budget.tool_calls} allowed"
        )
    return error.reason


def fold(query: str) -> str:
    """A query as repeats are compared: case folded, runs of spaces made one."""
    return " ".join(query.casefold().split())


class PlanError(ValueError):
    """A plan that cannot run: duplicate ids, unknown dependencies or a cycle."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


class PlannedSearch(BaseModel):
    """One search of a plan: its id, its query, and the searches it must wait for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,20}$")
    # Case-insensitive: "Coral Bleaching" repeats "coral bleaching" (run_plan folds it;
    # the governor folds only a tool's top-level fields, so here the mark documents intent).
    query: str = Field(min_length=1, max_length=200, json_schema_extra={"case_insensitive": True})
    depends_on: tuple[str, ...] = Field(default=(), description="ids of searches to run first")


def _cycle(searches: Sequence[PlannedSearch]) -> list[str] | None:
    """One dependency cycle as a path of ids (first id repeated at the end), or ``None``."""
    needs = {s.id: s.depends_on for s in searches}
    state: dict[str, Literal["open", "done"]] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for dependency in needs[node]:
            if state.get(dependency) == "open":
                return [*path[path.index(dependency) :], dependency]
            if dependency not in state:
                found = visit(dependency)
                if found is not None:
                    return found
        path.pop()
        state[node] = "done"
        return None

    for search in searches:
        if search.id not in state:
            found = visit(search.id)
            if found is not None:
                return found
    return None


def plan_problems(searches: Sequence[PlannedSearch]) -> list[str]:
    """What stops a plan from running, in words for the model; empty when it can run."""
    problems: list[str] = []
    ids = [s.id for s in searches]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        problems.append(f"search ids must be unique; repeated: {', '.join(repeated)}")
    known = set(ids)
    for search in searches:
        unknown = [d for d in search.depends_on if d not in known]
        if unknown:
            problems.append(f"search {search.id} depends on unknown ids: {', '.join(unknown)}")
    if problems:
        return problems
    cycle = _cycle(searches)
    if cycle is not None:
        problems.append(
            f"the dependencies form a cycle: {' -> '.join(cycle)}, so no order can run them"
        )
    return problems


class Plan(BaseModel):
    """The planner's output: searches to run, with the order their dependencies impose.

    Refused whole (no search runs) when ids repeat, a dependency is unknown, or the
    dependencies form a cycle.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    searches: tuple[PlannedSearch, ...] = Field(min_length=1, max_length=MAX_SEARCHES)

    @model_validator(mode="after")
    def _runnable(self) -> Plan:
        problems = plan_problems(self.searches)
        if problems:
            raise ValueError("the plan was refused and no search of it ran: " + "; ".join(problems))
        return self


Status = Literal["ran", "repeated", "no_budget", "blocked", "failed"]


class SearchOutcome(BaseModel):
    """What became of one planned search; ``note`` says why it did not run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    query: str
    status: Status
    doc_ids: tuple[str, ...] = ()
    note: str = ""


class SearchReport(BaseModel):
    """The result of a plan: the documents found (each once, listed first), then the searches.

    Documents come first so that what matters survives when a long result is cut.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    documents: tuple[Hit, ...]
    searches: tuple[SearchOutcome, ...]

    @property
    def ran(self) -> tuple[SearchOutcome, ...]:
        """The searches that ran."""
        return tuple(s for s in self.searches if s.status == "ran")


def _satisfies(outcome: SearchOutcome) -> bool:
    """Whether a dependent may run after ``outcome``: its query's results are in the run."""
    return outcome.status in ("ran", "repeated")


async def run_plan(
    plan: Plan,
    *,
    backend: SearchBackend,
    meter: BudgetMeter,
    earlier: Mapping[str, str] | None = None,
) -> SearchReport:
    """Run ``plan``'s searches in dependency order, ready ones in parallel, within ``meter``.

    ``earlier`` maps the folded queries this run already searched to where (for the
    note); those, and a query repeated within the plan, are not run again. Raises
    :class:`PlanError` for a plan that was built without validation and cannot run.
    """
    problems = plan_problems(plan.searches)
    if problems:
        raise PlanError(problems)
    earlier = earlier or {}
    by_id = {s.id: s for s in plan.searches}
    waiting = {s.id: set(s.depends_on) for s in plan.searches}
    dependents: dict[str, list[str]] = {s.id: [] for s in plan.searches}
    first: dict[str, str] = {}  # folded query -> id of the first search asking it
    for search in plan.searches:
        for dependency in search.depends_on:
            dependents[dependency].append(search.id)
        original = first.setdefault(fold(search.query), search.id)
        if original != search.id:  # a repeat settles when its original does
            waiting[search.id].add(original)
            dependents[original].append(search.id)
    outcomes: dict[str, SearchOutcome] = {}
    hits_of: dict[str, tuple[Hit, ...]] = {}

    def settle(outcome: SearchOutcome) -> None:
        outcomes[outcome.id] = outcome
        for dependent in dependents[outcome.id]:
            waiting[dependent].discard(outcome.id)
            if not waiting[dependent] and dependent not in outcomes:
                ready(by_id[dependent])

    def ready(search: PlannedSearch) -> None:
        # Synchronous from the check to the reservation: no other search can take
        # the room in between, and searches that are ready together reserve in plan order.
        outcome = SearchOutcome(id=search.id, query=search.query, status="blocked")
        original = first[fold(search.query)]
        blocked = [d for d in search.depends_on if not _satisfies(outcomes[d])]
        if blocked:
            note = f"not run: it depends on {', '.join(blocked)}, which did not run"
            return settle(outcome.model_copy(update={"note": note}))
        if original != search.id:
            before = outcomes[original]
            if _satisfies(before):
                note = f"not run: the same query as {original}; use its results"
                return settle(outcome.model_copy(update={"status": "repeated", "note": note}))
            note = f"not run: the same query as {original}, which did not run either"
            return settle(outcome.model_copy(update={"status": before.status, "note": note}))
        where = earlier.get(fold(search.query))
        if where is not None:
            note = f"not run: this query already ran in this run ({where}); use those results"
            return settle(outcome.model_copy(update={"status": "repeated", "note": note}))
        purpose = f"search {search.id} ({search.query!r})"
        try:
            reservation = meter.reserve(tool_calls=1, tokens=RESULT_TOKENS, purpose=purpose)
        except BudgetExceededError as error:
            note = f"not run: {budget_words(error, meter, 'search')}"
            return settle(outcome.model_copy(update={"status": "no_budget", "note": note}))
        group.start_soon(go, search, reservation)
        return None

    async def go(search: PlannedSearch, reservation: Reservation) -> None:
        with reservation:  # released if the search is cancelled
            try:
                hits = tuple(await backend(search.query))[:MAX_HITS]
            except Exception as error:  # a failed search is reported, not fatal
                reservation.release()  # before its dependents try to reserve
                note = f"failed: {type(error).__name__}: {error}"
                outcome = SearchOutcome(
                    id=search.id, query=search.query, status="failed", note=note
                )
            else:
                outcome = SearchOutcome(
                    id=search.id,
                    query=search.query,
                    status="ran",
                    doc_ids=tuple(hit.doc_id for hit in hits),
                )
                # At most RESULT_TOKENS: Hit and PlannedSearch bound every field's length.
                used = estimate_tokens(dumps(outcome) + "".join(dumps(hit) for hit in hits))
                reservation.commit(tool_calls=1, tokens=used)
                hits_of[search.id] = hits
        settle(outcome)

    async with anyio.create_task_group() as group:
        for search in plan.searches:
            if not waiting[search.id]:
                ready(search)
    # In plan order, whatever order the searches finished in.
    documents: dict[str, Hit] = {}
    for search in plan.searches:
        for hit in hits_of.get(search.id, ()):
            documents.setdefault(hit.doc_id, hit)
    return SearchReport(
        documents=tuple(documents.values()),
        searches=tuple(outcomes[s.id] for s in plan.searches),
    )


def report_of(content: str) -> SearchReport | None:
    """The :class:`SearchReport` a tool message holds, or ``None`` (a refusal, a note)."""
    try:
        return SearchReport.model_validate_json(content)
    except ValueError:
        return None
