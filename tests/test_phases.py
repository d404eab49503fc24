"""statemachine._phases: single use, approval binding, execution, retries and budgets."""

from __future__ import annotations

import random
import time
import types
import typing
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

import anyio
import anyio.lowlevel
import attrs
import pytest
from support import CityArgs, FlightArgs, exactly

from statemachine import (
    Agent,
    ApprovalMismatchError,
    ApprovalRequest,
    Approve,
    ApprovedCall,
    AwaitApproval,
    Budget,
    Done,
    Failed,
    Idle,
    Message,
    ModelRetrying,
    Observing,
    Phase,
    PhaseReusedError,
    Phases,
    Planning,
    ReadCall,
    Responding,
    Retrying,
    RetryPolicy,
    Runner,
    Runtime,
    SetupError,
    Spend,
    ToolCalling,
    ToolError,
    ToolRequest,
    UnapprovedWriteError,
    WriteCall,
    read_tool,
    write_tool,
)
from statemachine.testing import (
    AutoApproveGate,
    AutoDenyGate,
    ScriptedGate,
    ScriptedModel,
    hand_approval,
    hand_built,
    reply,
    tool_call,
)

pytestmark = pytest.mark.anyio

NOON = datetime(2026, 1, 1, 12, tzinfo=UTC)


@dataclass(frozen=True)
class Trip:
    destination: str


class Calls:
    """What the tools of one test were called with, and what they did after an await."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.finished: list[str] = []


def weather_tool(calls: Calls, *, fails: list[BaseException] | None = None, **options: Any) -> Any:
    """A read tool that raises the queued errors in turn, then answers "sunny"."""
    queued = list(fails or [])

    @read_tool(name="weather", **options)
    async def weather(args: CityArgs) -> dict[str, str]:
        calls.started.append(args.city)
        if queued:
            raise queued.pop(0)
        calls.finished.append(args.city)
        return {"city": args.city, "sky": "sunny"}

    return weather


def slow_weather_tool(calls: Calls, *, timeout: float = 0.02, **options: Any) -> Any:
    """A read tool that takes 5 s, far longer than its timeout."""

    @read_tool(name="weather", timeout=timeout, **options)
    async def weather(args: CityArgs) -> str:
        calls.started.append(args.city)
        try:
            await anyio.sleep(5)
        except anyio.get_cancelled_exc_class():
            calls.cancelled.append(args.city)
            raise
        calls.finished.append(args.city)
        return "sunny"

    return weather


def book_tool(
    calls: Calls, *, slow_attempts: int = 0, timeout: float = 0.02, **options: Any
) -> Any:
    """A write tool whose first ``slow_attempts`` calls outlast its timeout."""

    @write_tool(name="book", timeout=timeout, cost=lambda args: args.price, **options)
    async def book(args: FlightArgs) -> dict[str, Any]:
        calls.started.append(args.flight)
        if len(calls.started) <= slow_attempts:
            try:
                await anyio.sleep(5)
            except anyio.get_cancelled_exc_class():
                calls.cancelled.append(args.flight)
                raise
        calls.finished.append(args.flight)
        return {"flight": args.flight, "charged": args.price}

    return book


def runtime(
    clock: Any = None,
    sleep: Any = None,
    model: Any = None,
    gate: Any = None,
) -> Runtime:
    """A Runtime for driving phases by hand; the clock and sleep are the tests' fakes."""
    return Runtime(
        run_id="run-1",
        model=model or ScriptedModel([]),
        gate=gate or AutoDenyGate(),
        clock=clock or (lambda: 0.0),
        sleep=sleep or AsyncNoSleep(),
        rng=random.Random(0),
    )


class AsyncNoSleep:
    """A sleep that returns at once."""

    async def __call__(self, seconds: float) -> None:
        return None


def planning(agent: Agent[Any], **fields: Any) -> Planning[Any]:
    """A Planning phase of ``agent`` with the customer's question in its transcript."""
    transcript = (Message(role="user", content="Weather in Oslo?"),)
    return hand_built(agent.phases.planning, agent=agent, ctx=None, transcript=transcript, **fields)


def awaiting(agent: Agent[Any], call: WriteCall, **fields: Any) -> AwaitApproval[Any]:
    """An AwaitApproval phase holding ``call``."""
    return hand_built(
        agent.phases.await_approval, agent=agent, ctx=None, call=call, call_id="call-1", **fields
    )


def calling(agent: Agent[Any], call: Any, **fields: Any) -> ToolCalling[Any]:
    """A ToolCalling phase holding ``call``."""
    return hand_built(
        agent.phases.tool_calling, agent=agent, ctx=None, call=call, call_id="call-1", **fields
    )


def approved(agent: Agent[Any], call: WriteCall, **fields: Any) -> ToolCalling[Any]:
    """The ToolCalling phase an approval of ``call`` leads to."""
    waiting = awaiting(agent, call, **fields)
    return waiting.approve(hand_approval(waiting, by="ana", at=NOON))


# --- the graph --------------------------------------------------------------------------


def successors(cls: type[Any]) -> set[type[Any]]:
    """The phase classes named in the return annotation of ``cls.advance``."""
    returned = typing.get_type_hints(cls.advance)["return"]
    union = typing.get_origin(returned) in (typing.Union, types.UnionType)
    members = typing.get_args(returned) if union else (returned,)
    return {typing.get_origin(member) or member for member in members}


