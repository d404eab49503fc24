"""The Planning step's governor work read in its own frames, pinned against the plain way.

For a ``LoopGovernor`` itself, ``_take_reply`` makes the call's record (``action``), rules
on it (``before_action``'s first answers: no limit in the budget, a new call, nothing
failed, the cycle check's first answers) and records it (``LoopState.record``) in its
own frame; ``_plan`` reads ``begin_step``'s last answer (continue) in its frame; the clock
(``time.monotonic`` itself) and the price (a free read tool) are not read then. Anything
else asks the governor's methods. ``_observed_in`` makes the settled tail from the one the
pending log was grown from. Each run is driven twice, with a ``LoopGovernor`` and with a
subclass of it (every method the governor's, so the plain way), and the two compared
transition by transition: the same phases, the same fields, the same records, index,
spend and transcript.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from statemachine import (
    Agent,
    Budget,
    LoopGovernor,
    Runner,
    Runtime,
    ToolError,
    read_tool,
    write_tool,
)
from statemachine._actions import ActionLog, ActionRecord
from statemachine._batch import _queued, _take, _take_reply
from statemachine._governor import LoopState, _observed_in
from statemachine._model import ToolRequest
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class _Args(BaseModel):
    key: str


class _Folded(BaseModel):
    key: str = Field(json_schema_extra={"case_insensitive": True})


@read_tool
async def _find(args: _Args) -> str:
    """Find a key (a result alike for alike keys)."""
    return f"the record of {args.key}: open, two items, nothing due"


@read_tool
async def _same(args: _Args) -> str:
    """The same result whatever the key (no gain: cycles, plateaus)."""
    return "nothing new"


@read_tool
async def _again(args: _Args) -> str:
    """Another tool with the same result (two tools in a cycle)."""
    return "nothing new"


@read_tool
async def _case(args: _Folded) -> str:
    """A key read case-insensitively."""
    return args.key


@read_tool(cost=lambda args: Decimal("0.01"))
async def _priced(args: _Args) -> str:
    """A read with a price."""
    return f"priced {args.key}"


@read_tool
async def _broken(args: _Args) -> str:
    """A read that fails (a failed call: the semantic tier's window)."""
    raise ToolError(f"no record {args.key}", retryable=False)


@write_tool
async def _put(args: _Args) -> str:
    """Write (the gate denies it)."""
    return args.key


class _Plain(LoopGovernor):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    """A ``LoopGovernor`` that is not one itself: every ruling asked of its methods."""


_TOOLS = ["_find", "_same", "_again", "_case", "_priced", "_broken", "_put", "nope"]
_ARGS = [
    '{"key": "a"}',
    '{"key":"a"}',  # the same call, another text: a canonical duplicate
    '{"key": "A"}',  # the same for _case (folded)
    '{"key": "b"}',
    '{"key": "c", "extra": 1}',
    "{}",
    "not json",
]
_TURN = st.one_of(
    st.tuples(st.sampled_from(_TOOLS[:3]), st.sampled_from(_ARGS[:4])),
    st.tuples(st.sampled_from(_TOOLS), st.sampled_from(_ARGS)),
    st.tuples(st.sampled_from(_TOOLS), st.integers(0, 9).map(lambda n: f'{{"key": "k{n}"}}')),
)

# Runs that reach each of the rulings read in place and the ones asked of the governor.
_KEYS = [f'{{"key": "k{n}"}}' for n in range(12)]
_SCRIPTS = {
    "canonical duplicate": [("_find", _ARGS[0]), ("_find", _ARGS[1])],
    "exact duplicate": [("_find", _ARGS[0]), ("_find", _ARGS[0])],
    "folded duplicate": [("_case", _ARGS[0]), ("_case", _ARGS[2])],
    "no gain, cycles, plateau": [("_same", key) for key in _KEYS],
    "a block of three repeated": [
        (("_again", "_same", "_same")[n % 3], key) for n, key in enumerate(_KEYS)
    ],
    "two tools in a cycle": [(("_same", "_again")[n % 2], key) for n, key in enumerate(_KEYS)],
    "failures, then alike calls": [("_broken", key) for key in _KEYS[:4]]
    + [("_find", key) for key in _KEYS[:4]],
    "near a suppressed call": [
        ("_find", '{"key": "look up the order k1 of the customer"}'),
        ("_find", '{"key": "look up the order k1 of the customer"}'),  # suppressed
        ("_find", '{"key": "look up the order k1 of the customer now"}'),
        ("_find", '{"key": "look up the order k2 of the customer"}'),
    ],
    "a write denied": [("_put", _ARGS[0]), ("_find", _ARGS[0]), ("_find", _ARGS[3])],
    "priced reads": [("_priced", key) for key in _KEYS[:5]],
    "alike results": [("_find", key) for key in _KEYS],
}


def _snapshot(phase: Any) -> dict[str, Any]:
    """A phase's fields (the ticket left out), its loop's records and index read whole."""
    named = {f.name: getattr(phase, f.name) for f in attrs.fields(type(phase))}
    named.pop("_ticket")
    named["kind"] = type(phase).__name__
    named["transcript"] = [m.model_dump() for m in named["transcript"]]
    loop = named.pop("loop")
    named["loop"] = loop.model_dump()
    named["records"] = [
        (a.call_id, a.tool, a.effect, a.exact, a.key, a.text, a.outcome, a.result, a.gain)
        for a in loop.actions
    ]
    # The index of a state with actions (the empty default state is shared by every
    # run, and its index made by whichever run came first).
    line = loop._index
    named["line"] = (
        None
        if line is None or not loop.actions
        else (line.size, dict(line.calls), dict(line.keys), line.tool, line.run, line.base)
    )
    call = named.get("call")
    if call is not None:
        named["call"] = (type(call).__name__, getattr(call, "args_hash", None), repr(call))
    named.pop("agent")
    return named


def _drive(
    governor: LoopGovernor,
    turns: list[tuple[str, str]],
    budget: Budget,
    *,
    max_steps: int,
    max_tool_iterations: int | None,
    clock: Any = None,
) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def watch(before: Any, after: Any) -> None:
        seen.append(_snapshot(after))

    agent = Agent[None](
        name="t",
        tools=[_find, _same, _again, _case, _priced, _broken, _put],
        governor=governor,
        budget=budget,
        max_steps=max_steps,
        max_tool_iterations=max_tool_iterations,
    )
    model = ScriptedModel([*(tool_call(name, text) for name, text in turns), reply("done")])
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    runner = Runner(agent, model=model, gate=AutoDenyGate(), on_transition=watch, **extra)

    async def go() -> None:
        await runner.run(None, "go", run_id="r")

    anyio.run(go)
    return seen


_BUDGETS = st.sampled_from(
    [
        Budget(),
        Budget(tool_calls=6),
        Budget(tokens=10**6),
        Budget(cost=Decimal("0.03")),
    ]
)


@settings(max_examples=120, deadline=None)
@given(
    turns=st.lists(_TURN, max_size=14),
    budget=_BUDGETS,
    window=st.integers(4, 7),
    cycle_gain=st.sampled_from([0.0, 0.15, 0.9]),
    max_steps=st.integers(2, 20),
    max_tool_iterations=st.none() | st.integers(1, 12),
)
def test_a_run_with_the_library_s_governor_is_the_plain_run(
    turns: list[tuple[str, str]],
    budget: Budget,
    window: int,
    cycle_gain: float,
    max_steps: int,
    max_tool_iterations: int | None,
) -> None:
    """Every transition of a run ruled by a ``LoopGovernor`` itself (the rulings read in
    ``_plan``'s and ``_take_reply``'s frames) is the one a governor of a subclass (its
    methods asked) makes: duplicates, canonical duplicates, cycles, failures, writes,
    budgets with limits, the step and tool-iteration caps."""
    settings_ = {"cycle_window": window, "cycle_gain": cycle_gain}
    ours = _drive(
        LoopGovernor(**settings_),
        turns,
        budget,
        max_steps=max_steps,
        max_tool_iterations=max_tool_iterations,
    )
    plain = _drive(
        _Plain(**settings_),
        turns,
        budget,
        max_steps=max_steps,
        max_tool_iterations=max_tool_iterations,
    )
    assert ours == plain


@pytest.mark.parametrize("script", sorted(_SCRIPTS))
@pytest.mark.parametrize(
    "budget", [Budget(), Budget(tool_calls=5), Budget(cost=Decimal("0.025"))], ids=repr
)
@pytest.mark.parametrize("caps", [(50, None), (6, None), (50, 3), (9, 4)])
@pytest.mark.parametrize(
    "cycle", [(4, 0.15, 3), (5, 0.0, 3), (4, 0.9, 3), (4, 0.15, 10**6), (6, 0.5, 10**6)]
)
def test_each_ruling_is_the_plain_one(
    script: str, budget: Budget, caps: tuple[int, int | None], cycle: tuple[int, float, int]
) -> None:
    """Runs made to reach each ruling (duplicates, cycles, plateaus, failures, a denied
    write, prices, budgets with limits, the caps) are the plain runs."""
    turns = _SCRIPTS[script]
    window, gain, plateau = cycle
    max_steps, max_tool_iterations = caps
    ours = _drive(
        LoopGovernor(cycle_window=window, cycle_gain=gain, plateau_steps=plateau),
        turns,
        budget,
        max_steps=max_steps,
        max_tool_iterations=max_tool_iterations,
    )
    plain = _drive(
        _Plain(cycle_window=window, cycle_gain=gain, plateau_steps=plateau),
        turns,
        budget,
        max_steps=max_steps,
        max_tool_iterations=max_tool_iterations,
    )
    assert ours == plain


@pytest.mark.parametrize("calls", [1, 31, 32, 33, 70])
def test_long_runs_across_chunks_are_the_plain_runs(calls: int) -> None:
    """Runs whose action logs fill chunks (the record's chunk boundary, the settled tail
    made from the one before) are the plain runs, transition by transition."""
    turns = [("_find", f'{{"key": "k{n}"}}') for n in range(calls)]
    for governor in (LoopGovernor(plateau_steps=10**6), _Plain(plateau_steps=10**6)):
        assert governor.plateau_steps == 10**6
    ours = _drive(
        LoopGovernor(plateau_steps=10**6),
        turns,
        Budget(),
        max_steps=10**6,
        max_tool_iterations=None,
    )
    plain = _drive(
        _Plain(plateau_steps=10**6), turns, Budget(), max_steps=10**6, max_tool_iterations=None
    )
    assert ours == plain
    assert len(ours[-1]["records"]) == calls


def test_a_clock_of_the_caller_is_read_as_often_as_the_plain_way_reads_it() -> None:
    """With a clock that is not ``time.monotonic`` the rulings are asked of the governor
    with the time read: the clock is read as many times as for a subclass."""
    reads = {"ours": 0, "plain": 0}

    def counting(name: str) -> Any:
        def clock() -> float:
            reads[name] += 1
            return 0.0

        return clock

    turns = [("_find", f'{{"key": "k{n}"}}') for n in range(5)]
    ours = _drive(
        LoopGovernor(),
        turns,
        Budget(),
        max_steps=50,
        max_tool_iterations=None,
        clock=counting("ours"),
    )
    plain = _drive(
        _Plain(), turns, Budget(), max_steps=50, max_tool_iterations=None, clock=counting("plain")
    )
    assert ours == plain
    assert reads["ours"] == reads["plain"] > 0


def _record(call_id: str, outcome: str = "pending") -> ActionRecord:
    return ActionRecord(
        call_id=call_id,
        tool="_find",
        effect="read",
        exact=f"e-{call_id}",
        key=f"k-{call_id}",
        text=f"_find({call_id})",
        outcome=outcome,
    )


@pytest.mark.parametrize("before", [0, 1, 5, 30])
@pytest.mark.parametrize("how", ["appended", "replaced", "made"])
def test_the_settled_tail_is_the_tail_with_its_last_record_settled(before: int, how: str) -> None:
    """``_observed_in``'s tail is the log's tail with its last record settled, whether the
    log was appended to (its tail grown from one a record shorter), had its last record
    replaced (a tail as long) or was made whole (nothing known of it)."""
    log = ActionLog(_record(f"c{n}", "ok") for n in range(before))
    last = _record("last")
    if how == "appended":
        log = log.appended(last)
    elif how == "replaced":
        log = log.appended(_record("last", "failed")).replaced(before, last)
    else:
        log = ActionLog([*log, last])
    loop = LoopState(actions=log)
    loop._line()
    observed = _observed_in(loop, "last", "a result", 0.5, ("a result",), 0)
    assert observed is not None
    got = list(observed.actions)
    assert [a.model_dump() for a in got[:-1]] == [a.model_dump() for a in list(log)[:-1]]
    assert all(a is b for a, b in zip(got[:-1], list(log)[:-1], strict=True))
    settled = got[-1]
    assert (settled.call_id, settled.outcome, settled.result, settled.gain) == (
        "last",
        "ok",
        "a result",
        0.5,
    )
    assert len(got) == before + 1


@pytest.mark.parametrize("outcome", ["failed", "ok"])
@pytest.mark.parametrize("near", [True, False])
def test_a_call_near_a_failed_one_is_ruled_as_the_plain_way_rules_it(
    outcome: str, near: bool
) -> None:
    """A read call of a run whose state holds a failed call of the same tool (a state
    built by hand or restored: a run's failed read ends it) is ruled by the semantic
    tier as the plain way rules it: near a failure, suppressed."""
    text = "look up the order k1 of the customer who asked about the delivery date"
    asked = json.dumps({"key": text.upper() if near else "k1"})
    made = []
    for governor in (LoopGovernor(), _Plain()):
        agent = Agent[None](name="t", tools=[_find], governor=governor)
        planning = agent.start(None, "go").receive("go")
        planning._leave("advance")
        earlier = agent.governor.action(
            agent.tools.route("_find", json.dumps({"key": text})),  # type: ignore[arg-type]
            json.dumps({"key": text}),
            "c1",
        )
        settled = ActionRecord(**{**earlier.model_dump(), "outcome": outcome, "result": "x"})
        loop = LoopState(actions=ActionLog([settled]), failures=(0,) if outcome != "ok" else ())
        loop._line()
        rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate(), clock=time.monotonic)
        requests = (ToolRequest(name="_find", arguments=asked, id="c2"),)
        after = _take_reply(planning, rt, requests, spent=planning.spent, loop=loop)
        made.append(_snapshot(after))
    assert made[0] == made[1]
    if near and outcome == "failed":
        assert made[0]["kind"] == "Planning"  # suppressed, back to the model


