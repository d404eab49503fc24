"""A model is not trusted with the run's spend: a reply made without validation
(``model_construct``) whose usage would give budget back (negative counts or cost, a
cost that is not a finite ``Decimal``, something that is not a ``Usage``) is refused by
``Planning.advance`` itself - the run fails with a reason that says what to do, and the
spend is not lowered - whether a ``Runner`` drives the phases or a user does by hand."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from statemachine import Agent, Failed, ModelReply, Runner, Runtime
from statemachine._model import Usage
from statemachine.testing import AutoDenyGate, ScriptedModel, reply

pytestmark = pytest.mark.anyio


class _CountsMore(Usage, frozen=True):
    """A Usage subclass (pydantic lets it be made without validation)."""


def _with_usage(usage: Any) -> ModelReply:
    good = reply("hi")
    return ModelReply.model_construct(**{**good.__dict__, "usage": usage})


def _bad_usages() -> list[Any]:
    construct: Any = Usage.model_construct
    return [
        construct(input_tokens=-1000, output_tokens=0, cost=Decimal(0)),
        construct(input_tokens=0, output_tokens=-1, cost=Decimal(0)),
        construct(input_tokens=1, output_tokens=1, cost=Decimal(-5)),
        construct(input_tokens=1, output_tokens=1, cost=Decimal("NaN")),
        construct(input_tokens=1, output_tokens=1, cost=Decimal("-Infinity")),
        construct(input_tokens=1, output_tokens=1, cost=-0.5),
        construct(input_tokens=1.5, output_tokens=1, cost=Decimal(0)),
        construct(input_tokens=True, output_tokens=1, cost=Decimal(0)),
        _CountsMore.model_construct(input_tokens=-5, output_tokens=0, cost=Decimal(0)),
        {"input_tokens": -5, "output_tokens": 0, "cost": Decimal(0)},
        None,
    ]


@pytest.mark.parametrize("usage", _bad_usages())
async def test_a_runner_fails_the_run_without_lowering_its_spend(usage: Any) -> None:
    agent = Agent[None](name="a")
    result = await Runner(
        agent, model=ScriptedModel([_with_usage(usage)]), gate=AutoDenyGate()
    ).run(None, "hi")
    assert isinstance(result.final, Failed)
    assert "the model's reply could not be used" in result.final.reason
    assert "usage" in result.final.reason
    spent = result.final.spent
    assert (spent.tokens, spent.cost, spent.model_calls) == (0, Decimal(0), 0)


@pytest.mark.parametrize("usage", _bad_usages())
async def test_phases_driven_by_hand_never_lower_the_spend(usage: Any) -> None:
    agent = Agent[None](name="a")
    rt = Runtime(
        run_id="r",
        model=ScriptedModel([_with_usage(usage)]),
        gate=AutoDenyGate(),
        clock=lambda: 0.0,
    )
    planning = agent.start(None, "go").receive("go")
    after = await planning.advance(rt)
    assert isinstance(after, Failed)
    assert after.spent.tokens >= planning.spent.tokens
    assert after.spent.cost >= planning.spent.cost


async def test_a_validated_usage_is_counted() -> None:
    good = ModelReply.model_validate(
        {
            **reply("hi").model_dump(),
            "usage": {"input_tokens": 3, "output_tokens": 4, "cost": "0.25"},
        }
    )
    agent = Agent[None](name="a")
    result = await Runner(agent, model=ScriptedModel([good]), gate=AutoDenyGate()).run(None, "hi")
    spent = result.final.spent
    assert (spent.tokens, spent.cost, spent.model_calls) == (7, Decimal("0.25"), 1)
