"""statemachine._runner: driving a run to Done or Failed, and what the result records."""

from __future__ import annotations

import gc
import itertools
import re
import types
import typing
import weakref
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel
from support import CityArgs, FlightArgs, exactly

from statemachine import (
    Agent,
    Done,
    Failed,
    Message,
    Phase,
    RetryPolicy,
    Runner,
    ScriptExhaustedError,
    Spend,
    ToolError,
    ToolRequest,
    read_tool,
    write_tool,
)
from statemachine.testing import (
    AutoApproveGate,
    AutoDenyGate,
    ScriptedModel,
    reply,
    tool_call,
)

pytestmark = pytest.mark.anyio


class Service:
    """A weather tool and a booking tool that record their calls."""

    def __init__(self, weather_failures: int = 0) -> None:
        self.calls: list[BaseModel] = []
        self.failures = weather_failures

        @read_tool
        async def weather(args: CityArgs) -> dict[str, str]:
            """Today's weather."""
            self.calls.append(args)
            if self.failures:
                self.failures -= 1
                raise ToolError("503 from the weather service", status=503)
            return {"city": args.city, "sky": "sunny"}

        @write_tool(cost=lambda args: args.price)
        async def book(args: FlightArgs) -> str:
            """Book a flight."""
            self.calls.append(args)
            return f"booked {args.flight}"

        self.weather = weather
        self.book = book

    def agent(self, **options: Any) -> Agent[None]:
        return Agent[None](
            name="travel", tools=[self.weather, self.book], instructions="Be brief.", **options
        )


def successors(cls: type[Any]) -> set[type[Any]]:
    """The phase classes named in the return annotation of ``cls.advance``."""
    returned = typing.get_type_hints(cls.advance)["return"]
    union = typing.get_origin(returned) in (typing.Union, types.UnionType)
    members = typing.get_args(returned) if union else (returned,)
    return {typing.get_origin(member) or member for member in members}


def follows_the_graph(states: tuple[Phase[Any], ...]) -> bool:
    """Whether each state is one its predecessor's advance annotation allows."""
    return all(
        any(isinstance(after, allowed) for allowed in successors(type(before)))
        for before, after in itertools.pairwise(states)
    )


# --- a simple run -----------------------------------------------------------------------


