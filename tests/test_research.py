"""The research agent: hashed contract, cycle-checked plans, parallel searches within budget."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agents.research import (
    CORPUS,
    MAX_STEPS,
    RESULT_TOKENS,
    ApprovedContract,
    Contract,
    Hit,
    Outcome,
    Plan,
    PlanError,
    PlannedSearch,
    RecordingBackend,
    ResearchBudget,
    ResearchContext,
    SearchReport,
    StructuredDoor,
    WriterOutput,
    approved_contract,
    cyclic_plan,
    plateau,
    repeated_queries,
    research_agent,
    returned_documents,
    rubric_coverage,
    run_plan,
    tight_search_budget,
)
from statemachine import (
    Budget,
    BudgetMeter,
    Done,
    Failed,
    Message,
    ModelReply,
    Phase,
    Runner,
    RunResult,
    Spend,
    dump_phase,
    load_phase,
)
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

ResearchRun = RunResult[ResearchContext]


@pytest.fixture(autouse=True, scope="module", params=["lexical", "embedding"])
def similarity(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test runs with each of the governor's semantic-tier similarities (chosen by
    ``STATEMACHINE_SIMILARITY``): the agent behaves the same with either (issue 22)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STATEMACHINE_SIMILARITY", request.param)
        yield request.param


def scenario(run: Callable[[], Awaitable[Outcome]]) -> Outcome:
    return anyio.run(run)


def tool_messages(result: ResearchRun, name: str) -> list[Message]:
    return [m for m in result.final.transcript if m.role == "tool" and m.name == name]


def reports(result: ResearchRun) -> list[SearchReport]:
    found = []
    for message in result.final.transcript:
        if message.role == "tool" and message.name in ("run_searches", "search"):
            with contextlib.suppress(ValidationError):  # a suppression note, not a report
                found.append(SearchReport.model_validate_json(message.content))
    return found


def statuses(report: SearchReport) -> dict[str, str]:
    return {search.id: search.status for search in report.searches}


def plan(*searches: tuple[str, str] | tuple[str, str, tuple[str, ...]]) -> dict[str, Any]:
    return {
        "searches": [
            {"id": s[0], "query": s[1], "depends_on": list(s[2]) if len(s) == 3 else []}
            for s in searches
        ]
    }


def say(text: str, *sources: str, tokens: int = 100) -> ModelReply:
    return reply(WriterOutput(answer=text, sources=sources).model_dump_json(), tokens=tokens)


async def run_agent(
    approved: ApprovedContract,
    turns: list[ModelReply],
    backend: RecordingBackend | None = None,
    ctx: ResearchContext | None = None,
) -> tuple[ResearchRun, StructuredDoor, RecordingBackend]:
    backend = backend or RecordingBackend()
    agent = research_agent(approved, backend=backend)
    door = StructuredDoor(ScriptedModel(turns), tools=agent.tools)
    result = await Runner(agent, model=door, gate=AutoDenyGate(), keep_states=True).run(
        ctx or ResearchContext(approved), approved.contract.brief
    )
    return result, door, backend


# -- the contract ------------------------------------------------------------------------

BASE = Contract(
    brief="What causes coral bleaching?",
    rubric=("causes of coral bleaching", "recovery time"),
    budget=ResearchBudget(searches=4, fetches=2, tokens=10_000, seconds=30.0),
)
CHANGES: list[dict[str, Any]] = [
    {"brief": "What causes coral bleaching? "},
    {"brief": "what causes coral bleaching?"},
    {"rubric": ("causes of coral bleaching",)},
    {"rubric": ("recovery time", "causes of coral bleaching")},
    {"rubric": ("causes of coral bleaching", "recovery time", "local actions")},
    {"budget": BASE.budget.model_copy(update={"searches": 5})},
    {"budget": BASE.budget.model_copy(update={"fetches": 1})},
    {"budget": BASE.budget.model_copy(update={"tokens": 10_001})},
    {"budget": BASE.budget.model_copy(update={"seconds": 30.5})},
]


@pytest.mark.parametrize("change", CHANGES, ids=lambda change: next(iter(change)))
def test_a_changed_contract_gets_a_different_hash(change: dict[str, Any]) -> None:
    """Changing any field of the contract (brief, rubric, any budget) changes its hash."""
    changed = BASE.model_copy(update=change)
    assert changed != BASE
    assert changed.hash() != BASE.hash()


def test_the_same_contract_gets_the_same_hash() -> None:
    """Equal contracts hash alike, however they were spelled (30 and 30.0 seconds)."""
    again = Contract.model_validate_json(
        '{"budget": {"seconds": 30, "tokens": 10000, "fetches": 2, "searches": 4},'
        ' "rubric": ["causes of coral bleaching", "recovery time"],'
        ' "brief": "What causes coral bleaching?"}'
    )
    assert again.hash() == BASE.hash()
    assert len(BASE.hash()) == 64


budgets = st.builds(
    ResearchBudget,
    searches=st.integers(0, 20),
    fetches=st.integers(0, 5),
    tokens=st.integers(1, 50_000),
    seconds=st.sampled_from([1.0, 30.0, 30.5, 60.0]),
)
contracts = st.builds(
    Contract,
    brief=st.sampled_from(["reefs", "Reefs", "reefs?", "coral"]),
    rubric=st.lists(st.sampled_from(["causes", "recovery", "actions"]), min_size=1, max_size=3).map(
        tuple
    ),
    budget=budgets,
)


@settings(max_examples=200, deadline=None)
@given(contracts, contracts)
def test_hashes_are_equal_exactly_when_contracts_are(first: Contract, second: Contract) -> None:
    """Two contracts have one hash if and only if they are equal."""
    assert (first.hash() == second.hash()) == (first == second)


def test_approval_records_the_hash_and_refuses_a_changed_contract() -> None:
    """An approved contract records its hash and approver; one whose contract changed is refused."""
    approved = BASE.approve(by="client@example.com")
    assert approved.contract_hash == BASE.hash()
    assert approved.approved_by == "client@example.com"
    changed = BASE.model_copy(update={"brief": "Something else"})
    with pytest.raises(ValidationError, match="the contract changed after approval"):
        ApprovedContract(
            contract=changed,
            contract_hash=approved.contract_hash,
            approved_by="client@example.com",
            approved_at=approved.approved_at,
        )


def test_a_run_under_another_contract_is_aborted_before_any_model_call() -> None:
    """An agent built for one contract refuses a run that holds another."""
    approved = approved_contract()
    other = approved_contract(searches=5)
    result, door, backend = anyio.run(
        run_agent, approved, [say("never", "d01")], None, ResearchContext(other)
    )
    assert result.history == ("Idle", "Planning", "Failed")
    assert isinstance(result.final, Failed)
    assert result.final.reason.startswith(
        f"contract: the run holds contract {other.contract_hash[:12]}"
    )
    assert door.calls == []
    assert backend.queries == []


# -- plans -------------------------------------------------------------------------------


def test_a_plan_with_a_cycle_is_refused_before_any_search_runs() -> None:
    """A cyclic plan is refused whole: no search runs, and the model is told the cycle."""
    outcome = scenario(cyclic_plan)
    result = outcome.result
    assert result.history == (
        "Idle",
        "Planning",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    refused = tool_messages(result, "run_searches")[0]
    assert "the dependencies form a cycle: s1 -> s2 -> s1" in refused.content
    assert "no search of it ran" in refused.content
    # Only the second, acyclic plan searched; s2 ran after s1.
    assert outcome.backend.queries == ["coral bleaching causes", "marine heatwaves"]
    assert [(c.role, c.ok) for c in outcome.door.calls] == [
        ("planner", False),
        ("planner", True),
        ("writer", True),
    ]


@pytest.mark.parametrize(
    ("searches", "problem"),
    [
        ((("a", "x", ("a",)),), "the dependencies form a cycle: a -> a"),
        (
            (("a", "x", ("c",)), ("b", "y", ("a",)), ("c", "z", ("b",))),
            "the dependencies form a cycle: a -> c -> b -> a",
        ),
        ((("a", "x", ("nope",)),), "search a depends on unknown ids: nope"),
        ((("a", "x"), ("a", "y")), "search ids must be unique; repeated: a"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_with_the_reason(
    searches: tuple[tuple[str, str] | tuple[str, str, tuple[str, ...]], ...], problem: str
) -> None:
    """Cycles (a self-dependency too), unknown dependencies and repeated ids are refused."""
    with pytest.raises(ValidationError, match="no search of it ran") as raised:
        Plan.model_validate(plan(*searches))
    assert problem in str(raised.value)


def test_run_plan_refuses_an_unvalidated_cyclic_plan_without_searching() -> None:
    """A plan built without validation is checked again before any search runs."""
    cyclic = Plan.model_construct(
        searches=(
            PlannedSearch(id="a", query="x", depends_on=("b",)),
            PlannedSearch(id="b", query="y", depends_on=("a",)),
        )
    )
    backend = RecordingBackend()
    meter = BudgetMeter(Budget(tool_calls=5))
    with pytest.raises(PlanError, match="cycle: a -> b -> a"):
        anyio.run(lambda: run_plan(cyclic, backend=backend, meter=meter))
    assert backend.queries == []
    assert meter.spent == Spend()


def test_a_search_runs_only_after_the_searches_it_depends_on() -> None:
    """Dependencies order the searches; a search whose dependency did not run is blocked."""
    order: list[str] = []

    async def backend(query: str) -> tuple[Hit, ...]:
        for _ in range(5 if query == "slow" else 1):
            await anyio.lowlevel.checkpoint()
        order.append(query)
        return CORPUS.rank(query)

    chain = Plan.model_validate(
        plan(("a", "slow"), ("b", "fast"), ("c", "after a", ("a",)), ("d", "after c", ("c",)))
    )
    meter = BudgetMeter(Budget(tool_calls=3))
    report = anyio.run(lambda: run_plan(chain, backend=backend, meter=meter))
    assert order == ["fast", "slow", "after a"]
    assert statuses(report) == {"a": "ran", "b": "ran", "c": "ran", "d": "no_budget"}
    assert report.searches[3].note == (
        "not run: the search budget is used up: 3 done and 0 running of 3 allowed"
    )

    blocked = Plan.model_validate(plan(("a", "x"), ("b", "y", ("a",))))
    report = anyio.run(
        lambda: run_plan(blocked, backend=backend, meter=BudgetMeter(Budget(tool_calls=0)))
    )
    assert statuses(report) == {"a": "no_budget", "b": "blocked"}
    assert report.searches[1].note == "not run: it depends on a, which did not run"


# -- the budget under parallelism --------------------------------------------------------


class GuardedBackend:
    """A backend that checks the meter in the middle of every search and interleaves them."""

    def __init__(self, meter: BudgetMeter, rng: random.Random) -> None:
        self.meter = meter
        self.rng = rng
        self.running = 0
        self.most_at_once = 0
        self.ran: list[str] = []

    async def __call__(self, query: str) -> tuple[Hit, ...]:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        limit = self.meter.budget.tool_calls
        assert limit is not None
        for _ in range(self.rng.randint(1, 4)):
            spent, reserved = self.meter.spent, self.meter.reserved
            assert spent.tool_calls + reserved.tool_calls <= limit
            assert spent.tokens + reserved.tokens <= (self.meter.budget.tokens or 10**9)
            await anyio.lowlevel.checkpoint()
        self.ran.append(query)
        self.running -= 1
        return CORPUS.rank(query)


def test_ten_parallel_searches_under_a_budget_of_four_run_exactly_four() -> None:
    """Ten independent searches, four allowed: four run in parallel, six are reported not run."""
    meter = BudgetMeter(Budget(tool_calls=4))
    backend = GuardedBackend(meter, random.Random(1))
    ten = Plan.model_validate(plan(*((f"s{n}", f"query {n}") for n in range(10))))
    report = anyio.run(lambda: run_plan(ten, backend=backend, meter=meter))
    assert len(report.ran) == 4
    assert len(backend.ran) == 4
    assert backend.most_at_once == 4
    not_run = [s for s in report.searches if s.status != "ran"]
    assert len(not_run) == 6
    assert all(s.status == "no_budget" for s in not_run)
    assert all(s.note.startswith("not run: the search budget is used up") for s in not_run)
    assert meter.spent.tool_calls == 4
    assert meter.reserved == Spend()


@settings(max_examples=150, deadline=None)
@given(
    size=st.integers(1, 12),
    searches=st.integers(0, 12),
    tokens=st.one_of(st.none(), st.integers(0, 2_000)),
    seed=st.integers(0, 2**16),
)
def test_parallel_searches_never_exceed_the_budget(
    size: int, searches: int, tokens: int | None, seed: int
) -> None:
    """Random plans (random dependencies, repeats) under random budgets never overspend."""
    rng = random.Random(seed)
    queries = ["coral bleaching", "reef recovery", "local management", "ocean acidification"]
    planned = []
    for n in range(size):
        depends = tuple(f"s{m}" for m in range(n) if rng.random() < 0.3)
        query = rng.choice(queries) if rng.random() < 0.3 else f"query {n}"
        planned.append((f"s{n}", query, depends))
    meter = BudgetMeter(Budget(tool_calls=searches, tokens=tokens))
    backend = GuardedBackend(meter, rng)
    report = anyio.run(
        lambda: run_plan(Plan.model_validate(plan(*planned)), backend=backend, meter=meter)
    )
    assert len(report.ran) == len(backend.ran) == meter.spent.tool_calls <= searches
    assert tokens is None or meter.spent.tokens <= tokens
    assert meter.reserved == Spend()
    # Each query was searched at most once, and a search was refused only for want of room:
    # every search reserves RESULT_TOKENS, so the budget fits at least this many.
    assert len(backend.ran) == len(set(backend.ran))
    room = min(searches, (tokens // RESULT_TOKENS) if tokens is not None else searches)
    if any(s.status == "no_budget" for s in report.searches):
        assert len(report.ran) >= room


def test_a_tight_search_budget_runs_three_of_five_in_parallel() -> None:
    """Under a budget of three searches, a plan of five runs three at once and reports two."""
    outcome = scenario(tight_search_budget)
    assert outcome.result.history == (
        "Idle",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    (report,) = reports(outcome.result)
    assert statuses(report) == {
        "a": "ran",
        "b": "ran",
        "c": "ran",
        "d": "no_budget",
        "e": "no_budget",
    }
    assert outcome.backend.most_at_once == 3
    assert len(outcome.backend.queries) == 3


def test_the_search_budget_is_shared_by_every_call_of_a_run_and_survives_a_restore() -> None:
    """The meter comes from the run's state: a second plan, even after a restore, sees the first."""
    approved = approved_contract(searches=4, rubric=("something the corpus never mentions",))
    turns = [
        tool_call("run_searches", plan(("a", "coral"), ("b", "reef"), ("c", "ocean"))),
        tool_call("run_searches", plan(("d", "starfish"), ("e", "tourism"), ("f", "sunscreen"))),
        say("What the documents say.", "d10"),
    ]
    result, _, backend = anyio.run(run_agent, approved, turns)
    first, second = reports(result)
    assert len(first.ran) == 3
    assert statuses(second) == {"d": "ran", "e": "no_budget", "f": "no_budget"}
    assert len(backend.queries) == 4

    # Restore: the Planning phase after the first plan, copied as from a checkpoint,
    # driven by a fresh agent, backend and model. Nothing but the state carries the count.
    backend = RecordingBackend()
    agent = research_agent(approved, backend=backend)
    restored: Phase[ResearchContext] = load_phase(
        dump_phase(result.states[4]), agents={agent.name: agent}
    )
    assert restored.kind == "Planning"
    door = StructuredDoor(ScriptedModel(turns[1:]), tools=agent.tools)
    again = anyio.run(
        lambda: Runner(agent, model=door, gate=AutoDenyGate(), keep_states=True).drive(restored)
    )
    (_, second_again) = reports(again)
    assert statuses(second_again) == {"d": "ran", "e": "no_budget", "f": "no_budget"}
    assert backend.queries == ["starfish"]


