"""Every tool call of a reply runs or is answered, once, in the model's order (_batch).

A reply with several tool calls is queued whole: reads run, every write waits for its
own approval, a call that is invalid or that the governor suppresses is answered with
the reason, and the model is asked again only when each of its ids has exactly one
tool message. The runner refuses a queue that was tampered with.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agents.travel import FakeProvider, travel_agent
from statemachine import (
    Agent,
    ApprovalRequest,
    Approve,
    AwaitApproval,
    Budget,
    Denial,
    Failed,
    IllegalTransitionError,
    InvalidCall,
    LoopGovernor,
    LoopState,
    MemoryCheckpointer,
    Message,
    ModelReply,
    Money,
    Observing,
    Pending,
    Phases,
    Planning,
    ReadCall,
    Responding,
    Runner,
    Runtime,
    SetupError,
    ToolCalling,
    ToolRequest,
    Usage,
    WriteCall,
    dump_phase,
    dumps,
    load_phase,
    loads,
    read_tool,
    write_tool,
)
from statemachine.testing import ScriptedGate, ScriptedModel, hand_built, reply

DATA = Path(__file__).parent / "data"


class CityArgs(BaseModel):
    city: str


class PayArgs(BaseModel):
    to: str
    amount: Money


class Service:
    """A weather service (read, 0.10 a call) and a payment service (write, its amount)."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.writes: list[tuple[str, Decimal]] = []

    def agent(self, **settings: Any) -> Agent[None]:
        @read_tool(cost=lambda _args: Decimal("0.10"))
        async def weather(args: CityArgs) -> dict[str, str]:
            """The weather in a city."""
            self.reads.append(args.city)
            return {"city": args.city, "sky": f"clear over {args.city}"}

        @write_tool(cost=lambda args: args.amount)
        async def pay(args: PayArgs) -> dict[str, str]:
            """Pay someone."""
            self.writes.append((args.to, args.amount))
            return {"paid": f"{args.amount} to {args.to}"}

        return Agent[None](name="batch", tools=[weather, pay], **settings)


def batch(*calls: tuple[str, dict[str, Any] | str, str]) -> ModelReply:
    """A model turn that asks for several tools at once: (name, arguments, id) each."""
    return ModelReply(
        tool_calls=tuple(
            ToolRequest(
                name=name, arguments=args if isinstance(args, str) else json.dumps(args), id=id_
            )
            for name, args, id_ in calls
        ),
        finish_reason="tool_calls",
        usage=Usage(output_tokens=10),
    )


def unanswered(messages: Sequence[Message]) -> list[str]:
    """What is wrong with the tool messages: each id of an assistant message must have
    exactly one tool message, in the calls' order, before anything else is said."""
    problems: list[str] = []
    for at, message in enumerate(messages):
        if message.role != "assistant" or not message.tool_calls:
            continue
        asked = [call.id for call in message.tool_calls]
        if len(set(asked)) != len(asked):
            problems.append(f"message {at} repeats an id: {asked}")
        told: list[str] = []
        for later in messages[at + 1 :]:
            if later.role != "tool":
                break
            told.append(later.tool_call_id)
        if told != asked:
            problems.append(f"message {at} asked {asked}, answered {told}")
    return problems


def every_request_answered(model: ScriptedModel) -> None:
    for request in model.requests:
        messages = [m for m in request.messages if m.role != "system"]
        assert unanswered(messages) == []
        last = messages[-1]
        assert not (last.role == "assistant" and last.tool_calls)


def tool_ids(messages: Iterable[Message]) -> list[str]:
    return [message.tool_call_id for message in messages if message.role == "tool"]


# --- the example ---------------------------------------------------------------