async def test_a_read_tool_run_records_its_history_trace_and_spend() -> None:
    """One lookup and an answer: the exact phase sequence, the answer, and what was spent."""
    service = Service()
    model = ScriptedModel(
        [
            tool_call("weather", {"city": "Oslo"}, tokens=12, cost="0.01"),
            reply("Sunny in Oslo.", tokens=5, cost="0.02"),
        ]
    )
    runner = Runner(service.agent(), model=model, gate=AutoDenyGate(), keep_states=True)
    result = await runner.run(None, "Weather in Oslo?", run_id="run-42")
    assert result.ok is True
    assert result.run_id == "run-42"
    assert result.history == (
        "Idle",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    assert result.trace() == (
        "Idle -> Planning -> ToolCalling -> Observing -> Planning -> Responding -> Done"
    )
    assert isinstance(result.final, Done)
    assert result.final.answer == "Sunny in Oslo."
    assert result.final.spent == Spend(tokens=17, cost=Decimal("0.03"), tool_calls=1, model_calls=2)
    assert [state.step for state in result.states] == list(range(7))
    assert service.calls == [CityArgs(city="Oslo")]
    assert follows_the_graph(result.states)


async def test_the_transcript_holds_the_conversation_in_order() -> None:
    """user, assistant tool call, tool result, assistant answer: the run's memory is explicit."""
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"}), reply("Sunny in Oslo.")])
    result = await Runner(Service().agent(), model=model, gate=AutoDenyGate()).run(None, "Oslo?")
    assert result.final.transcript == (
        Message(role="user", content="Oslo?"),
        Message(
            role="assistant",
            tool_calls=(ToolRequest(name="weather", arguments='{"city":"Oslo"}', id="call-1"),),
        ),
        Message(
            role="tool",
            content='{"city":"Oslo","sky":"sunny"}',
            tool_call_id="call-1",
            name="weather",
        ),
        Message(role="assistant", content="Sunny in Oslo."),
    )


async def test_the_model_is_shown_instructions_tools_and_no_deadline_without_a_wall_clock() -> None:
    """The request carries the system prompt, every tool's schema, and timeout None."""
    service = Service()
    model = ScriptedModel([reply("Hello.")])
    await Runner(service.agent(), model=model, gate=AutoDenyGate()).run(None, "Hi")
    (request,) = model.requests
    assert request.messages == (
        Message(role="system", content="Be brief."),
        Message(role="user", content="Hi"),
    )
    assert request.tools == (service.weather.schema(), service.book.schema())
    assert request.timeout is None


async def test_the_models_usage_is_spent_even_when_its_call_is_invalid() -> None:
    """Tokens and cost of every reply count, including a reply whose tool call was refused."""
    model = ScriptedModel(
        [tool_call("fly", {}, tokens=7, cost="0.07"), reply("Sorry.", tokens=3, cost="0.03")]
    )
    result = await Runner(Service().agent(), model=model, gate=AutoDenyGate()).run(None, "Fly")
    assert result.final.spent == Spend(tokens=10, cost=Decimal("0.10"), tool_calls=0, model_calls=2)


async def test_an_approved_write_runs_once_with_exact_arguments() -> None:
    """Approve -> the booking runs once with Decimal("899.90") and its price is spent."""
    service = Service()
    gate = AutoApproveGate()
    model = ScriptedModel(
        [tool_call("book", {"flight": "SK1", "price": Decimal("899.90")}), reply("Booked.")]
    )
    runner = Runner(service.agent(), model=model, gate=gate, keep_states=True)
    result = await runner.run(None, "Book SK1")
    assert result.history == (
        "Idle",
        "Planning",
        "AwaitApproval",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    assert service.calls == [FlightArgs(flight="SK1", price=Decimal("899.90"))]
    assert str(service.calls[0].price) == "899.90"  # type: ignore[attr-defined]
    assert result.final.spent.cost == Decimal("899.90")
    assert [request.tool for request in gate.requests] == ["book"]
    assert follows_the_graph(result.states)


async def test_a_denied_write_never_runs_and_the_model_plans_again() -> None:
    """Deny -> back to Planning; the model answers; the booking never ran."""
    service = Service()
    model = ScriptedModel(
        [tool_call("book", {"flight": "SK1", "price": Decimal("899.90")}), reply("Not booked.")]
    )
    result = await Runner(service.agent(), model=model, gate=AutoDenyGate()).run(None, "Book")
    assert result.history == ("Idle", "Planning", "AwaitApproval", "Planning", "Responding", "Done")
    assert service.calls == []
    assert result.final.spent.cost == Decimal(0)


async def test_a_flaky_tool_is_retried_with_the_runners_sleep(recording_sleep: Any) -> None:
    """Two 503s then success: three attempts, two recorded backoffs, nobody waited."""
    service = Service(weather_failures=2)
    agent = service.agent(retry=RetryPolicy(max_attempts=3, base_delay=0.5, jitter=0.0))
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"}), reply("Sunny.")])
    runner = Runner(agent, model=model, gate=AutoDenyGate(), sleep=recording_sleep)
    result = await runner.run(None, "Oslo?")
    assert result.ok
    assert result.history[2:8] == (
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Observing",
    )
    assert recording_sleep.delays == [0.5, 1.0]
    assert len(service.calls) == 3


async def test_the_same_seed_gives_the_same_jittered_backoff() -> None:
    """seed= makes retry jitter repeatable from one run to the next."""

    async def delays(seed: int) -> list[float]:
        waited: list[float] = []

        async def sleep(seconds: float) -> None:
            waited.append(seconds)

        model = ScriptedModel([tool_call("weather", {"city": "Oslo"}), reply("Sunny.")])
        runner = Runner(
            Service(weather_failures=2).agent(),
            model=model,
            gate=AutoDenyGate(),
            sleep=sleep,
            seed=seed,
        )
        await runner.run(None, "Oslo?")
        return waited

    assert await delays(3) == await delays(3)
    assert len(await delays(3)) == 2


async def test_on_transition_sees_every_transition_in_order() -> None:
    """on_transition is called once per transition with (old phase, new phase)."""
    seen: list[tuple[Phase[None], Phase[None]]] = []
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"}), reply("Sunny.")])
    runner = Runner(
        Service().agent(),
        model=model,
        gate=AutoDenyGate(),
        on_transition=lambda old, new: seen.append((old, new)),
        keep_states=True,
    )
    result = await runner.run(None, "Oslo?")
    assert seen == list(itertools.pairwise(result.states))


async def test_a_run_without_run_id_gets_a_fresh_one() -> None:
    """Each run gets its own hex id when none is given."""
    runner = Runner(
        Service().agent(), model=ScriptedModel([reply("a"), reply("b")]), gate=AutoDenyGate()
    )
    first = await runner.run(None, "Hi")
    second = await runner.run(None, "Hi")
    assert re.fullmatch(r"[0-9a-f]{32}", first.run_id)
    assert first.run_id != second.run_id


def test_run_sync_runs_from_synchronous_code() -> None:
    """run_sync drives the same run without an event loop of the caller's."""
    model = ScriptedModel([reply("Hello.")])
    result = Runner(Service().agent(), model=model, gate=AutoDenyGate()).run_sync(
        None, "Hi", run_id="sync-1"
    )
    assert (result.run_id, result.ok, result.history) == (
        "sync-1",
        True,
        ("Idle", "Planning", "Responding", "Done"),
    )


# --- the scripted model -----------------------------------------------------------------


async def test_a_scripted_model_that_runs_out_says_which_turn_was_missing() -> None:
    """One scripted turn, a second model call: ScriptExhaustedError with the exact message."""
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"})])
    runner = Runner(Service().agent(), model=model, gate=AutoDenyGate())
    message = (
        "the scripted model was asked for turn 2 but its script has only 1; add a turn to the "
        "script or check why the run took an extra step."
    )
    with pytest.raises(ScriptExhaustedError, match=exactly(message)) as caught:
        await runner.run(None, "Oslo?")
    assert caught.value.given == 1


# --- invalid tool calls -----------------------------------------------------------------


async def test_an_invalid_call_is_fed_back_to_the_model() -> None:
    """After an unknown tool, the next request ends with the call and the feedback about it."""
    model = ScriptedModel([tool_call("fly", {"to": "Oslo"}), reply("I cannot fly you.")])
    result = await Runner(Service().agent(), model=model, gate=AutoDenyGate()).run(None, "Fly")
    assert result.history == ("Idle", "Planning", "Planning", "Responding", "Done")
    messages = model.requests[1].messages
    assert messages[-2] == Message(
        role="assistant",
        tool_calls=(ToolRequest(name="fly", arguments='{"to":"Oslo"}', id="call-1"),),
    )
    assert messages[-1] == Message(
        role="tool",
        content=(
            "There is no tool named 'fly'. Call one of: weather, book; or answer without a tool."
        ),
        tool_call_id="call-1",
        name="fly",
    )


async def test_bad_arguments_are_fed_back_naming_the_field() -> None:
    """A call missing a field is answered with feedback naming that field."""
    model = ScriptedModel([tool_call("weather", {"town": "Oslo"}), reply("Sorry.")])
    await Runner(Service().agent(), model=model, gate=AutoDenyGate()).run(None, "Oslo?")
    assert model.requests[1].messages[-1].content == (
        "The arguments for weather were not accepted: city: Field required. "
        "Call weather again with arguments that match its schema."
    )


async def test_the_run_fails_after_max_invalid_calls_in_a_row() -> None:
    """Two invalid calls in a row with max_invalid_calls=2: Failed, the model asked twice."""
    model = ScriptedModel([tool_call("fly", {}), tool_call("sail", {}), reply("unused")])
    agent = Service().agent(max_invalid_calls=2)
    result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "Go")
    assert result.history == ("Idle", "Planning", "Planning", "Failed")
    assert isinstance(result.final, Failed)
    assert (
        result.final.reason
        == "the model sent 2 invalid tool calls in a row; last: unknown tool 'sail'"
    )
    assert len(model.requests) == 2


async def test_a_valid_call_resets_the_invalid_streak() -> None:
    """Invalid, valid, invalid with max_invalid_calls=2 is not two in a row: the run answers."""
    model = ScriptedModel(
        [
            tool_call("fly", {}),
            tool_call("weather", {"city": "Oslo"}),
            tool_call("sail", {}),
            reply("Sunny, and no boats."),
        ]
    )
    agent = Service().agent(max_invalid_calls=2)
    result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "Go")
    assert isinstance(result.final, Done)