@pytest.mark.parametrize(
    ("owner", "name"),
    [
        (LoopGovernor, "begin_step"),
        (LoopGovernor, "action"),
        (LoopGovernor, "before_action"),
        (LoopState, "record"),
    ],
)
def test_a_method_patched_on_the_class_is_asked(
    owner: type[Any], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A method of ``LoopGovernor`` or ``LoopState`` replaced on the class itself is
    asked at every step, as the plain way asks it, and the run is the same."""
    turns = [("_find", f'{{"key": "k{n}"}}') for n in range(4)]
    plain = _drive(LoopGovernor(), turns, Budget(), max_steps=50, max_tool_iterations=None)
    own = getattr(owner, name)
    calls: list[str] = []

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return own(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    patched = _drive(LoopGovernor(), turns, Budget(), max_steps=50, max_tool_iterations=None)
    assert patched == plain
    assert len(calls) >= 4


@pytest.mark.parametrize("given", ["", "c1", "call-1", "c9", "call-1.2"])
@pytest.mark.parametrize("earlier", [(), ("c1",), ("call-1",), ("c1", "call-1"), ("c9", "call-1")])
def test_a_reply_s_call_id_is_the_one_the_queued_way_gives(
    given: str, earlier: tuple[str, ...]
) -> None:
    """The id ``_take_reply`` gives a reply's one call (the model's kept when no call of
    the run has it, else ``call-<step>``, made unique) is the one the queued way
    (``_take(_queued(...))``) gives, with the same phase."""
    made = []
    for way in ("reply", "queued"):
        agent = Agent[None](name="t", tools=[_find])
        planning = agent.start(None, "go").receive("go")
        planning._leave("advance")
        loop = LoopState()
        for n, call_id in enumerate(earlier):
            text = json.dumps({"key": f"e{n}"})
            routed: Any = agent.tools.route("_find", text)
            loop = loop.record(agent.governor.action(routed, text, call_id))
        loop._line()
        rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate(), clock=time.monotonic)
        requests = (ToolRequest(name="_find", arguments='{"key": "new"}', id=given),)
        if way == "reply":
            after = _take_reply(planning, rt, requests, planning.spent, loop)
        else:
            after = _take(_queued(planning, requests, spent=planning.spent, loop=loop), rt)
        made.append(_snapshot(after))
    assert made[0] == made[1]
    assert made[0]["kind"] == "ToolCalling"


@pytest.mark.parametrize("given", ["", "c1", "c2", "c3", "call-1"])
def test_a_branch_s_call_ids_are_read_through_its_parent(given: str) -> None:
    """A state on a branch of its line (two states recorded from one) knows the ids of
    the line it branched from: a reply's id taken there is replaced, as the queued way
    replaces it."""
    made = []
    for way in ("reply", "queued"):
        agent = Agent[None](name="t", tools=[_find])
        planning = agent.start(None, "go").receive("go")
        planning._leave("advance")

        def recorded(
            state: LoopState, call_id: str, key: str, agent: Agent[None] = agent
        ) -> LoopState:
            text = json.dumps({"key": key})
            routed: Any = agent.tools.route("_find", text)
            return state.record(agent.governor.action(routed, text, call_id))

        base = recorded(LoopState(), "c1", "a")
        recorded(base, "c2", "b")
        loop = recorded(base, "c3", "c")  # a branch: its line's parent holds c1
        assert loop._index is not None
        assert loop._index.parent is not None
        rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate(), clock=time.monotonic)
        requests = (ToolRequest(name="_find", arguments='{"key": "new"}', id=given),)
        if way == "reply":
            after = _take_reply(planning, rt, requests, planning.spent, loop)
        else:
            after = _take(_queued(planning, requests, spent=planning.spent, loop=loop), rt)
        made.append(_snapshot(after))
    assert made[0] == made[1]