@pytest.mark.anyio
async def test_two_reads_and_two_writes_answer_all_four_ids_within_budget() -> None:
    """One reply, two reads and two writes: the approved write runs once, the denied one
    never, every id has one tool message in the model's order, and the spend stays
    within the budget."""
    service = Service()
    # Enough for all four: the budget is checked before a person is asked.
    agent = service.agent(budget=Budget(tool_calls=4, cost=Decimal("50.20")))
    model = ScriptedModel(
        [
            batch(
                ("weather", {"city": "Oslo"}, "c-oslo"),
                ("pay", {"to": "ann", "amount": "20.00"}, "c-ann"),
                ("weather", {"city": "Rome"}, "c-rome"),
                ("pay", {"to": "bob", "amount": "30.00"}, "c-bob"),
            ),
            reply("Paid Ann; Bob's payment was not approved."),
        ]
    )
    gate = ScriptedGate([True, False])
    result = await Runner(agent, model=model, gate=gate).run(None, "Weather, and pay both")
    assert result.ok
    assert service.reads == ["Oslo", "Rome"]
    assert service.writes == [("ann", Decimal("20.00"))]
    assert [request.call_id for request in gate.requests] == ["c-ann", "c-bob"]
    assert len(model.requests) == 2  # asked again only once all four were answered
    every_request_answered(model)
    told = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in told] == ["c-oslo", "c-ann", "c-rome", "c-bob"]
    assert told[3].content.startswith("Not approved: pay")
    spent = result.final.spent
    assert (spent.tool_calls, spent.cost) == (3, Decimal("20.20"))
    assert [kind for kind, _ in result.path] == [
        "Idle",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "AwaitApproval",
        "ToolCalling",
        "Observing",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "AwaitApproval",
        "Planning",
        "Responding",
        "Done",
    ]
    # A reply's calls are one tool iteration: the steps that asked for tools.
    assert result.final.loop.tool_iterations == 1


@pytest.mark.anyio
async def test_ten_approved_writes_run_ten_times_each_approved_on_its_own() -> None:
    service = Service()
    calls = [("pay", {"to": f"p{n}", "amount": f"{n}.00"}, f"w{n}") for n in range(1, 11)]
    model = ScriptedModel([batch(*calls), reply("All paid.")])
    gate = ScriptedGate([True] * 10)
    result = await Runner(service.agent(), model=model, gate=gate).run(None, "Pay all ten")
    assert result.ok
    assert service.writes == [(f"p{n}", Decimal(f"{n}.00")) for n in range(1, 11)]
    assert [request.call_id for request in gate.requests] == [f"w{n}" for n in range(1, 11)]
    assert tool_ids(model.requests[1].messages) == [f"w{n}" for n in range(1, 11)]


@pytest.mark.anyio
async def test_a_budget_that_runs_out_mid_reply_stops_before_the_spend() -> None:
    service = Service()
    agent = service.agent(budget=Budget(tool_calls=2))
    model = ScriptedModel([batch(*(("weather", {"city": c}, c) for c in ("Oslo", "Rome", "Lima")))])
    result = await Runner(agent, model=model, gate=ScriptedGate([])).run(None, "Three cities")
    assert result.status == "failed"
    assert service.reads == ["Oslo", "Rome"]
    assert result.final.spent.tool_calls == 2


# --- ids and order ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_models_ids_are_kept_and_missing_or_repeated_ones_are_made() -> None:
    service = Service()
    model = ScriptedModel(
        [
            batch(
                ("weather", {"city": "Oslo"}, ""),
                ("weather", {"city": "Rome"}, "x"),
                ("weather", {"city": "Lima"}, "x"),
                ("weather", {"city": "Kyiv"}, "call-1-4"),
            ),
            batch(("weather", {"city": "Bern"}, "x")),
            reply("Sunny."),
        ]
    )
    result = await Runner(service.agent(), model=model, gate=ScriptedGate([])).run(None, "?")
    assert result.ok
    asked = [m for m in result.final.transcript if m.role == "assistant" and m.tool_calls]
    assert [[call.id for call in m.tool_calls] for m in asked] == [
        ["call-1", "x", "call-1-3", "call-1-4"],
        ["call-13"],  # "x" was a call of this run already
    ]
    assert tool_ids(result.final.transcript) == ["call-1", "x", "call-1-3", "call-1-4", "call-13"]
    every_request_answered(model)


@pytest.mark.anyio
async def test_an_invalid_call_and_a_duplicate_are_answered_where_they_stand() -> None:
    service = Service()
    model = ScriptedModel(
        [
            batch(
                ("weather", {"city": "Oslo"}, "a"),
                ("wether", {"city": "Rome"}, "b"),
                ("weather", {"town": "Rome"}, "c"),
                ("weather", {"city": "Oslo"}, "d"),
                ("pay", {"to": "ann", "amount": "5"}, "e"),
                ("pay", {"to": "ann", "amount": "5.00"}, "f"),
            ),
            reply("Done."),
        ]
    )
    gate = ScriptedGate([True])
    result = await Runner(service.agent(), model=model, gate=gate).run(None, "?")
    assert result.ok
    assert service.reads == ["Oslo"]
    assert service.writes == [("ann", Decimal("5"))]
    assert len(gate.requests) == 1
    told = {m.tool_call_id: m.content for m in model.requests[1].messages if m.role == "tool"}
    assert list(told) == ["a", "b", "c", "d", "e", "f"]
    assert "There is no tool named 'wether'" in told["b"]
    assert "The arguments for weather were not accepted" in told["c"]
    assert told["d"].startswith("You already called weather with these arguments")
    assert "pay changes things, so it will not be done twice" in told["f"]


