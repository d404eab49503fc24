"""The research agent's scenarios, each on a scripted model over the offline corpus.

Each returns what happened: the run, the approved contract, the door's record of
every model call, and the queries the search backend actually ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from statemachine import ModelReply, Runner, RunResult
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

from ._agent import ResearchContext, research_agent
from ._contract import ApprovedContract, Contract, ResearchBudget
from ._corpus import CORPUS, Corpus, Hit
from ._door import StructuredDoor, WriterOutput, answer_of

__all__ = [
    "BRIEF",
    "Outcome",
    "RecordingBackend",
    "approved_contract",
    "cyclic_plan",
    "plateau",
    "repeated_queries",
    "rubric_coverage",
    "tight_search_budget",
]

BRIEF = (
    "What causes coral bleaching, how long do reefs take to recover, and what can be done locally?"
)
RUBRIC = ("causes of coral bleaching", "recovery time after bleaching", "local management actions")
APPROVED_AT = datetime(2026, 1, 1, tzinfo=UTC)
# What each scripted model turn "uses", charged to the contract's token budget.
TURN_TOKENS = 300


def approved_contract(
    *,
    brief: str = BRIEF,
    rubric: Sequence[str] = RUBRIC,
    searches: int = 6,
    fetches: int = 2,
    tokens: int = 20_000,
    seconds: float = 60.0,
) -> ApprovedContract:
    """A contract for the scenarios, approved by the client."""
    budget = ResearchBudget(searches=searches, fetches=fetches, tokens=tokens, seconds=seconds)
    return Contract(brief=brief, rubric=tuple(rubric), budget=budget).approve(
        by="client@example.com", at=APPROVED_AT
    )


@attrs.define
class RecordingBackend:
    """A search backend over a corpus that records every query it ran and how many ran at once.

    ``pause`` checkpoints inside each search let other searches run meanwhile, so
    parallel searches really overlap.
    """

    corpus: Corpus = CORPUS
    pause: int = 3
    queries: list[str] = attrs.field(factory=list[str])
    running: int = 0
    most_at_once: int = 0

    async def __call__(self, query: str) -> tuple[Hit, ...]:
        """Search, recording the query."""
        self.queries.append(query)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            for _ in range(self.pause):
                await anyio.lowlevel.checkpoint()
            return self.corpus.rank(query)
        finally:
            self.running -= 1


@attrs.frozen
class Outcome:
    """What one scenario did."""

    title: str
    result: RunResult[ResearchContext]
    contract: ApprovedContract
    door: StructuredDoor
    backend: RecordingBackend

    @property
    def answer(self) -> WriterOutput | None:
        """The writer's answer, if the run answered with one."""
        final = self.result.final
        text = getattr(final, "answer", None)
        return answer_of(text) if isinstance(text, str) else None


def _call(name: str, arguments: dict[str, Any]) -> ModelReply:
    return tool_call(name, arguments, tokens=TURN_TOKENS)


def _answer(text: str, *sources: str) -> ModelReply:
    return reply(WriterOutput(answer=text, sources=sources).model_dump_json(), tokens=TURN_TOKENS)


def _search(id: str, query: str, *depends_on: str) -> dict[str, Any]:
    return {"id": id, "query": query, "depends_on": list(depends_on)}


def _plan(*searches: dict[str, Any]) -> dict[str, Any]:
    return {"searches": list(searches)}


async def _run(
    title: str, approved: ApprovedContract, turns: list[ModelReply], backend: RecordingBackend
) -> Outcome:
    agent = research_agent(approved, backend=backend)
    door = StructuredDoor(ScriptedModel(turns), tools=agent.tools)
    # Every phase kept: a scenario's outcome shows (and its tests read) the whole run.
    runner = Runner(agent, model=door, gate=AutoDenyGate(), seed=7, keep_states=True)
    result = await runner.run(ResearchContext(approved), approved.contract.brief)
    return Outcome(title=title, result=result, contract=approved, door=door, backend=backend)