GRAPH: dict[type[Any], set[type[Any]]] = {
    Idle: {Planning},
    Planning: {ToolCalling, AwaitApproval, Responding, Planning, ModelRetrying, Failed},
    AwaitApproval: {ToolCalling, Planning, AwaitApproval},
    ToolCalling: {Observing, Retrying, Failed},
    Observing: {Planning},
    Retrying: {ToolCalling, Failed},
    ModelRetrying: {Planning, Failed},
    Responding: {Done},
}


@pytest.mark.parametrize("phase", list(GRAPH), ids=lambda cls: cls.__name__)
def test_each_phase_advance_annotation_names_exactly_its_successors(phase: type[Any]) -> None:
    """The graph read from the return annotations is the one the module docstring draws."""
    assert successors(phase) == GRAPH[phase]


@pytest.mark.parametrize("phase", [Failed, Done], ids=lambda cls: cls.__name__)
def test_terminal_phases_have_no_way_out(phase: type[Any]) -> None:
    """Failed and Done have no advance and no transition methods."""
    assert not hasattr(phase, "advance")
    own = {name for name in vars(phase) if not name.startswith("_") and callable(vars(phase)[name])}
    assert own == set()


# --- single use -------------------------------------------------------------------------


def test_a_second_transition_from_one_phase_object_is_refused() -> None:
    """idle.receive() twice would fork the run; the second call raises PhaseReusedError."""
    idle = Agent[None](name="a").start(None, "hi")
    idle.receive("hi")
    message = (
        "this Idle phase was already left by receive(); calling receive() on it again would "
        "fork the run. Continue from the phase that receive() returned "
        "(state = state.receive(...))."
    )
    with pytest.raises(PhaseReusedError, match=exactly(message)) as caught:
        idle.receive("again")
    assert (caught.value.phase, caught.value.transition, caught.value.first) == (
        "Idle",
        "receive",
        "receive",
    )


def test_a_different_transition_from_a_left_phase_is_refused_too() -> None:
    """After planning.respond(), planning.fail() is refused and names both transitions."""
    phase = planning(Agent[None](name="a"))
    phase.respond("Sunny.")
    message = (
        "this Planning phase was already left by respond(); calling fail() on it again would "
        "fork the run. Continue from the phase that respond() returned "
        "(state = state.respond(...))."
    )
    with pytest.raises(PhaseReusedError, match=exactly(message)):
        phase.fail("too late")


def test_left_tells_whether_a_phase_was_transitioned() -> None:
    """A new phase is not left; after its transition it is, and the new phase is not."""
    idle = Agent[None](name="a").start(None, "hi")
    assert idle.left is False
    nxt = idle.receive("hi")
    assert idle.left is True
    assert nxt.left is False


async def test_advancing_a_planning_phase_twice_asks_the_model_once() -> None:
    """The second advance of one Planning object raises before the model is asked again."""
    model = ScriptedModel([reply("Sunny."), reply("Sunny again.")])
    phase = planning(Agent[None](name="a"))
    rt = runtime(model=model)
    await phase.advance(rt)
    with pytest.raises(
        PhaseReusedError, match=r"^this Planning phase was already left by advance\(\)"
    ):
        await phase.advance(rt)
    assert len(model.requests) == 1


async def test_executing_a_tool_calling_phase_twice_runs_the_tool_once() -> None:
    """The second execute of one ToolCalling object raises before the tool runs again."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[weather_tool(calls)])
    phase = calling(agent, agent.tools.call("weather", {"city": "Oslo"}))
    rt = runtime()
    await phase.execute(rt)
    with pytest.raises(
        PhaseReusedError, match=r"^this ToolCalling phase was already left by execute\(\)"
    ):
        await phase.execute(rt)
    assert calls.started == ["Oslo"]


async def test_a_chain_of_advances_reaches_done() -> None:
    """state = await state.advance(rt) in a loop is the intended use and never trips single use."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[weather_tool(calls)])
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"}), reply("Sunny in Oslo.")])
    rt = runtime(model=model)
    state: Phase[None] = agent.start(None, "Weather in Oslo?")
    seen: list[Phase[None]] = [state]
    while not isinstance(state, Done | Failed):
        assert isinstance(state, Idle | Planning | ToolCalling | Observing | Responding)
        state = await state.advance(rt)
        seen.append(state)
    assert isinstance(state, Done)
    assert state.answer == "Sunny in Oslo."
    assert [phase.step for phase in seen] == list(range(len(seen)))
    assert all(phase.left for phase in seen[:-1])
    assert calls.finished == ["Oslo"]


def test_a_phase_cannot_be_changed_in_place() -> None:
    """Phases are frozen: a transition is the only way to a different state."""
    phase = planning(Agent[None](name="a"))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        phase.step = 7  # type: ignore[misc]


# --- approval ---------------------------------------------------------------------------