def test_fetches_are_metered_by_the_contract() -> None:
    """With one fetch allowed, a second fetch is reported not fetched and the model is told why."""
    approved = approved_contract(fetches=1, rubric=("something the corpus never mentions",))
    turns = [
        tool_call("fetch", {"doc_id": "d01"}),
        tool_call("fetch", {"doc_id": "d02"}),
        tool_call("fetch", {"doc_id": "d99"}),
        say("Heat stress.", "d01"),
    ]
    result, _, _ = anyio.run(run_agent, approved, turns)
    told = [m.content for m in tool_messages(result, "fetch")]
    assert '"status":"ok"' in told[0]
    assert "not fetched: the fetch budget is used up: 1 done and 0 running of 1 allowed" in told[1]
    assert '"status":"unknown"' in told[2]
    assert isinstance(result.final, Done)


# -- repeats, plateau, coverage, step cap --------------------------------------------------


def test_a_repeated_query_is_suppressed() -> None:
    """A repeated search is suppressed by the governor; a plan drops queries already asked."""
    outcome = scenario(repeated_queries)
    result = outcome.result
    assert result.history == (
        "Idle",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    # The repeated query ran once; "reef recovery time" (asked twice in the plan) once.
    assert outcome.backend.queries == ["coral bleaching causes", "reef recovery time"]
    suppress = result.verdicts[0]
    assert (suppress.verdict, suppress.check) == ("suppress", "canonical")
    told = tool_messages(result, "search")[1].content
    assert told.startswith("You already called search with these arguments and it returned:")
    (_, planned) = reports(result)
    assert statuses(planned) == {"r1": "repeated", "r2": "ran", "r3": "repeated"}
    assert planned.searches[0].note == (
        "not run: this query already ran in this run (call-1/search); use those results"
    )
    assert planned.searches[2].note == "not run: the same query as r2; use its results"


def test_a_plateau_ends_the_run_before_the_step_cap() -> None:
    """Rephrased searches finding the same documents plateau, and the run answers early."""
    outcome = scenario(plateau)
    result = outcome.result
    assert result.history == (
        "Idle",
        *("Planning", "ToolCalling", "Observing") * 3,
        "Planning",
        "Responding",
        "Done",
    )
    finalize = result.verdicts[0]
    assert (finalize.hook, finalize.verdict, finalize.check) == (
        "after_action",
        "finalize",
        "plateau",
    )
    assert result.final.spent.model_calls == 4 < MAX_STEPS
    assert all(v.check != "step_cap" for v in result.verdicts)
    # The writer was asked to answer from what it has, with no tools offered.
    assert outcome.door.calls[-1].role == "writer"
    model = outcome.door.model
    assert isinstance(model, ScriptedModel)
    assert model.requests[-1].tools == ()
    assert "plateau" in model.requests[-1].messages[-1].content


def test_rubric_coverage_finalizes_and_the_answer_cites_returned_documents() -> None:
    """Planner, searcher, writer: finalized on coverage, citing only documents it was given."""
    outcome = scenario(rubric_coverage)
    result = outcome.result
    assert result.history == (
        "Idle",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    complete = result.verdicts[0]
    assert (complete.verdict, complete.check) == ("finalize", "complete")
    assert [(c.role, c.ok) for c in outcome.door.calls] == [
        ("planner", True),
        ("searcher", True),
        ("writer", True),
    ]
    answer = outcome.answer
    assert answer is not None
    assert answer.sources == ("d01", "d03", "d04")
    assert set(answer.sources) <= returned_documents(result.final.transcript)
    # s3 depended on s1; s1 and s2 ran at once.
    assert outcome.backend.queries[2] == "local reef management"
    assert outcome.backend.most_at_once == 2
    # Every model call's tokens are charged to the run's budget.
    assert result.final.spent.tokens == 3 * 300 == sum(c.tokens for c in outcome.door.calls)


def test_the_step_cap_is_six_model_calls_the_last_one_answers() -> None:
    """A run that keeps finding new documents is finalized at its sixth model call."""
    approved = approved_contract(searches=10, rubric=("something the corpus never mentions",))
    queries = ["ocean acidification", "starfish", "sunscreen", "tourism", "parrotfish"]
    turns = [tool_call("search", {"query": q}) for q in queries]
    turns.append(say("Five topics.", "d06"))
    result, door, _ = anyio.run(run_agent, approved, turns)
    assert result.final.spent.model_calls == MAX_STEPS
    assert [v.check for v in result.verdicts] == ["step_cap"]
    assert isinstance(result.final, Done)
    assert door.calls[-1].role == "writer"


def test_the_token_budget_stops_searches_then_the_run() -> None:
    """Model tokens are charged to the contract's budget; a search needs room for its result.

    700 tokens: the first search fits (300 used + 400 reserved); after the second model
    call a search no longer fits and is reported not run; after the third the run stops.
    """
    approved = approved_contract(tokens=700, rubric=("something the corpus never mentions",))
    turns = [
        tool_call("search", {"query": "coral"}, tokens=300),
        tool_call("search", {"query": "reef"}, tokens=300),
        tool_call("search", {"query": "ocean"}, tokens=300),
        say("never asked", "d01"),
    ]
    result, door, backend = anyio.run(run_agent, approved, turns)
    assert result.history == (
        "Idle",
        *("Planning", "ToolCalling", "Observing") * 2,
        "Planning",
        "Failed",
    )
    assert backend.queries == ["coral"]
    _, refused = reports(result)
    assert refused.searches[0].status == "no_budget"
    assert refused.searches[0].note.startswith(
        "not run: token budget: 600 of 700 tokens spent and 0 reserved, no room for search"
    )
    assert isinstance(result.final, Failed)
    assert result.final.reason == "token budget: 900 of 700 tokens used, no room for calling search"
    assert len(door.calls) == 3


# -- the door ------------------------------------------------------------------------------


def test_the_door_asks_again_when_the_writer_cites_a_document_it_was_not_given() -> None:
    """A source no tool returned is refused; the writer is asked again; both calls are charged."""
    approved = approved_contract(rubric=("something the corpus never mentions",))
    turns = [
        tool_call("search", {"query": "coral bleaching causes"}, tokens=100),
        say("Heat, and sunscreen.", "d01", "d09", tokens=100),
        say("Heat stress causes bleaching.", "d01", tokens=100),
    ]
    result, door, _ = anyio.run(run_agent, approved, turns)
    assert isinstance(result.final, Done)
    assert WriterOutput.model_validate_json(result.final.answer).sources == ("d01",)
    assert [(c.role, c.ok) for c in door.calls] == [
        ("searcher", True),
        ("writer", False),
        ("writer", True),
    ]
    assert door.calls[1].problems == (
        "sources d09 were not returned by any search or fetch (returned: d01, d02)",
    )
    assert result.final.spent.tokens == 300
    assert result.final.spent.model_calls == 2


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Heat stress.", "answer: Invalid JSON"),
        ('{"answer": "Heat."}', "sources: Field required"),
        ('{"answer": "Heat.", "sources": []}', "sources is empty: cite the documents"),
    ],
)
def test_the_door_refuses_a_writer_output_that_is_not_its_schema(text: str, problem: str) -> None:
    """Text that is not a WriterOutput, or cites nothing, is refused with the problem named."""
    approved = approved_contract(rubric=("something the corpus never mentions",))
    turns = [
        tool_call("search", {"query": "coral bleaching causes"}),
        reply(text),
        say("Heat stress causes bleaching.", "d01"),
    ]
    _, door, _ = anyio.run(run_agent, approved, turns)
    assert not door.calls[1].ok
    assert door.calls[1].problems[0].startswith(problem)
    assert door.calls[2].ok