@pytest.mark.anyio
async def test_a_run_that_must_finish_answers_the_pending_calls_unrun() -> None:
    """The agent's completion signal after the first call: the rest are told, not run."""
    service = Service()
    governor = LoopGovernor(
        completion=lambda loop, _ctx: (
            "enough" if any(a.outcome == "ok" for a in loop.actions) else None
        )
    )
    model = ScriptedModel(
        [
            batch(
                ("weather", {"city": "Oslo"}, "a"),
                ("pay", {"to": "ann", "amount": "5"}, "b"),
                ("weather", {"city": "Rome"}, "c"),
            ),
            reply("Clear over Oslo."),
        ]
    )
    gate = ScriptedGate([])
    runner = Runner(service.agent(governor=governor), model=model, gate=gate)
    result = await runner.run(None, "?")
    assert result.ok
    assert (service.reads, service.writes, gate.requests) == (["Oslo"], [], [])
    told = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in told] == ["a", "b", "c"]
    assert (
        told[1].content == "Not run, and nothing was done: the run is finishing (complete: enough)."
    )
    assert model.requests[1].tools == ()  # the finishing call: an answer, no tools


# --- the transitions by hand -------------------------------------------------------------


def queued(agent: Agent[None], *requests: ToolRequest) -> Planning[None]:
    asking = Message(role="assistant", tool_calls=requests)
    return hand_built(Planning[None], agent=agent, ctx=None, transcript=(asking,), pending=requests)


def test_the_pending_calls_are_taken_in_order_and_an_answer_waits_for_them() -> None:
    agent = Service().agent()
    planning = queued(
        agent,
        ToolRequest(name="weather", arguments='{"city": "Oslo"}', id="a"),
        ToolRequest(name="pay", arguments='{"to": "ann", "amount": "5"}', id="b"),
    )
    routed = planning.next_call()
    assert isinstance(routed, ReadCall)
    assert routed.args == CityArgs(city="Oslo")
    with pytest.raises(SetupError, match=r"respond would leave the model's call\(s\) 'a', 'b'"):
        planning.respond("Hi")
    pay = agent.tools.call("pay", {"to": "ann", "amount": "5"})
    assert isinstance(pay, WriteCall)
    with pytest.raises(SetupError, match="the model's call 'a' of 'weather' is the first pending"):
        planning.request_approval(pay)
    calling = planning.call_tool(routed)
    assert (calling.call_id, calling.pending, calling.transcript) == (
        "a",
        planning.pending[1:],
        planning.transcript,
    )


def test_skip_pending_answers_every_call_and_empties_the_queue() -> None:
    agent = Service().agent()
    planning = queued(
        agent,
        ToolRequest(name="weather", arguments="{}", id="a"),
        ToolRequest(name="nope", arguments="{", id="b"),
    )
    skipped = planning.skip_pending("the person stopped it")
    assert skipped.pending == ()
    assert skipped.transcript[1:] == (
        Message(
            role="tool",
            content="Not run, and nothing was done: the person stopped it.",
            tool_call_id="a",
            name="weather",
        ),
        Message(
            role="tool",
            content="Not run, and nothing was done: the person stopped it.",
            tool_call_id="b",
            name="nope",
        ),
    )
    rejected = queued(agent, ToolRequest(name="nope", arguments="{}", id="z"))
    invalid = rejected.next_call()
    assert isinstance(invalid, InvalidCall)
    again = rejected.reject_call(invalid)
    assert (again.pending, tool_ids(again.transcript), again.invalid_streak) == ((), ["z"], 1)


# --- a run that waits mid-reply, and its checkpoints -----------------------------------