def test_approve_returns_tool_calling_with_the_call_bound_to_its_approval() -> None:
    """An approval of this exact call leads to ToolCalling holding an ApprovedCall with it."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls)])
    call = agent.tools.call("book", {"flight": "SK1", "price": "899.90"})
    assert isinstance(call, WriteCall)
    waiting = awaiting(agent, call)
    approval = hand_approval(waiting, by="ana", at=NOON)
    nxt = waiting.approve(approval)
    assert isinstance(nxt, ToolCalling)
    assert isinstance(nxt.call, ApprovedCall)
    assert nxt.call.call is call
    assert nxt.call.approval is approval
    assert nxt.call.approval.approved_by == "ana"
    assert calls.started == []


@pytest.mark.parametrize("other", ["other-arguments", "other-tool"])
def test_an_approval_for_another_call_is_refused(other: str) -> None:
    """An approval of different arguments or a different tool raises and runs nothing."""
    calls = Calls()

    @write_tool
    async def rebook(args: FlightArgs) -> None:
        calls.started.append("rebook")

    agent = Agent[None](name="a", tools=[book_tool(calls), rebook])
    call = agent.tools.call("book", {"flight": "SK1", "price": "899.90"})
    if other == "other-arguments":
        approved_call = agent.tools.call("book", {"flight": "SK1", "price": "8999.00"})
    else:
        approved_call = agent.tools.call("rebook", {"flight": "SK1", "price": "899.90"})
    assert isinstance(call, WriteCall)
    assert isinstance(approved_call, WriteCall)
    phase = awaiting(agent, call)
    message = (
        f"approval refused: it was given for {approved_call.key}, but the call waiting is "
        f"{call.key}. Ask the approver to approve this exact call."
    )
    with pytest.raises(ApprovalMismatchError, match=exactly(message)) as caught:
        phase.approve(hand_approval(awaiting(agent, approved_call), by="mallory", at=NOON))
    assert (caught.value.approved, caught.value.presented) == (approved_call.key, call.key)
    assert phase.left is False
    assert calls.started == []


async def test_a_gate_approving_another_call_sends_the_run_back_to_planning() -> None:
    """A mismatched approval from the gate is a denial: back to Planning, the tool not run."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls)])
    call = agent.tools.call("book", {"flight": "SK1", "price": "899.90"})
    other = agent.tools.call("book", {"flight": "SK1", "price": "8999.00"})
    asked = ApprovalRequest.for_call(other, run_id="r1", agent="a", call_id="call-1")
    gate = ScriptedGate([Approve.of(asked, by="mallory", at=NOON)])
    model = ScriptedModel(
        [tool_call("book", {"flight": "SK1", "price": Decimal("899.90")}), reply("Not booked.")]
    )
    result = await Runner(agent, model=model, gate=gate, keep_states=True).run(
        None, "Book SK1", run_id="r1"
    )
    assert result.history == (
        "Idle",
        "Planning",
        "AwaitApproval",
        "Planning",
        "Responding",
        "Done",
    )
    assert calls.started == []
    told = model.requests[1].messages[-1]
    assert told == Message(
        role="tool",
        content=(
            f"Not approved: {call.describe()} was not run and nothing was charged. "
            "Reason: the approval given was for another call (it was given for arguments "
            f"hash {other.args_hash!r}, and the request is for {call.args_hash!r}), so this "
            "call stays unapproved. Do not call it again unless the customer asks anew."
        ),
        tool_call_id="call-1",
        name="book",
    )


def test_deny_tells_the_model_what_was_not_run_and_why() -> None:
    """deny(reason) goes back to Planning with a tool message naming the call and the reason."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls)])
    call = agent.tools.call("book", {"flight": "SK1", "price": "899.90"})
    assert isinstance(call, WriteCall)
    nxt = awaiting(agent, call).deny("over the travel policy")
    assert type(nxt) is Planning
    assert nxt.transcript[-1] == Message(
        role="tool",
        content=(
            'Not approved: book({"flight":"SK1","price":899.9}) was not run and nothing was '
            "charged. Reason: over the travel policy. Do not call it again unless the customer "
            "asks anew."
        ),
        tool_call_id="call-1",
        name="book",
    )
    assert calls.started == []


def test_the_approval_request_names_the_exact_call() -> None:
    """The person is asked about one call: tool, exact arguments, hash and a readable summary."""
    agent = Agent[None](name="travel", tools=[book_tool(Calls())])
    call = agent.tools.call("book", {"flight": "SK1", "price": "899.90"})
    assert isinstance(call, WriteCall)
    request = awaiting(agent, call).request("run-7")
    assert request.run_id == "run-7"
    assert request.agent == "travel"
    assert request.tool == "book"
    assert request.arguments == {"flight": "SK1", "price": Decimal("899.90")}
    assert request.args_hash == call.args_hash
    assert request.key == call.key
    assert request.summary == 'book({"flight":"SK1","price":899.9})'


# --- writes cannot skip approval at run time --------------------------------------------


def test_tool_calling_refuses_an_unapproved_write_call() -> None:
    """Constructing ToolCalling with a bare WriteCall (mypy bypassed) raises."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls)])
    call = agent.tools.call("book", {"flight": "SK1", "price": "899.90"})
    message = (
        "write tool 'book' may only run after AwaitApproval.approve(); "
        "route write calls through Planning.request_approval()."
    )
    with pytest.raises(UnapprovedWriteError, match=exactly(message)) as caught:
        calling(agent, cast(Any, call))
    assert caught.value.tool == "book"


