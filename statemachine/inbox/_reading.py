"""What the inbox shows: the runs that need a person, and everything about one run.

Read as the command line reads it (``cli._show``: a checkpoint read as a document,
without the agent's code), plus the conversation, the budgets of the agent when the
inbox was given it (``--agent``), and the agent's graph with the run's path on it,
laid out here as SVG shapes for the template to draw (no JavaScript, no layout engine).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final, cast

from .. import Agent, Checkpointer, CheckpointError, Phases, RunRecord, RunStatus, agent_graph
from ..cli._render import age
from ..cli._runs import _waits_for_approval
from ..cli._show import _details, fields, pending

__all__ = ["NEEDS_A_PERSON", "Graph", "inbox_rows", "run_page", "uncertain_effect"]

NEEDS_A_PERSON: Final = (RunStatus.INTERRUPTED, RunStatus.FAILED_RESUMABLE)
_UNCERTAIN: Final = re.compile(r"a person to check whether (\S+) went through \(effect (\S+)\)")
_MOST_ROWS: Final = 200


def uncertain_effect(record: RunRecord) -> tuple[str, str] | None:
    """``(tool, idempotency key)`` of the write a run stopped in the middle of, if it did."""
    found = _UNCERTAIN.fullmatch(record.waiting_for)
    if record.status != RunStatus.INTERRUPTED or found is None:
        return None
    return found[1], found[2]


def _kind_of(record: RunRecord) -> str:
    if _waits_for_approval(record):
        return "approval"
    if uncertain_effect(record) is not None:
        return "uncertain"
    if record.held:
        return "held"
    if record.status == RunStatus.FAILED_RESUMABLE:
        return "failed"
    return "interrupted"


async def _row(store: Checkpointer, record: RunRecord, now: datetime) -> dict[str, Any]:
    kind = _kind_of(record)
    tool, amount = "", None
    if kind == "approval":
        try:
            _, document = await store.load(record.run_id)
        except CheckpointError:
            document = {}
        call = pending(str(document.get("kind", "")), fields(document))
        if call is not None:
            tool, amount = str(call["tool"]), call["amount"]
    elif kind == "uncertain":
        tool = (uncertain_effect(record) or ("", ""))[0]
    return {
        "run_id": record.run_id,
        "agent": record.agent,
        "status": record.status.value,
        "kind": kind,
        "phase": record.phase,
        "waiting_for": record.reason or record.waiting_for,
        "decided": record.decision_pending,
        "since": record.updated_at,
        "waited": age(max(now - record.updated_at, now - now)),
        "tool": tool,
        "amount": amount,
    }


async def inbox_rows(store: Checkpointer) -> list[dict[str, Any]]:
    """The runs that need a person (waiting for an approval, interrupted, with an uncertain
    effect, failed and resumable), newest first, each with its tool and amount if known."""
    records = await store.registry(status=list(NEEDS_A_PERSON))
    records.sort(key=lambda record: record.updated_at, reverse=True)
    now = datetime.now(UTC)
    return [await _row(store, record, now) for record in records[:_MOST_ROWS]]


# --- the graph -------------------------------------------------------------------------------

# Where each phase sits (its box's centre), so that the run's usual loop reads left to right.
_PLACES: Final[dict[str, tuple[int, int]]] = {
    "Idle": (80, 170),
    "Planning": (240, 170),
    "ModelRetrying": (240, 70),
    "AwaitApproval": (430, 70),
    "ToolCalling": (610, 170),
    "Retrying": (790, 170),
    "Observing": (430, 270),
    "Responding": (240, 270),
    "Done": (240, 360),
    "Failed": (790, 310),
}
_HALF_W: Final = 70
_HALF_H: Final = 18
Graph = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


def standard_graph() -> Graph:
    """The library's own phases and their transitions (an agent the inbox was not given)."""
    graph = agent_graph(Phases())
    return (*(name for name, _ in graph.phases), "Failed", "Done"), graph.edges


def graph_of(agent: Agent[Any]) -> Graph:
    """An agent's phases (with the two endings) and transitions."""
    graph = agent_graph(agent)
    return (*(name for name, _ in graph.phases), "Failed", "Done"), graph.edges


def _border(x: float, y: float, dx: float, dy: float) -> tuple[float, float]:
    """Where the ray from a box's centre ``(x, y)`` along ``(dx, dy)`` leaves the box."""
    scale = min(
        _HALF_W / abs(dx) if dx else math.inf,
        _HALF_H / abs(dy) if dy else math.inf,
    )
    return x + dx * scale, y + dy * scale