# --- the step cap -----------------------------------------------------------------------


async def test_max_steps_stops_a_run_that_keeps_calling_tools() -> None:
    """The last allowed model call is made without tools; a model that still sends none fails."""
    model = ScriptedModel([tool_call("weather", {"city": f"City {n}"}) for n in range(10)])
    agent = Service().agent(max_steps=4)
    result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "Weather?")
    assert isinstance(result.final, Failed)
    assert result.final.reason == (
        "finalize (step cap: this is model call 4 of 4, the last): the model was asked to "
        "answer from what it has and sent no text"
    )
    assert len(model.requests) == 4
    assert [len(request.tools) for request in model.requests] == [2, 2, 2, 0]


async def test_the_last_step_answers_from_what_the_run_has() -> None:
    """At the step cap the model is asked, without tools, to answer; its answer ends the run."""
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"}), reply("Sunny in Oslo.")])
    agent = Service().agent(max_steps=2)
    result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "Weather?")
    assert isinstance(result.final, Done)
    assert result.final.answer == "Sunny in Oslo."
    assert model.requests[1].tools == ()
    assert model.requests[1].messages[-1].content.startswith("Answer the customer now")
    assert [(v.verdict, v.check) for v in result.verdicts] == [("finalize", "step_cap")]
    assert "Planning -[finalize: step_cap]-> Responding" in result.trace()