def test_planning_call_tool_refuses_a_write_call_at_run_time() -> None:
    """planning.call_tool(write_call) (mypy bypassed) raises and leaves the phase usable."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls)])
    call = agent.tools.call("book", {"flight": "SK1", "price": "899.90"})
    phase = planning(agent)
    message = (
        "write tool 'book' may only run after AwaitApproval.approve(); "
        "route write calls through Planning.request_approval()."
    )
    with pytest.raises(UnapprovedWriteError, match=exactly(message)):
        phase.call_tool(cast(Any, call))
    assert phase.left is False
    assert calls.started == []


def test_request_approval_refuses_a_read_call() -> None:
    """A read call has nothing to approve; passing one to request_approval is a SetupError."""
    agent = Agent[None](name="a", tools=[weather_tool(Calls())])
    call = agent.tools.call("weather", {"city": "Oslo"})
    message = "request_approval takes a WriteCall, got ReadCall"
    with pytest.raises(SetupError, match=exactly(message)):
        planning(agent).request_approval(cast(Any, call))


async def test_a_read_call_wrapping_a_write_tool_cannot_run_it() -> None:
    """ReadCall(tool=<write tool>) built by hand must not run the write tool without approval."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls)])
    tool = agent.tools.get("book")
    args = FlightArgs(flight="SK1", price=Decimal("899.90"))

    async def smuggle() -> None:
        smuggled = ReadCall(tool=cast(Any, tool), args=args)
        await planning(agent).call_tool(smuggled).execute(runtime())

    with pytest.raises((SetupError, UnapprovedWriteError)):
        await smuggle()
    assert calls.started == []


# --- execution --------------------------------------------------------------------------


async def test_a_successful_call_goes_to_observing_with_its_output_and_spend() -> None:
    """The tool's result is held by Observing; one tool call and its price are spent."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls)])
    call = agent.tools.call("book", {"flight": "SK1", "price": "899.90"})
    assert isinstance(call, WriteCall)
    nxt = await approved(agent, call, spent=Spend(cost=Decimal("0.10"))).execute(runtime())
    assert isinstance(nxt, Observing)
    assert nxt.output == {"flight": "SK1", "charged": Decimal("899.90")}
    assert nxt.spent == Spend(cost=Decimal("900.00"), tool_calls=1)


def test_observing_shows_the_model_the_output_with_exact_numbers() -> None:
    """observe() adds the output as JSON, a Decimal written as the same JSON number."""
    agent = Agent[None](name="a", tools=[weather_tool(Calls())])
    call = agent.tools.call("weather", {"city": "Oslo"})
    phase = hand_built(
        agent.phases.observing,
        agent=agent,
        ctx=None,
        call=call,
        call_id="call-3",
        output={"price": Decimal("137.30")},
    )
    nxt = phase.observe()
    assert nxt.transcript[-1] == Message(
        role="tool", content='{"price":137.30}', tool_call_id="call-3", name="weather"
    )


def test_the_messages_of_a_tool_call_are_the_models_pydantic_would_make() -> None:
    """The assistant's call and the tool's answer, added on the hot path, dump and
    compare as the same Message built and validated by pydantic."""
    agent = Agent[None](name="a", tools=[weather_tool(Calls())])
    call = agent.tools.call("weather", {"city": "Oslo"})
    nxt = planning(agent).call_tool(call)
    observed = hand_built(
        agent.phases.observing,
        agent=agent,
        ctx=None,
        call=call,
        call_id=nxt.call_id,
        output={"sky": "sunny"},
    ).observe()
    asked, told = nxt.transcript[-1], observed.transcript[-1]
    request = ToolRequest(name="weather", arguments='{"city":"Oslo"}', id=nxt.call_id)
    expected = [
        (asked, Message(role="assistant", tool_calls=(request,))),
        (
            told,
            Message(
                role="tool", content='{"sky":"sunny"}', tool_call_id=nxt.call_id, name="weather"
            ),
        ),
    ]
    for made, validated in expected:
        assert made == validated
        assert made.model_dump_json() == validated.model_dump_json()
        assert Message.model_validate(made.model_dump()) == made


async def test_a_tool_slower_than_its_timeout_is_cancelled_and_retried() -> None:
    """A slow tool is cancelled at its await (later code never runs); the run goes to Retrying."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[slow_weather_tool(calls, timeout=0.02)])
    phase = calling(agent, agent.tools.call("weather", {"city": "Oslo"}))
    with anyio.fail_after(2):
        nxt = await phase.execute(runtime())
    assert isinstance(nxt, Retrying)
    assert (nxt.attempt, nxt.error) == (1, "timed out")
    assert nxt.spent.tool_calls == 1
    assert calls.cancelled == ["Oslo"]
    assert calls.finished == []


async def test_a_tool_that_waits_many_times_within_its_timeout_returns_its_output() -> None:
    """A tool that waits on the event loop again and again gets each answer and finishes."""
    waited: list[int] = []

    @read_tool(name="weather", timeout=5.0)
    async def weather(args: CityArgs) -> dict[str, str]:
        for n in range(3):
            await anyio.lowlevel.checkpoint()
            async with anyio.create_task_group() as group:  # a wait answered by a child task
                group.start_soon(anyio.sleep, 0.001)
            waited.append(n)
        return {"city": args.city, "sky": "sunny"}

    agent = Agent[None](name="a", tools=[weather])
    with anyio.fail_after(2):
        nxt = await calling(agent, agent.tools.call("weather", {"city": "Oslo"})).execute(runtime())
    assert isinstance(nxt, Observing)
    assert nxt.output == {"city": "Oslo", "sky": "sunny"}
    assert waited == [0, 1, 2]