def _edge_path(a: tuple[int, int], b: tuple[int, int]) -> str:
    if a == b:  # a phase that goes to itself: a loop over its box
        x, y = a
        top = y - _HALF_H
        return f"M {x - 20} {top} C {x - 30} {top - 34}, {x + 30} {top - 34}, {x + 20} {top}"
    dx, dy = b[0] - a[0], b[1] - a[1]
    x1, y1 = _border(a[0], a[1], dx, dy)
    x2, y2 = _border(b[0], b[1], -dx, -dy)
    return f"M {x1:.0f} {y1:.0f} L {x2:.0f} {y2:.0f}"


def diagram(graph: Graph, path: Sequence[str], current: str) -> dict[str, Any]:
    """The shapes of ``graph`` with ``path`` (the run's phases in order) drawn on it."""
    names, edges = graph
    places = dict(_PLACES)
    for extra, name in enumerate(n for n in dict.fromkeys([*names, *path]) if n not in places):
        places[name] = (80 + 180 * (extra % 5), 430 + 60 * (extra // 5))
    taken: dict[tuple[str, str], int] = {}
    for step in itertools.pairwise(path):
        taken[step] = taken.get(step, 0) + 1
    shown = list(dict.fromkeys([*edges, *taken]))

    def title(a: str, b: str) -> str:
        times = taken.get((a, b), 0)
        return f"{a} → {b}" + (f" (taken {times} times)" if times else "")

    visited = set(path)
    return {
        "height": max(y for _, y in places.values()) + 40,
        "nodes": [
            {
                "name": name,
                "x": places[name][0] - _HALF_W,
                "y": places[name][1] - _HALF_H,
                "cx": places[name][0],
                "cy": places[name][1] + 5,
                "state": "current" if name == current else "visited" if name in visited else "",
            }
            for name in dict.fromkeys([*names, *path])
        ],
        "edges": [
            {
                "d": _edge_path(places[a], places[b]),
                "taken": taken.get((a, b), 0),
                "title": title(a, b),
            }
            for a, b in shown
        ],
    }


# --- one run ---------------------------------------------------------------------------------


def _conversation(document: Mapping[str, Any]) -> list[dict[str, str]]:
    transcript = fields(document).get("transcript")
    if not isinstance(transcript, list):
        return []
    said: list[dict[str, str]] = []
    for message in cast("list[object]", transcript):
        if not isinstance(message, dict):
            continue
        item = cast("dict[str, Any]", message)
        calls = item.get("tool_calls") or []
        called = [
            f"{c.get('name')}({c.get('arguments')})"
            for c in cast("list[object]", calls)
            if isinstance(c, dict)
        ]
        said.append(
            {
                "role": str(item.get("role", "")),
                "name": str(item.get("name", "")),
                "content": str(item.get("content", "")),
                "calls": "; ".join(called),
            }
        )
    return said


def _budgets(spent: Mapping[str, Any], agent: Agent[Any] | None) -> list[dict[str, Any]]:
    """Each kind of spend beside the agent's limit for it (``None``: no limit, or not known)."""
    budget = agent.budget if agent is not None else None
    rows: list[dict[str, Any]] = []
    for key, label in (
        ("cost", "cost"),
        ("tokens", "tokens"),
        ("tool_calls", "tool calls"),
        ("model_calls", "model calls"),
    ):
        limit = getattr(budget, key, None) if budget is not None else None
        used = spent.get(key, 0)
        share = None
        if limit is not None and isinstance(used, int | Decimal) and limit > 0:
            share = min(100, int(Decimal(used) * 100 / Decimal(limit)))
        rows.append({"label": label, "used": used, "limit": limit, "share": share})
    return rows


async def run_page(
    store: Checkpointer, run_id: str, agents: Mapping[str, Agent[Any]]
) -> dict[str, Any]:
    """Everything a run's page shows (raises ``UnknownRunError`` for a run never saved)."""
    details = await _details(store, run_id)
    record = await store.record(run_id)
    try:
        _, document = await store.load(run_id)
    except CheckpointError:
        document = {}
    agent = agents.get(record.agent)
    graph = graph_of(agent) if agent is not None else standard_graph()
    path = [str(row["phase"]) for row in details["timeline"]]
    effect = uncertain_effect(record)
    call = fields(document).get("call")
    return {
        **details,
        "record": record,
        "kind": _kind_of(record) if record.status in NEEDS_A_PERSON else record.status.value,
        "conversation": _conversation(document),
        "budgets": _budgets(details["spent"], agent),
        "max_steps": agent.max_steps if agent is not None else None,
        "diagram": diagram(graph, path, details["phase"]),
        "uncertain": None
        if effect is None
        else {"tool": effect[0], "key": effect[1], "call": call if isinstance(call, dict) else {}},
    }