class PendingFirstGate:
    """Answers Pending to every request, recording it."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        self.requests.append(request)
        return Pending()


@pytest.mark.anyio
async def test_a_run_waiting_for_an_approval_mid_reply_resumes_the_rest_of_it() -> None:
    service = Service()
    agent = service.agent()
    store = MemoryCheckpointer()
    model = ScriptedModel(
        [
            batch(
                ("pay", {"to": "ann", "amount": "5"}, "p1"),
                ("weather", {"city": "Oslo"}, "r1"),
                ("pay", {"to": "bob", "amount": "7"}, "p2"),
            ),
            reply("Done."),
        ]
    )
    gate = PendingFirstGate()
    runner = Runner(agent, model=model, gate=gate, checkpointer=store)
    first = await runner.run(None, "?")
    assert first.status == "paused"
    waiting = first.final
    assert isinstance(waiting, AwaitApproval)
    assert [request.id for request in waiting.pending] == ["r1", "p2"]
    decided = Approve.of(gate.requests[0], by="lin")
    second = await runner.resume(first.run_id, decision=decided)
    assert second.status == "paused"  # the second write waits for its own decision
    assert service.writes == [("ann", Decimal("5"))]
    assert service.reads == ["Oslo"]
    waiting = second.final
    assert isinstance(waiting, AwaitApproval)
    assert (waiting.call_id, waiting.pending) == ("p2", ())
    third = await runner.resume(first.run_id, decision=Denial(reason="not bob"))
    assert third.ok
    assert service.writes == [("ann", Decimal("5"))]
    every_request_answered(model)
    assert tool_ids(model.requests[1].messages) == ["p1", "r1", "p2"]


def test_a_phase_with_pending_calls_round_trips_through_its_document() -> None:
    agent = Service().agent()
    planning = queued(
        agent,
        ToolRequest(name="weather", arguments='{"city": "Oslo"}', id="a"),
        ToolRequest(name="pay", arguments='{"to": "ann", "amount": 5.10}', id="b"),
    )
    for phase in (planning, planning.call_tool(agent.tools.call("weather", {"city": "Oslo"}))):  # type: ignore[arg-type]
        document = dump_phase(phase)
        restored = load_phase(loads(dumps(document)), agents={"batch": agent})
        assert restored == phase
        assert restored.pending == phase.pending  # type: ignore[union-attr]


def test_checkpoints_written_before_batches_still_load() -> None:
    """Documents from the code before phases carried a queue: nothing is pending."""
    documents = loads((DATA / "pre-batch-phases.json").read_text())
    agent = travel_agent(FakeProvider())
    assert len(documents) == 10
    for name, document in documents.items():
        phase = load_phase(document, agents={"travel": agent}, run_id="r-old")
        assert phase.kind == name.split(" ")[0]
        assert getattr(phase, "pending", ()) == ()
        again = dump_phase(phase)["fields"]
        assert {name: again[name] for name in document["fields"]} == document["fields"]


# --- the runner's watch over the queue --------------------------------------------------


def forging(forge: Any, on: type[Any]) -> Phases[None]:
    """Phases whose Observing (or Planning) subclass changes the queue of what it returns."""

    class ForgingPlanning(Planning[None]):
        async def advance(
            self, rt: Runtime
        ) -> (
            ToolCalling[None]
            | AwaitApproval[None]
            | Responding[None]
            | Planning[None]
            | Failed[None]
        ):
            after = await super().advance(rt)
            if on is Planning and isinstance(after, ToolCalling):
                object.__setattr__(after, "pending", forge(after.pending))
            return after

    class ForgingObserving(Observing[None]):
        async def advance(self, rt: Runtime) -> Planning[None]:
            after = await super().advance(rt)
            if on is Observing:
                object.__setattr__(after, "pending", forge(after.pending))
            return after

    return Phases[None](planning=ForgingPlanning, observing=ForgingObserving)


WRITE = ToolRequest(name="pay", arguments='{"to": "eve", "amount": "900"}', id="smuggled")


@pytest.mark.parametrize(
    ("forge", "on", "problem"),
    [
        (lambda pending: pending or (WRITE,), Observing, "only Planning queues the calls"),
        (lambda pending: (*pending, WRITE), Observing, "are not those of the phase before"),
        (lambda pending: (WRITE, *pending[1:]), Observing, "are not those of the phase before"),
        (lambda pending: (), Observing, "only Planning takes a pending call"),
        (lambda pending: (object(), *pending), Planning, "a pending call is not a ToolRequest"),
        # The rest of a reply dropped by the advance that queued it: the ids are counted.
        (lambda pending: (), Planning, r"asked for calls \['a', 'b'\], and \['a'\] are"),
    ],
)
@pytest.mark.anyio
async def test_a_forged_queue_is_refused_and_smuggles_no_write(
    forge: Any, on: type[Any], problem: str
) -> None:
    service = Service()
    agent = service.agent(phases=forging(forge, on))
    model = ScriptedModel(
        [batch(("weather", {"city": "Oslo"}, "a"), ("weather", {"city": "Rome"}, "b")), reply(".")]
    )
    gate = ScriptedGate([True, True])
    with pytest.raises(IllegalTransitionError, match=problem):
        await Runner(agent, model=model, gate=gate).run(None, "?")
    assert (service.writes, gate.requests) == ([], [])


# --- any batch -----------------------------------------------------------------------------

CITIES = ("Oslo", "Rome", "Lima")
PAYEES = ("ann", "bob")


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any] | str, str]:
    kind = draw(st.sampled_from(["read", "write", "write", "unknown", "bad", "broken"]))
    call_id = draw(st.sampled_from(["", "a", "b", "c", "call-1", "call-1-2"]))
    if kind == "read":
        return "weather", {"city": draw(st.sampled_from(CITIES))}, call_id
    if kind == "write":
        amount = draw(st.sampled_from(["5", "5.00", "7.5"]))
        return "pay", {"to": draw(st.sampled_from(PAYEES)), "amount": amount}, call_id
    if kind == "unknown":
        return "refund", {"to": "ann"}, call_id
    if kind == "bad":
        return "pay", {"to": "ann", "amount": "a lot"}, call_id
    return "weather", '{"city": ', call_id


@given(
    replies=st.lists(st.lists(calls(), min_size=1, max_size=7), min_size=1, max_size=3),
    decisions=st.lists(st.sampled_from([True, True, False]), max_size=12),
    limit=st.none() | st.integers(min_value=0, max_value=6),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_batch_runs_no_unapproved_write_and_answers_every_id(
    replies: list[list[tuple[str, dict[str, Any] | str, str]]],
    decisions: list[bool],
    limit: int | None,
) -> None:
    service = Service()
    agent = service.agent(budget=Budget(tool_calls=limit), max_invalid_calls=4)
    model = ScriptedModel([*(batch(*calls) for calls in replies), reply("Done.")])
    gate = ScriptedGate([*decisions, *[False] * 30])
    result = anyio.run(Runner(agent, model=model, gate=gate).run, None, "?")
    approved = [
        (request.arguments["to"], request.arguments["amount"])
        for request, yes in zip(gate.requests, gate.decisions, strict=False)
        if yes is True
    ]
    # Each write that ran was approved, once, for exactly its arguments.
    assert len(service.writes) <= len(approved)
    for write in service.writes:
        assert write in approved
        approved.remove(write)
    event(f"writes run: {min(len(service.writes), 2)}+; run {result.status}")
    every_request_answered(model)
    if result.ok:
        assert unanswered(result.final.transcript) == []
    if limit is not None:
        assert result.final.spent.tool_calls <= limit
    assert isinstance(result.final.loop, LoopState)


class LoudRequest(ToolRequest):
    """A model adapter's own kind of request (the queue keeps plain ToolRequests)."""