async def test_a_tools_timeout_counts_from_the_call_not_from_its_first_wait() -> None:
    """Work done before a tool's first await uses up its timeout too: 0.08 s of blocking
    plus a 0.06 s wait outlasts a 0.1 s timeout, and the wait is cancelled."""
    calls = Calls()

    @read_tool(name="weather", timeout=0.1)
    async def weather(args: CityArgs) -> str:
        calls.started.append(args.city)
        time.sleep(0.08)  # noqa: ASYNC251 - the point: blocking work before the first await
        try:
            await anyio.sleep(0.06)
        except anyio.get_cancelled_exc_class():
            calls.cancelled.append(args.city)
            raise
        calls.finished.append(args.city)
        return "sunny"

    agent = Agent[None](name="a", tools=[weather])
    with anyio.fail_after(2):
        nxt = await calling(agent, agent.tools.call("weather", {"city": "Oslo"})).execute(runtime())
    assert isinstance(nxt, Retrying)
    assert nxt.error == "timed out"
    assert (calls.cancelled, calls.finished) == (["Oslo"], [])


async def test_a_tool_cancelled_from_outside_is_cancelled_not_timed_out() -> None:
    """A cancellation from an enclosing scope reaches the tool and goes on out of execute."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[slow_weather_tool(calls, timeout=10.0)])
    phase = calling(agent, agent.tools.call("weather", {"city": "Oslo"}))
    with anyio.fail_after(2), anyio.move_on_after(0.02) as outer:
        await phase.execute(runtime())
    assert outer.cancelled_caught
    assert calls.cancelled == ["Oslo"]
    assert calls.finished == []


async def test_a_non_retryable_tool_error_goes_straight_to_failed() -> None:
    """ToolError(retryable=False) fails the run without a Retrying phase."""
    calls = Calls()
    tool = weather_tool(calls, fails=[ToolError("card declined", retryable=False)])
    agent = Agent[None](name="a", tools=[tool])
    nxt = await calling(agent, agent.tools.call("weather", {"city": "Oslo"})).execute(runtime())
    assert isinstance(nxt, Failed)
    assert nxt.reason == "weather failed: ToolError: card declined"
    assert nxt.from_phase == "ToolCalling"
    assert nxt.spent.tool_calls == 1


async def test_a_retryable_tool_error_goes_to_retrying_with_its_description() -> None:
    """ToolError("503 ...") goes to Retrying holding the attempt and the error."""
    tool = weather_tool(Calls(), fails=[ToolError("503 from upstream", status=503)])
    agent = Agent[None](name="a", tools=[tool])
    nxt = await calling(agent, agent.tools.call("weather", {"city": "Oslo"})).execute(runtime())
    assert isinstance(nxt, Retrying)
    assert (nxt.attempt, nxt.error) == (1, "ToolError: 503 from upstream")


async def test_an_unexpected_exception_fails_the_run() -> None:
    """An error the policy does not retry (a ValueError) goes to Failed naming it."""
    tool = weather_tool(Calls(), fails=[ValueError("boom")])
    agent = Agent[None](name="a", tools=[tool])
    nxt = await calling(agent, agent.tools.call("weather", {"city": "Oslo"})).execute(runtime())
    assert isinstance(nxt, Failed)
    assert nxt.reason == "weather failed: ValueError: boom"


async def test_retrying_waits_the_policy_delay_then_calls_again(recording_sleep: Any) -> None:
    """Retrying sleeps the backoff through rt.sleep, then returns ToolCalling for attempt 3."""
    policy = RetryPolicy(max_attempts=3, base_delay=0.5, multiplier=3.0, jitter=0.0)
    agent = Agent[None](name="a", tools=[weather_tool(Calls())], retry=policy)
    call = agent.tools.call("weather", {"city": "Oslo"})
    phase = hand_built(
        agent.phases.retrying,
        agent=agent,
        ctx=None,
        call=call,
        call_id="call-1",
        attempt=2,
        error="timed out",
    )
    nxt = await phase.retry(runtime(sleep=recording_sleep))
    assert isinstance(nxt, ToolCalling)
    assert nxt.attempt == 3
    assert nxt.call is call
    assert recording_sleep.delays == [1.5]


async def test_retrying_fails_once_the_attempts_are_used(recording_sleep: Any) -> None:
    """At the cap, Retrying's only way is Failed, naming the attempts and the last error."""
    agent = Agent[None](name="a", tools=[weather_tool(Calls())], retry=RetryPolicy(max_attempts=3))
    call = agent.tools.call("weather", {"city": "Oslo"})
    phase = hand_built(
        agent.phases.retrying,
        agent=agent,
        ctx=None,
        call=call,
        call_id="call-1",
        attempt=3,
        error="ToolError: 503",
    )
    nxt = await phase.retry(runtime(sleep=recording_sleep))
    assert isinstance(nxt, Failed)
    assert nxt.reason == "weather failed 3 time(s), the cap is 3; last error: ToolError: 503"
    assert recording_sleep.delays == []