@pytest.mark.parametrize("cap", [1, 2, 3, 7])
async def test_max_steps_is_never_exceeded(cap: int) -> None:
    """With max_steps=N the model is called exactly N times, never N + 1."""
    model = ScriptedModel([tool_call("weather", {"city": f"City {n}"}) for n in range(10)])
    agent = Service().agent(max_steps=cap)
    result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "Weather?")
    assert isinstance(result.final, Failed)
    assert len(model.requests) == cap
    assert result.final.spent.model_calls == cap


# --- keeping the phases ------------------------------------------------------------------


def _repeating_model() -> ScriptedModel:
    """A lookup, the same lookup again (suppressed: exact duplicate), then an answer."""
    return ScriptedModel(
        [
            tool_call("weather", {"city": "Oslo"}),
            tool_call("weather", {"city": "Oslo"}),
            reply("Sunny in Oslo."),
        ]
    )


async def test_a_runner_keeps_only_the_final_phase_by_default_and_the_same_history() -> None:
    """The default: states holds only the final phase; history, trace, path and the
    final phase are those of a runner that keeps every phase (keep_states=True)."""
    seen: list[weakref.ref[Phase[None]]] = []

    def remember(before: Phase[None], after: Phase[None]) -> None:
        seen.append(weakref.ref(after))

    kept = await Runner(
        Service().agent(), model=_repeating_model(), gate=AutoDenyGate(), keep_states=True
    ).run(None, "Weather in Oslo?")
    lean_runner = Runner(
        Service().agent(), model=_repeating_model(), gate=AutoDenyGate(), on_transition=remember
    )
    lean = await lean_runner.run(None, "Weather in Oslo?")
    assert "-[suppress: exact]->" in kept.trace()
    assert lean.trace() == kept.trace()
    assert lean.history == kept.history
    assert lean.path == kept.path == tuple((s.kind, s.step) for s in kept.states)
    assert lean.states == (lean.final,)
    assert lean.final == kept.final
    assert lean.ok
    # The phases between the first and the last are not held: they can be collected.
    gc.collect()
    alive = [ref() for ref in seen]
    assert alive[-1] is lean.final
    assert all(phase is None for phase in alive[:-1]), [type(p).__name__ for p in alive]


async def test_a_runner_asked_to_keep_every_state_keeps_them() -> None:
    """keep_states=True: every phase stays in states, in order, each the object the run made."""
    made: list[Phase[None]] = []

    def remember(before: Phase[None], after: Phase[None]) -> None:
        made.append(after)

    runner = Runner(
        Service().agent(),
        model=_repeating_model(),
        gate=AutoDenyGate(),
        on_transition=remember,
        keep_states=True,
    )
    result = await runner.run(None, "Weather in Oslo?")
    assert len(result.states) == len(result.path) == len(made) + 1
    assert all(a is b for a, b in zip(result.states[1:], made, strict=True))