@pytest.mark.anyio
async def test_a_reply_is_one_tool_iteration_and_any_request_type_is_queued_plainly() -> None:
    service = Service()
    agent = service.agent(max_tool_iterations=1)
    calls = tuple(
        LoudRequest(name="weather", arguments=json.dumps({"city": city}), id=city)
        for city in CITIES
    )
    model = ScriptedModel([ModelReply(tool_calls=calls, finish_reason="tool_calls"), reply("Sun.")])
    result = await Runner(agent, model=model, gate=ScriptedGate([])).run(None, "?")
    assert result.ok
    assert service.reads == list(CITIES)  # the cap counts the reply, not each of its calls
    assert result.final.loop.tool_iterations == 1
    assert model.requests[1].tools == ()  # then the cap is reached: the model must answer
    asked = next(m for m in result.final.transcript if m.tool_calls)
    assert {type(call) for call in asked.tool_calls} == {ToolRequest}
    every_request_answered(model)


def test_a_queued_call_made_without_validation_is_validated_when_queued() -> None:
    """A reply's call made without validation (``model_construct``) is validated as it is
    queued: text that is not ``str`` is refused, and a ``str`` subclass becomes ``str``."""
    import pydantic

    from statemachine._batch import _with_ids
    from statemachine._governor import LoopState

    class Text(str):
        pass

    loop = LoopState()
    made = ToolRequest.model_construct(name=Text("lookup"), arguments='{"q": "a"}', id="c1")
    (queued,) = _with_ids(loop, 1, (made,))
    assert type(queued) is ToolRequest
    assert (type(queued.name), queued.name, queued.id) == (str, "lookup", "c1")
    wrong = ToolRequest.model_construct(name="lookup", arguments={"q": "a"}, id="c2")
    with pytest.raises(pydantic.ValidationError):
        _with_ids(loop, 1, (wrong,))