async def test_retrying_fails_when_the_backoff_would_outlast_the_wall_clock(
    fake_clock: Any, recording_sleep: Any
) -> None:
    """With 5 s of the wall clock left, an 8 s backoff is not waited: the run fails at once."""
    policy = RetryPolicy(base_delay=8.0, jitter=0.0)
    agent = Agent[None](
        name="a", tools=[weather_tool(Calls())], retry=policy, budget=Budget(wall_clock=60)
    )
    call = agent.tools.call("weather", {"city": "Oslo"})
    rt = runtime(clock=fake_clock, sleep=recording_sleep)
    fake_clock.advance(55.0)
    phase = hand_built(
        agent.phases.retrying,
        agent=agent,
        ctx=None,
        call=call,
        call_id="call-1",
        attempt=1,
        error="timed out",
    )
    nxt = await phase.retry(rt)
    assert isinstance(nxt, Failed)
    assert nxt.reason == (
        "wall-clock budget: 5.00s left, not enough to wait 8.00s and retry weather; "
        "last error: timed out"
    )
    assert recording_sleep.delays == []


async def test_a_write_tool_that_times_out_is_not_retried(recording_sleep: Any) -> None:
    """A non-idempotent write may have charged before timing out, so it is attempted once."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls, slow_attempts=1)])
    model = ScriptedModel([tool_call("book", {"flight": "SK1", "price": Decimal("899.90")})])
    runner = Runner(
        agent, model=model, gate=AutoApproveGate(), sleep=recording_sleep, keep_states=True
    )
    result = await runner.run(None, "Book SK1")
    assert isinstance(result.final, Failed)
    assert result.final.reason == (
        "book failed: timed out; it is a write tool that is not idempotent, so it is not "
        "retried (a second attempt might act twice). Check with its service whether the "
        "first attempt went through."
    )
    # It may have charged: the budget counts its price rather than undercount.
    assert result.final.spent.cost == Decimal("899.90")
    assert calls.started == ["SK1"]
    assert recording_sleep.delays == []


async def test_a_write_tool_with_a_retryable_error_is_not_retried() -> None:
    """Even a retryable ToolError is not retried for a write that is not idempotent."""
    calls = Calls()

    @write_tool
    async def book(args: FlightArgs) -> None:
        calls.started.append(args.flight)
        raise ToolError("503 from the airline")

    agent = Agent[None](name="a", tools=[book])
    model = ScriptedModel([tool_call("book", {"flight": "SK1", "price": Decimal("899.90")})])
    result = await Runner(agent, model=model, gate=AutoApproveGate(), keep_states=True).run(
        None, "Book SK1"
    )
    assert isinstance(result.final, Failed)
    assert calls.started == ["SK1"]


async def test_an_idempotent_write_tool_is_retried(recording_sleep: Any) -> None:
    """A write whose service honours idempotency keys is retried after a timeout, then succeeds."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls, slow_attempts=1, idempotent=True)])
    model = ScriptedModel(
        [tool_call("book", {"flight": "SK1", "price": Decimal("899.90")}), reply("Booked SK1.")]
    )
    runner = Runner(
        agent, model=model, gate=AutoApproveGate(), sleep=recording_sleep, seed=1, keep_states=True
    )
    result = await runner.run(None, "Book SK1")
    assert result.history == (
        "Idle",
        "Planning",
        "AwaitApproval",
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    assert calls.started == ["SK1", "SK1"]
    assert calls.cancelled == ["SK1"]
    assert calls.finished == ["SK1"]
    assert len(recording_sleep.delays) == 1
    assert result.final.spent.cost == Decimal("899.90")


def test_a_retry_policy_on_a_non_idempotent_write_tool_is_a_setup_error() -> None:
    """A write is attempted once unless idempotent=True, so retry= alone is refused up front."""
    with pytest.raises(SetupError) as caught:
        book_tool(Calls(), retry=RetryPolicy(max_attempts=3))
    assert str(caught.value) == (
        "write tool 'book' has a retry policy but is not idempotent; a retried write might "
        "act twice. Declare idempotent=True if its service honours idempotency keys, or "
        "drop retry="
    )


@pytest.mark.parametrize(("tool_attempts", "agent_attempts"), [(5, 2), (1, 4)])
async def test_a_tools_own_retry_policy_beats_the_agents(
    recording_sleep: Any, tool_attempts: int, agent_attempts: int
) -> None:
    """A failing tool is tried as many times as its own policy says, not the agent's."""
    calls = Calls()
    failures: list[BaseException] = [ToolError("503") for _ in range(10)]
    tool = weather_tool(calls, fails=failures, retry=RetryPolicy(max_attempts=tool_attempts))
    agent = Agent[None](name="a", tools=[tool], retry=RetryPolicy(max_attempts=agent_attempts))
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"})])
    result = await Runner(
        agent, model=model, gate=AutoDenyGate(), sleep=recording_sleep, keep_states=True
    ).run(None, "Weather?")
    assert isinstance(result.final, Failed)
    assert result.final.reason == (
        f"weather failed {tool_attempts} time(s), the cap is {tool_attempts}; "
        "last error: ToolError: 503"
    )
    assert len(calls.started) == tool_attempts
    assert len(recording_sleep.delays) == tool_attempts - 1


def test_retry_for_picks_the_tool_policy_then_the_write_rule_then_the_agent_default() -> None:
    """A tool's policy wins; a plain write gets one attempt; otherwise the agent's policy."""
    own = RetryPolicy(max_attempts=7)
    default = RetryPolicy(max_attempts=4)
    calls = Calls()
    reader = weather_tool(calls)
    picky = weather_tool(calls, retry=own)
    plain_write = book_tool(calls)
    idempotent_write = book_tool(calls, idempotent=True)
    agent = Agent[None](name="a", retry=default)
    assert agent.retry_for(reader) is default
    assert agent.retry_for(picky) is own
    assert agent.retry_for(plain_write).max_attempts == 1
    assert agent.retry_for(idempotent_write) is default


# --- budgets ----------------------------------------------------------------------------


async def test_a_call_that_would_cross_the_cost_budget_does_not_run() -> None:
    """ToolCalling checks the price before the call: over budget, the tool is not called."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls)], budget=Budget(cost=Decimal("100")))
    call = agent.tools.call("book", {"flight": "SK1", "price": "60"})
    assert isinstance(call, WriteCall)
    phase = approved(agent, call, spent=Spend(cost=Decimal("50")))
    nxt = await phase.execute(runtime())
    assert isinstance(nxt, Failed)
    assert nxt.reason == (
        "cost budget: calling book would bring the run's cost to $110 of $100 allowed "
        "($50 spent so far)"
    )
    assert calls.started == []
    assert nxt.spent == Spend(cost=Decimal("50"))


async def test_a_write_the_budget_cannot_pay_for_is_never_put_to_a_person() -> None:
    """Planning checks the price first: over budget, the gate is not asked and the tool not run."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[book_tool(calls)], budget=Budget(cost=Decimal("50")))
    gate = AutoApproveGate()
    model = ScriptedModel([tool_call("book", {"flight": "SK1", "price": Decimal("60")})])
    result = await Runner(agent, model=model, gate=gate, keep_states=True).run(None, "Book SK1")
    assert result.history == ("Idle", "Planning", "Failed")
    assert isinstance(result.final, Failed)
    assert result.final.reason == (
        "cost budget: calling book would bring the run's cost to $60 of $50 allowed "
        "($0 spent so far)"
    )
    assert gate.requests == []
    assert calls.started == []


async def test_the_tool_call_budget_stops_the_call_past_it() -> None:
    """With one tool call allowed, the model's second call is refused and never runs."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[weather_tool(calls)], budget=Budget(tool_calls=1))
    model = ScriptedModel(
        [tool_call("weather", {"city": "Oslo"}), tool_call("weather", {"city": "Bergen"})]
    )
    result = await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Weather?"
    )
    assert isinstance(result.final, Failed)
    assert result.final.reason == (
        "tool-call budget: calling weather would make 2 tool calls, 1 allowed"
    )
    assert calls.started == ["Oslo"]


async def test_a_used_up_tool_call_budget_still_lets_the_model_answer() -> None:
    """A model call makes no tool call: after the last allowed tool call the model may answer."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[weather_tool(calls)], budget=Budget(tool_calls=1))
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"}), reply("Sunny in Oslo.")])
    result = await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Weather?"
    )
    assert isinstance(result.final, Done)
    assert result.final.answer == "Sunny in Oslo."
    assert calls.started == ["Oslo"]


