"""Answers go through the output guard in the run: four outcomes, retries, verified bytes."""

from __future__ import annotations

import hashlib
from datetime import date
from typing import Any, Literal

import attrs
import pytest
from pydantic import BaseModel, ConfigDict, model_validator
from support import counted, exactly, fallbacks

from statemachine import (
    Agent,
    ConfigError,
    Diagnostic,
    Done,
    Failed,
    ModelReply,
    ModelRetriesExhaustedError,
    ModelUnavailableError,
    OutputGuard,
    OutputTamperedError,
    PhaseForgedError,
    Responding,
    Runner,
    SetupError,
)
from statemachine.testing import AutoDenyGate, ScriptedModel, hand_built, reply

pytestmark = pytest.mark.anyio


def run(agent: Agent[Any], model: ScriptedModel, ctx: Any = None, **options: Any) -> Any:
    return Runner(agent, model=model, gate=AutoDenyGate(), **options, keep_states=True).run(
        ctx, "Help me."
    )


async def test_a_text_answer_is_verified_and_its_hash_recorded() -> None:
    """A plain answer is checked as a CustomerResponse; Done keeps the SHA-256 of its bytes."""
    result = await run(Agent[None](name="a"), ScriptedModel([reply("It is sunny.")]))
    assert isinstance(result.final, Done)
    assert result.final.answer == "It is sunny."
    expected = hashlib.sha256(b'{"text":"It is sunny."}').hexdigest()
    assert result.final.answer_sha256 == expected
    assert result.final.verified.verify() == b'{"text":"It is sunny."}'


async def test_an_empty_answer_is_sent_back_with_feedback_then_accepted() -> None:
    """An empty reply is not shipped: the model is told what was wrong and answers again."""
    model = ScriptedModel([reply("   ", tokens=3), reply("Sunny all week.", tokens=4)])
    result = await run(Agent[None](name="a"), model)
    assert isinstance(result.final, Done)
    assert result.final.answer == "Sunny all week."
    assert len(model.requests) == 2
    note = model.requests[1].messages[-1].content
    assert note.startswith("Your answer was not accepted: ")
    assert note.endswith(
        "(it had 0 characters). Write the whole answer for the customer again, as plain "
        "text of 1 to 4,000 characters."
    )
    assert model.requests[1].tools == ()
    assert result.final.spent.tokens == 7
    assert result.final.spent.model_calls == 2


async def test_an_answer_too_long_every_time_fails_with_the_partial_and_counts_a_fallback() -> None:
    """Three answers over 4,000 characters: a Failed run holding the partial, and one fallback."""
    counter, reader = fallbacks()
    long = "x" * 4001
    model = ScriptedModel([reply(long), reply(long), reply(long)])
    result = await run(Agent[None](name="a"), model, fallbacks=counter)
    assert isinstance(result.final, Failed)
    assert result.final.reason.startswith("answer not accepted after 3 attempt(s): ")
    assert "4000" in result.final.reason
    assert result.final.partial == long
    assert len(model.requests) == 3
    assert counted(reader) == [
        (1, {"statemachine.schema": "CustomerResponse", "statemachine.stop": "attempts"})
    ]


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("refusal", "the model refused to answer: I can't help with that."),
        ("content_filter", "the model refused to answer: I can't help with that."),
        ("length", "the answer was cut off at the token limit"),
    ],
)
async def test_a_refusal_or_a_truncation_is_a_typed_ending_not_an_answer(
    finish: Literal["refusal", "content_filter", "length"], reason: str
) -> None:
    """Refused or cut off, nothing is shipped to the customer: the run fails and says which."""
    cut = ModelReply(text="I can't help with that.", finish_reason=finish)
    result = await run(Agent[None](name="a"), ScriptedModel([cut]))
    assert isinstance(result.final, Failed)
    assert result.final.reason == reason
    assert result.final.partial == "I can't help with that."


