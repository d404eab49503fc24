"""statemachine.testing: the scripted model and the scripted approval gates."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from support import FlightArgs, exactly

from statemachine import (
    ApprovalGate,
    ApprovalRequest,
    Approve,
    Denial,
    Model,
    ModelRequest,
    ScriptExhaustedError,
    ToolRegistry,
    ToolRequest,
    Usage,
    WriteCall,
    write_tool,
)
from statemachine.testing import (
    AutoApproveGate,
    AutoDenyGate,
    ScriptedGate,
    ScriptedModel,
    reply,
    tool_call,
)

pytestmark = pytest.mark.anyio

NEW_YEAR = datetime(2026, 1, 1, tzinfo=UTC)


@write_tool
async def book(args: FlightArgs) -> str:
    """Book a flight."""
    return args.flight


REGISTRY = ToolRegistry([book])


def request_for(flight: str = "SK1", price: str = "899.90") -> ApprovalRequest:
    """The approval request for booking ``flight`` at ``price``."""
    call = REGISTRY.call("book", {"flight": flight, "price": price})
    assert isinstance(call, WriteCall)
    return ApprovalRequest.for_call(call, run_id="run-1", agent="travel")


# --- gates ------------------------------------------------------------------------------


def test_the_shipped_gates_satisfy_the_approval_gate_protocol() -> None:
    """Each gate can be passed wherever an ApprovalGate is expected."""
    for gate in (AutoDenyGate(), AutoApproveGate(), ScriptedGate([])):
        assert isinstance(gate, ApprovalGate)


async def test_auto_deny_gate_denies_every_call_and_records_it() -> None:
    """AutoDenyGate answers a Denial with its reason and remembers each request."""
    gate = AutoDenyGate()
    request = request_for()
    assert await gate.decide(request) == Denial(
        reason="automatic denial: no person approved this call", denied_by="auto-deny"
    )
    assert gate.requests == [request]


async def test_auto_deny_gate_uses_the_reason_it_is_given() -> None:
    """AutoDenyGate(reason) denies with that reason."""
    decision = await AutoDenyGate("over budget").decide(request_for())
    assert decision == Denial(reason="over budget", denied_by="auto-deny")


async def test_auto_approve_gate_says_yes_to_the_call_it_is_asked_about() -> None:
    """AutoApproveGate answers a yes (by and at as given), which the runtime turns into an
    Approval of exactly the request asked; the gate itself makes no Approval."""
    gate = AutoApproveGate()
    request = request_for()
    decision = await gate.decide(request)
    assert decision == Approve(by="test-approver", at=NEW_YEAR)
    assert decision.misfit(request) is None
    assert gate.requests == [request]


async def test_auto_approve_gate_records_who_approved_and_when() -> None:
    """AutoApproveGate(by, at) signs approvals with that person and time."""
    at = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
    decision = await AutoApproveGate(by="ana", at=at).decide(request_for())
    assert isinstance(decision, Approve)
    assert (decision.by, decision.at) == ("ana", at)


async def test_scripted_gate_answers_true_with_an_approval_of_the_exact_call() -> None:
    """True approves the very call asked about: same tool and arguments hash."""
    gate = ScriptedGate([True], by="ana")
    request = request_for()
    decision = await gate.decide(request)
    assert decision == Approve(by="ana", at=NEW_YEAR)


async def test_scripted_gate_answers_false_with_a_denial() -> None:
    """False denies, signed by the gate's person."""
    decision = await ScriptedGate([False]).decide(request_for())
    assert decision == Denial(reason="denied by the script", denied_by="tester")


async def test_scripted_gate_returns_ready_decisions_as_given() -> None:
    """A ready Approve (even one bound to another call) or Denial is returned unchanged."""
    other = Approve.of(request_for(price="8999.00"), by="mallory", at=NEW_YEAR)
    denial = Denial(reason="ask finance", denied_by="bob")
    gate = ScriptedGate([other, denial])
    assert await gate.decide(request_for()) is other
    assert await gate.decide(request_for()) is denial
    assert len(gate.requests) == 2


async def test_scripted_gate_that_runs_out_says_so() -> None:
    """A request past the script raises ScriptExhaustedError with the exact message."""
    gate = ScriptedGate([True])
    await gate.decide(request_for())
    message = (
        "the scripted approval gate was asked for turn 2 but its script has only 1; add a turn "
        "to the script or check why the run took an extra step."
    )
    with pytest.raises(ScriptExhaustedError, match=exactly(message)):
        await gate.decide(request_for())
    assert len(gate.requests) == 1


# --- the scripted model -----------------------------------------------------------------


async def test_scripted_model_replays_its_turns_and_records_each_request() -> None:
    """Each call returns the next turn; every request is kept for the test to inspect."""
    model = ScriptedModel([reply("one"), reply("two")])
    assert isinstance(model, Model)
    first = ModelRequest(messages=())
    second = ModelRequest(messages=(), timeout=3.0)
    assert (await model.complete(first)).text == "one"
    assert (await model.complete(second)).text == "two"
    assert model.requests == [first, second]


async def test_scripted_model_with_an_empty_script_fails_on_the_first_turn() -> None:
    """An empty script raises on the first call, naming turn 1 of 0."""
    message = (
        "the scripted model was asked for turn 1 but its script has only 0; add a turn to the "
        "script or check why the run took an extra step."
    )
    with pytest.raises(ScriptExhaustedError, match=exactly(message)):
        await ScriptedModel([]).complete(ModelRequest(messages=()))


def test_reply_is_a_text_turn_with_its_usage() -> None:
    """reply(text, tokens, cost) is a plain answer; cost is kept as an exact Decimal."""
    turn = reply("Sunny.", tokens=5, cost="0.01")
    assert (turn.text, turn.tool_calls, turn.finish_reason) == ("Sunny.", (), "stop")
    assert turn.usage == Usage(output_tokens=5, cost=Decimal("0.01"))


def test_tool_call_writes_dict_arguments_as_json_with_exact_numbers() -> None:
    """tool_call with a dict writes it as JSON, Decimal as a JSON number; text is kept as is."""
    turn = tool_call("book", {"flight": "SK1", "price": Decimal("899.90")}, tokens=3)
    assert turn.tool_calls == (
        ToolRequest(name="book", arguments='{"flight":"SK1","price":899.90}'),
    )
    assert turn.finish_reason == "tool_calls"
    assert turn.usage.output_tokens == 3
    assert tool_call("book", "not json").tool_calls[0].arguments == "not json"


@pytest.mark.parametrize("make", [reply, tool_call])
def test_turn_helpers_refuse_a_float_cost(make: object) -> None:
    """cost=0.1 would be charged as 0.1000000000000000055...; it is refused like any float money."""
    with pytest.raises(ValueError, match="float"):
        make("x", cost=0.1)  # type: ignore[operator]