async def test_tool_calling_checks_the_tool_call_budget_itself() -> None:
    """A ToolCalling phase past the tool-call budget fails without calling the tool."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[weather_tool(calls)], budget=Budget(tool_calls=1))
    phase = calling(agent, agent.tools.call("weather", {"city": "Oslo"}), spent=Spend(tool_calls=1))
    nxt = await phase.execute(runtime())
    assert isinstance(nxt, Failed)
    assert nxt.reason == "tool-call budget: calling weather would make 2 tool calls, 1 allowed"
    assert calls.started == []


async def test_the_token_budget_stops_the_next_model_call() -> None:
    """A reply that uses the last token lets its tool run, then the next model call is refused."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[weather_tool(calls)], budget=Budget(tokens=10))
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"}, tokens=10), reply("Sunny.")])
    result = await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Weather?"
    )
    assert isinstance(result.final, Failed)
    assert result.final.reason == (
        "token budget: 10 of 10 tokens used, no room for the next model call"
    )
    assert len(model.requests) == 1
    assert calls.finished == ["Oslo"]


class ClockAdvancingModel:
    """A model that answers from a script and moves the fake clock on each call."""

    def __init__(self, clock: Any, seconds: float, turns: list[Any]) -> None:
        self.clock = clock
        self.seconds = seconds
        self.scripted = ScriptedModel(turns)

    async def complete(self, request: Any) -> Any:
        self.clock.advance(self.seconds)
        return await self.scripted.complete(request)


