"""The Planning step's own work in ``_plan``'s frame, pinned against the plain functions.

For the library's ``Planning`` itself, ``_plan`` leaves the phase (``Phase._leave``'s
first answer), shows the model what ``Planning.messages()`` shows (while the class holds
its own ``messages`` and ``instructions``: the system message as ``_system`` makes it,
the transcript prefixed as ``Transcript.prefixed`` makes it) in a request made as
``_model_request`` makes it, and adds a zero usage cost as ``Spend.add`` adds it (while
the class holds its own ``add``); anything else calls them. ``_take_reply`` records the
call with the loop, line and log its ruling read (no class of another's run between),
which tests/test_batch_fast22b.py pins transition by transition against a governor of
a subclass. Here each request, phase and spend is compared with what the plain
functions make of the same phase.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_planning_fast20e import _agent, _fields, _Model, _request

from statemachine import Runtime, _budget
from statemachine._budget import Spend
from statemachine._errors import PhaseForgedError, PhaseReusedError
from statemachine._fast._messages import _model_request
from statemachine._governor import CONTINUE
from statemachine._model import Message, ModelReply, Transcript, Usage
from statemachine._phases import Phase, Planning
from statemachine._planning import _plan
from statemachine.testing import AutoDenyGate, reply, tool_call


def _runtime(model: Any) -> Runtime:
    return Runtime(run_id="r", model=model, gate=AutoDenyGate(), clock=time.monotonic)


def _said(text: str, role: str = "user") -> Message:
    return Message(role=role, content=text)


def _planning_of(agent: Any, earlier: int) -> Any:
    """A Planning of ``agent`` whose transcript holds ``earlier`` messages more."""
    planning = agent.start(None, "go").receive("go")
    if earlier:
        more = [_said(f"m{k}", "user" if k % 2 else "assistant") for k in range(earlier)]
        planning = planning._copy(transcript=Transcript([*planning.transcript, *more]))
    return planning


def _shown(request: Any) -> list[Any]:
    """A request's messages, each its class and fields."""
    return [(type(m), m.model_dump()) for m in request.messages]


def _planned(planning: Any, turn: Any, free: object = None) -> tuple[Any, list[Any]]:
    model = _Model(turn)

    async def go() -> Any:
        return await _plan(planning, _runtime(model), free)

    return anyio.run(go), model.requests