ANSWER = (
    "Coral bleaching is caused mainly by heat stress: water about 1 C above the summer "
    "maximum for weeks (d01). Reefs need 10 to 15 years to recover from severe bleaching "
    "(d03). Locally, cutting runoff, treating sewage, protecting grazing fish and "
    "installing moorings help reefs cope and recover faster (d04)."
)


async def rubric_coverage() -> Outcome:
    """The planner's plan runs (two searches in parallel, one after them), the searcher
    fetches one document, and the run finalizes once the rubric is covered."""
    turns = [
        _call(
            "run_searches",
            _plan(
                _search("s1", "coral bleaching causes"),
                _search("s2", "reef recovery time"),
                _search("s3", "local reef management", "s1"),
            ),
        ),
        _call("fetch", {"doc_id": "d04"}),
        _answer(ANSWER, "d01", "d03", "d04"),
    ]
    return await _run("rubric covered", approved_contract(), turns, RecordingBackend())


async def repeated_queries() -> Outcome:
    """The same query three ways: the governor suppresses a repeated search call, and the
    plan drops a query that already ran and one repeated inside the plan."""
    rubric = ("causes of coral bleaching", "recovery time after bleaching")
    turns = [
        _call("search", {"query": "coral bleaching causes"}),
        _call("search", {"query": "Coral Bleaching Causes"}),
        _call(
            "run_searches",
            _plan(
                _search("r1", "coral bleaching  CAUSES"),
                _search("r2", "reef recovery time"),
                _search("r3", "Reef recovery time"),
            ),
        ),
        _answer(
            "Heat stress causes bleaching (d01); reefs take 10 to 15 years to recover (d03).",
            "d01",
            "d03",
        ),
    ]
    return await _run(
        "repeated queries", approved_contract(rubric=rubric), turns, RecordingBackend()
    )


async def plateau() -> Outcome:
    """The corpus says nothing of restoration costs; rephrased searches find the same two
    documents, and the plateau ends the run before the step cap."""
    rubric = ("coral restoration in nurseries", "restoration cost per hectare")
    turns = [
        _call("search", {"query": "coral restoration cost"}),
        _call("search", {"query": "cost of coral restoration"}),
        _call("search", {"query": "coral restoration costs"}),
        _answer(
            "Reefs are restored by growing coral fragments in nurseries and planting them "
            "back (d08). The documents found give no cost per hectare.",
            "d08",
        ),
    ]
    return await _run(
        "plateau",
        approved_contract(brief="How are reefs restored, at what cost?", rubric=rubric),
        turns,
        RecordingBackend(),
    )


async def tight_search_budget() -> Outcome:
    """A plan of five independent searches under a budget of three: they run in parallel,
    each reserving its search first, so exactly three run and two are reported not run."""
    rubric = ("causes of coral bleaching", "recovery time after bleaching")
    turns = [
        _call(
            "run_searches",
            _plan(
                _search("a", "coral bleaching causes"),
                _search("b", "reef recovery time"),
                _search("c", "degree heating weeks"),
                _search("d", "ocean acidification"),
                _search("e", "crown-of-thorns starfish"),
            ),
        ),
        _answer(
            "Heat stress causes bleaching (d01); recovery takes 10 to 15 years (d03).",
            "d01",
            "d03",
        ),
    ]
    approved = approved_contract(rubric=rubric, searches=3)
    return await _run("tight search budget", approved, turns, RecordingBackend())


async def cyclic_plan() -> Outcome:
    """A plan whose dependencies form a cycle is refused whole, before any search runs;
    the model is told why and sends a plan that can run."""
    rubric = ("causes of coral bleaching",)
    turns = [
        _call(
            "run_searches",
            _plan(
                _search("s1", "coral bleaching causes", "s2"),
                _search("s2", "marine heatwaves", "s1"),
            ),
        ),
        _call(
            "run_searches",
            _plan(_search("s1", "coral bleaching causes"), _search("s2", "marine heatwaves", "s1")),
        ),
        _answer("Marine heatwaves cause coral bleaching (d01).", "d01"),
    ]
    return await _run("cyclic plan", approved_contract(rubric=rubric), turns, RecordingBackend())