class Ticket(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    summary: str
    priority: Literal["low", "normal", "critical"]
    requires_human: bool = False
    due: date


def critical_needs_a_person(ticket: Ticket, deps: Any) -> list[Diagnostic]:
    if ticket.priority == "critical" and not ticket.requires_human:
        return [
            Diagnostic.for_rule(
                "critical_needs_human",
                "a critical ticket must set requires_human",
                path="$.requires_human",
                seen=ticket.requires_human,
                fixes=("set requires_human to true", "lower the priority"),
            )
        ]
    return []


def ticket_agent() -> Agent[None]:
    guard = OutputGuard(Ticket, rules=(critical_needs_a_person,))
    return Agent[None](name="triage", answer_guard=guard)


async def test_a_structured_answer_is_parsed_normalised_and_checked_by_rules() -> None:
    """A fenced JSON answer is repaired, "tomorrow" dated by the run's clock, the rule fixed."""
    first = '{"summary": "Lost parcel", "priority": "critical", "due": "tomorrow"}'
    fixed = (
        '```json\\n{"summary": "Lost parcel", "priority": "critical", '
        '"requires_human": true, "due": "tomorrow"}\\n```'
    )
    model = ScriptedModel([reply(first), reply(fixed)])
    result = await run(ticket_agent(), model, today=lambda: date(2026, 11, 30))
    assert isinstance(result.final, Done)
    ticket = result.final.output
    assert ticket == Ticket(
        summary="Lost parcel", priority="critical", requires_human=True, due=date(2026, 12, 1)
    )
    feedback = model.requests[1].messages[-1].content
    assert "$.requires_human" in feedback
    assert "a critical ticket must set requires_human" in feedback
    assert result.final.answer.encode() == result.final.verified.verify()
    assert result.final.answer_sha256 == hashlib.sha256(result.final.answer.encode()).hexdigest()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.final.verified.value = ticket  # type: ignore[misc]


async def test_a_structured_answer_that_never_passes_fails_with_its_best_attempt() -> None:
    """Exhaustion is an ending with a status and the partial, not an exception."""
    counter, reader = fallbacks()
    bad = '{"summary": "Lost parcel", "priority": "urgent", "due": "2026-12-01"}'
    model = ScriptedModel([reply(bad), reply(bad), reply(bad)])
    result = await run(ticket_agent(), model, fallbacks=counter)
    assert isinstance(result.final, Failed)
    assert result.final.reason.startswith("answer not accepted (exhausted after 3 attempt(s)): ")
    assert "$.priority" in result.final.reason
    assert result.final.partial == bad
    assert [value for value, _ in counted(reader)] == [1]


async def test_a_change_after_validation_cannot_be_shipped() -> None:
    """The text handed over must be the validated bytes: altering either is refused at finish."""
    result = await run(Agent[None](name="a"), ScriptedModel([reply("Refund approved: $40.")]))
    responding = result.states[-2]
    assert isinstance(responding, Responding)
    with pytest.raises(PhaseForgedError):  # another text in a copy: refused at the copy
        attrs.evolve(responding, text="Refund approved: $4000.")
    # The same answer, not yet finished, with its validated bytes changed afterwards.
    tampered = hand_built(
        Responding[None],
        agent=responding.agent,
        ctx=None,
        text=responding.text,
        verified=responding.verified,
    )
    assert tampered.verified is not None
    object.__setattr__(tampered.verified, "data", b'{"text":"Refund approved: $4000."}')
    with pytest.raises(OutputTamperedError):
        tampered.finish()


class Order(BaseModel):
    model_config = ConfigDict(frozen=True)

    order_id: int
    priority: Literal["normal", "critical"] = "normal"
    requires_human: bool = False

    @model_validator(mode="after")
    def critical_needs_a_person(self) -> Order:
        if self.priority == "critical" and not self.requires_human:
            raise ValueError("a critical order requires a human")
        return self


async def test_a_run_whose_context_fails_its_schema_fails_before_it_starts() -> None:
    """A context built without validation is checked when the run starts, naming the field."""
    broken = Order.model_construct(order_id="seventeen", priority="normal")
    model = ScriptedModel([reply("never asked")])
    result = await run(Agent[Order](name="a"), model, ctx=broken)
    assert isinstance(result.final, Failed)
    assert result.history == ("Idle", "Failed")
    assert result.final.reason.startswith(
        "the context failed its schema before Idle started: $.order_id: "
    )
    assert model.requests == []


def test_a_typo_in_the_agents_configuration_fails_at_start_up() -> None:
    """max_step instead of max_steps is refused by name, with the key that was meant."""
    with pytest.raises(ConfigError) as caught:
        Agent[None].from_config({"max_step": 5}, name="support")
    assert caught.value.key == "max_step"
    assert caught.value.suggestion == "max_steps"
    assert str(caught.value).startswith(
        "invalid configuration: $: unknown key 'max_step' (did you mean 'max_steps'?)"
    )


def test_a_configured_agent_takes_every_setting() -> None:
    """Budget, retry and caps come from the mapping, exactly."""
    agent = Agent[None].from_config(
        {
            "instructions": "Be brief.",
            "budget": {"cost": "12.50", "tool_calls": 5},
            "retry": {"max_attempts": 4, "jitter": 0},
            "max_steps": 8,
            "max_tool_iterations": 5,
        },
        name="support",
    )
    assert agent.instructions == "Be brief."
    assert str(agent.budget.cost) == "12.50"
    assert agent.budget.tool_calls == 5
    assert (agent.retry.max_attempts, agent.retry.jitter) == (4, 0)
    assert (agent.max_steps, agent.max_tool_iterations) == (8, 5)


def test_a_float_in_a_configured_budget_is_refused() -> None:
    """Money in configuration is exact too: a float cost fails at start-up."""
    message = (
        "invalid configuration: $.budget.cost: money must be exact, but got the float 12.5; "
        "pass Decimal('12.5') or the string '12.5' (read JSON with statemachine's loads, "
        "which keeps numbers exact). Fix the configuration and start again: nothing was "
        "started with it."
    )
    with pytest.raises(ConfigError, match=exactly(message)):
        Agent[None].from_config({"budget": {"cost": 12.5}}, name="support")


def test_a_constrained_answer_guard_refuses_a_backend_that_cannot_enforce_it() -> None:
    """At start-up, not mid-run: Runner refuses a model that cannot decode to a schema."""
    agent = Agent[None](name="triage", answer_guard=OutputGuard(Ticket, mode="constrained"))
    with pytest.raises(SetupError):
        Runner(agent, model=ScriptedModel([]), gate=AutoDenyGate(), keep_states=True)


async def test_a_constrained_backend_is_sent_the_schema_when_an_answer_is_asked_for() -> None:
    """A re-ask for the answer carries the schema, for the backend to enforce while decoding."""
    guard = OutputGuard(Ticket, mode="constrained")
    agent = Agent[None](name="triage", answer_guard=guard)
    good = '{"summary": "Lost parcel", "priority": "low", "due": "2026-12-01"}'
    model = ScriptedModel([reply('{"summary": "Lost parcel"}'), reply(good)], constrained=True)
    result = await run(agent, model)
    assert isinstance(result.final, Done)
    assert model.requests[0].output_schema is None  # tools were offered: no schema then
    assert model.requests[1].output_schema == guard.output_schema


class Unavailable:
    """A model whose service answers 503."""

    async def complete(self, request: Any) -> ModelReply:
        raise ModelUnavailableError(
            status=503, detail="overloaded", url="http://127.0.0.1:9/v1/chat/completions"
        )


async def test_a_model_service_that_stays_down_leaves_the_run_to_resume_with_its_words() -> None:
    """A 503 on every attempt is retried up to the cap, then raised for a resume later."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    runner = Runner(
        Agent[None](name="a"),
        model=Unavailable(),
        gate=AutoDenyGate(),
        sleep=sleep,
        keep_states=True,
    )
    with pytest.raises(ModelRetriesExhaustedError) as raised:
        await runner.run(None, "Help me.")
    assert raised.value.attempts == raised.value.cap == 4
    assert "HTTP 503: overloaded" in raised.value.error
    assert len(waits) == 3