def test_the_door_strips_a_markdown_fence_from_the_answer() -> None:
    """An answer wrapped in a ```json fence is accepted as its JSON."""
    approved = approved_contract(rubric=("something the corpus never mentions",))
    fenced = '```json\n{"answer": "Heat stress.", "sources": ["d01"]}\n```'
    turns = [tool_call("search", {"query": "coral bleaching causes"}), reply(fenced)]
    result, door, _ = anyio.run(run_agent, approved, turns)
    assert [c.ok for c in door.calls] == [True, True]
    assert isinstance(result.final, Done)
    assert result.final.answer == '{"answer":"Heat stress.","sources":["d01"]}'


# -- the demo ------------------------------------------------------------------------------


def test_demo_prints_states_verdicts_answers_and_sources(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m agents.research` runs every scenario and prints what happened."""
    from agents.research.__main__ import main

    anyio.run(main)
    out = capsys.readouterr().out
    assert out.count("states:") == 5
    assert out.count("answer:") == 5
    assert "after_action: finalize (plateau)" in out
    assert "before_action: suppress (canonical)" in out
    assert "[d04] Local management of reefs" in out
    assert "spent:     2 model calls, 600 tokens, 1 tool call\n" in out
    assert "(1 point)" in out
    assert "1 tool calls" not in out
    assert "(1 points)" not in out