async def test_the_wall_clock_budget_is_measured_with_the_runtime_clock(fake_clock: Any) -> None:
    """Two 40 s model calls on a 60 s budget: the second tool call is refused, nobody slept."""
    calls = Calls()
    agent = Agent[None](name="a", tools=[weather_tool(calls)], budget=Budget(wall_clock=60))
    model = ClockAdvancingModel(
        fake_clock,
        40.0,
        [tool_call("weather", {"city": "Oslo"}), tool_call("weather", {"city": "Bergen"})],
    )
    runner = Runner(agent, model=model, gate=AutoDenyGate(), clock=fake_clock, keep_states=True)
    result = await runner.run(None, "Weather?")
    assert isinstance(result.final, Failed)
    assert result.final.reason == (
        "wall-clock budget exhausted: 80.00s of 60s used before calling weather"
    )
    assert calls.started == ["Oslo"]
    assert model.scripted.requests[0].timeout == 60.0
    assert model.scripted.requests[1].timeout == 20.0


class SlowModel:
    """A model that takes 5 s to answer and records whether it was cancelled."""

    def __init__(self) -> None:
        self.cancelled = False
        self.finished = False

    async def complete(self, request: Any) -> Any:
        try:
            await anyio.sleep(5)
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        self.finished = True
        return reply("late")


async def test_a_model_call_still_running_at_the_deadline_is_cancelled(fake_clock: Any) -> None:
    """With 0.05 s of the wall clock left, a 5 s model call is cancelled and the run fails."""
    agent = Agent[None](name="a", budget=Budget(wall_clock=60))
    model = SlowModel()
    rt = runtime(clock=fake_clock, model=model)
    fake_clock.advance(59.95)
    with anyio.fail_after(2):
        nxt = await planning(agent).advance(rt)
    assert isinstance(nxt, Failed)
    assert nxt.reason == "wall-clock budget: the model did not answer within the 0.05s left"
    assert model.cancelled is True
    assert model.finished is False


async def test_a_tool_call_is_cut_to_the_time_left_on_the_wall_clock(fake_clock: Any) -> None:
    """A tool with a 10 s timeout is cancelled when only 0.05 s of the run is left."""
    calls = Calls()
    agent = Agent[None](
        name="a", tools=[slow_weather_tool(calls, timeout=10.0)], budget=Budget(wall_clock=60)
    )
    rt = runtime(clock=fake_clock)
    fake_clock.advance(59.95)
    with anyio.fail_after(2):
        nxt = await calling(agent, agent.tools.call("weather", {"city": "Oslo"})).execute(rt)
    assert isinstance(nxt, Retrying)
    assert calls.cancelled == ["Oslo"]
    assert calls.finished == []


async def test_a_tool_cancelled_at_the_deadline_fails_the_run_with_a_clear_reason(
    fake_clock: Any,
) -> None:
    """After the deadline cancelled a tool, Retrying sees no time left and the run fails."""
    calls = Calls()
    agent = Agent[None](
        name="a",
        tools=[slow_weather_tool(calls, timeout=10.0)],
        budget=Budget(wall_clock=60),
        retry=RetryPolicy(base_delay=0.5, jitter=0.0),
    )
    rt = runtime(clock=fake_clock)
    fake_clock.advance(59.95)
    with anyio.fail_after(2):
        retrying = await calling(agent, agent.tools.call("weather", {"city": "Oslo"})).execute(rt)
        assert isinstance(retrying, Retrying)
        nxt = await retrying.retry(rt)
    assert isinstance(nxt, Failed)
    assert nxt.reason == (
        "wall-clock budget: 0.05s left, not enough to wait 0.50s and retry weather; "
        "last error: timed out"
    )
    assert calls.started == ["Oslo"]


# --- agent definitions ------------------------------------------------------------------


class TripPlanning(Planning[Trip]):
    """A Planning subclass whose system prompt comes from the context."""

    def instructions(self) -> str:
        return f"Plan a trip to {self.ctx.destination}."


async def test_a_subclassed_planning_phase_is_used_for_every_planning_step() -> None:
    """Phases(planning=TripPlanning) makes every Planning of the run a TripPlanning."""
    agent = Agent[Trip](name="trip", phases=Phases[Trip](planning=TripPlanning))
    model = ScriptedModel([reply("Take the train.")])
    result = await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(
        Trip("Oslo"), "How?"
    )
    assert isinstance(result.states[1], TripPlanning)
    assert model.requests[0].messages[0] == Message(role="system", content="Plan a trip to Oslo.")


def test_phases_refuses_a_class_that_is_not_the_phase() -> None:
    """Phases(planning=Responding) is a SetupError naming the role and the base class."""
    message = f"Phases.planning must be Planning or a subclass of it, got {Responding!r}"
    with pytest.raises(SetupError, match=exactly(message)):
        Phases(planning=cast(Any, Responding))


def test_agent_refuses_two_tools_with_one_name() -> None:
    """The tool list given to an Agent is checked like a ToolRegistry."""
    calls = Calls()
    with pytest.raises(SetupError, match=r"^two tools are named 'weather'"):
        Agent[None](name="a", tools=[weather_tool(calls), weather_tool(calls)])


def test_agent_start_holds_the_input_in_idle() -> None:
    """start() returns Idle at step 0 holding the customer's words and the context."""
    idle = Agent[Trip](name="a").start(Trip("Oslo"), "Weather?")
    assert type(idle) is Idle
    assert (idle.input, idle.ctx, idle.step, idle.spent) == ("Weather?", Trip("Oslo"), 0, Spend())
    planned = idle.receive(idle.input)
    assert planned.transcript == (Message(role="user", content="Weather?"),)
    assert planned.step == 1