def _turn(tokens: int, cost: str, tool: bool) -> ModelReply:
    made = tool_call("lookup", '{"key": "k"}') if tool else reply("done")
    usage = Usage(input_tokens=tokens, output_tokens=tokens // 3, cost=Decimal(cost))
    return made.model_copy(update={"usage": usage})


_COSTS = ["0", "0.00", "0E+3", "-0", "0E-30", "1.5", "0.001", "12345678901234567890.123"]


@settings(max_examples=200, deadline=None)
@given(
    instructions=st.sampled_from(["", "Be brief.", "x" * 500]),
    earlier=st.sampled_from([0, 1, 5, 30, 31, 32, 33, 70]),
    tokens=st.integers(0, 10**6),
    cost=st.sampled_from(_COSTS),
    tool=st.booleans(),
    budget=st.sampled_from(["free", "limited"]),
    kept=st.booleans(),
    start=st.sampled_from([None, "0", "1E+1", "0.5", "50", "0E+1"]),
)
def test_the_request_phase_and_spend_are_the_plain_functions_own(
    instructions: str,
    earlier: int,
    tokens: int,
    cost: str,
    tool: bool,
    budget: str,
    kept: bool,
    start: str | None,
) -> None:
    """The model is shown what ``Planning.messages()`` shows, in a request
    ``_model_request`` makes; the phase is left by advance; the spend is what
    ``Spend.add`` makes of the reply's usage (its cost the very object add gives),
    whether the spend's cost is ``add``'s kept one or not."""
    agent = _agent(budget, False, False, instructions, False)
    planning = _planning_of(agent, earlier)
    if start is not None:  # a spend whose cost a zero of exponent 0 may spell anew (1E+1)
        planning = planning._copy(spent=Spend(tokens=3, cost=Decimal(start), model_calls=2))
    if kept:
        _budget._kept = planning.spent.cost  # as add keeps it (whether it would or not)
    else:
        _budget._kept = None
    turn = _turn(tokens, cost, tool)
    expected_request = _request(
        _model_request(planning.messages(), agent.tools._schemas, None, None, agent.model_settings)
    )
    expected_shown = [(type(m), m.model_dump()) for m in planning.messages()]
    usage = turn.usage
    before_kept = _budget._kept
    expected_spend = planning.spent.add(
        tokens=usage.input_tokens + usage.output_tokens, cost=usage.cost, model_calls=1
    )
    _budget._kept = before_kept  # as it was (add may keep a cost)
    made, requests = _planned(planning, turn, agent.budget if budget == "free" else None)
    assert planning._ticket.left_by == "advance"
    (asked,) = requests
    got = _request(asked)
    assert {k: v for k, v in got.items() if k != "messages"} == {
        k: v for k, v in expected_request.items() if k != "messages"
    }
    assert _shown(asked) == expected_shown
    # The transcript is shared, not copied; the system message comes first when given.
    held = planning.transcript
    assert asked.messages._chunks is held._chunks
    assert asked.messages._tail is held._tail
    assert asked.messages._grown is None
    assert len(asked.messages._head) == len(held._head) + (1 if instructions else 0)
    if instructions:
        system = asked.messages._head[0]
        assert type(system) is Message
        assert (system.role, system.content, system.tool_calls) == ("system", instructions, ())
        assert (system.tool_call_id, system.name) == ("", "")
        assert asked.messages._head[1:] == held._head
    spent = made.spent
    assert type(spent) is Spend
    assert (spent.tokens, spent.tool_calls, spent.model_calls) == (
        expected_spend.tokens,
        expected_spend.tool_calls,
        expected_spend.model_calls,
    )
    assert str(spent.cost) == str(expected_spend.cost)
    assert spent.cost.as_tuple() == expected_spend.cost.as_tuple()
    # The very cost object add gives: the spend's own (a zero it keeps) or a new sum.
    assert (spent.cost is planning.spent.cost) == (expected_spend.cost is planning.spent.cost)


def test_a_zero_cost_keeps_the_spend_s_own_cost_object() -> None:
    """Once ``add`` keeps the spend's cost, a zero cost of exponent 0 or more leaves that
    very object (as ``add`` does); a zero of a smaller exponent is added."""
    agent = _agent("free", False, False, "Be brief.", False)
    planning = _planning_of(agent, 0)
    _budget._kept = planning.spent.cost  # as add keeps it
    for cost, same in (("0", True), ("0E+3", True), ("-0", True), ("0.00", False)):
        made, _ = _planned(_planning_of(agent, 0), _turn(7, cost, False), agent.budget)
        assert (made.spent.cost is planning.spent.cost) is same, cost
        plain = planning.spent.add(tokens=9, cost=Decimal(cost), model_calls=1)
        assert str(made.spent.cost) == str(plain.cost)


class _Own(Planning[None]):  # type: ignore[misc]
    """A Planning of a subclass with instructions of its own."""

    def instructions(self) -> str:
        return "mine"


def test_a_subclass_s_instructions_are_shown() -> None:
    agent = _agent("free", False, False, "theirs", False)
    agent = attrs.evolve(agent, phases=attrs.evolve(agent.phases, planning=_Own))
    planning = agent.start(None, "go").receive("go")
    assert type(planning) is _Own
    _, (asked,) = _planned(planning, _turn(1, "0", False), agent.budget)
    assert asked.messages[0].content == "mine"


@pytest.mark.parametrize("method", ["messages", "instructions"])
def test_a_method_patched_on_the_class_is_called(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``messages`` or ``instructions`` patched on the library's Planning is asked."""
    asked_for: list[str] = []
    own = getattr(Planning, method)

    def patched(self: Any) -> Any:
        asked_for.append(method)
        return own(self)

    monkeypatch.setattr(Planning, method, patched)
    agent = _agent("free", False, False, "Be brief.", False)
    _, (asked,) = _planned(_planning_of(agent, 3), _turn(1, "0", False), agent.budget)
    assert asked_for == [method]
    assert asked.messages[0].content == "Be brief."


def test_spend_add_patched_on_the_class_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    added: list[dict[str, Any]] = []
    own = Spend.add

    def patched(self: Spend, **values: Any) -> Spend:
        added.append(values)
        return own(self, **values)

    agent = _agent("free", False, False, "", False)
    planning = _planning_of(agent, 0)
    _budget._kept = planning.spent.cost
    monkeypatch.setattr(Spend, "add", patched)
    made, _ = _planned(planning, _turn(3, "0", False), agent.budget)
    assert len(added) == 1
    assert made.spent.model_calls == planning.spent.model_calls + 1


def test_a_governor_s_own_checks_are_asked() -> None:
    """A LoopGovernor with checks of its own asks them at the start of the step."""
    asked: list[Any] = []

    def check(loop: Any, ctx: Any) -> Any:
        asked.append(ctx)
        return CONTINUE

    agent = _agent("free", False, False, "", False)
    agent = attrs.evolve(agent, governor=attrs.evolve(agent.governor, checks=(check,)))
    _planned(_planning_of(agent, 0), _turn(1, "0", False), agent.budget)
    assert asked == [None]


def _leaving_error(phase: Any) -> tuple[type[BaseException], str]:
    try:
        phase._leave("advance")
    except Exception as error:
        return type(error), str(error)
    raise AssertionError("left")


def test_a_phase_left_already_is_refused_as_leave_refuses_it() -> None:
    agent = _agent("free", False, False, "", False)
    planning = _planning_of(agent, 0)
    _planned(planning, _turn(1, "0", False))
    with pytest.raises(PhaseReusedError) as raised:
        _planned(planning, _turn(1, "0", False))
    assert (type(raised.value), str(raised.value)) == _leaving_error(planning)


def _twin(phase: Any) -> Any:
    """A copy of ``phase`` sharing its ticket (made around the seal)."""
    twin = object.__new__(type(phase))
    for field in attrs.fields(type(phase)):
        object.__setattr__(twin, field.name, getattr(phase, field.name))
    return twin


def test_a_copy_sharing_the_ticket_is_refused_as_leave_refuses_it() -> None:
    agent = _agent("free", False, False, "", False)
    planning = _planning_of(agent, 0)
    expected = _leaving_error(_twin(planning))
    with pytest.raises(PhaseForgedError) as raised:
        _planned(_twin(planning), _turn(1, "0", False))
    assert (type(raised.value), str(raised.value)) == expected
    assert planning._ticket.left_by is None


def test_a_phase_without_a_ticket_is_refused_as_leave_refuses_it() -> None:
    agent = _agent("free", False, False, "", False)
    twin = _twin(_planning_of(agent, 0))
    object.__delattr__(twin, "_ticket")
    expected = _leaving_error(twin)
    with pytest.raises(expected[0]) as raised:
        _planned(twin, _turn(1, "0", False))
    assert str(raised.value) == expected[1]


def test_the_phase_made_is_the_plain_path_s() -> None:
    """The phase a reply of a call makes is the one the plain path (another clock:
    ``_heard``) makes, with the system message given."""
    agent = _agent("free", False, False, "Be brief.", False)
    turn = _turn(5, "0", True)
    made, (asked,) = _planned(_planning_of(agent, 2), turn, agent.budget)

    model = _Model(turn)

    async def plain() -> Any:
        rt = Runtime(run_id="r", model=model, gate=AutoDenyGate(), clock=lambda: 0.0)
        return await _plan(_planning_of(agent, 2), rt, agent.budget)

    other = anyio.run(plain)
    assert _fields(made) == _fields(other)
    assert _shown(asked) == _shown(model.requests[0])


def test_phase_is_the_library_s() -> None:
    assert issubclass(Planning, Phase)
