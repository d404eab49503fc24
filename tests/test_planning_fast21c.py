"""``_planning._plan``'s verdict by identity and a reply's usage read in its own frame.

``_plan`` skips the verdict's ``match`` when the governor's verdict is
``Verdict.CONTINUE`` itself, and, asking the model in its own frame, adds a
``ModelReply``'s usage itself when it is a valid ``Usage`` (``_replied``'s first answer),
anything else going through ``_replied``. Pinned: every verdict, as the member and as a
plain text equal to it, ends where the member does; every kind of usage ends where
``_heard``'s path (another clock) ends, its reads counted.
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
from test_planning_fast20e import _agent, _planned

from statemachine import LoopGovernor, ModelReply
from statemachine._budget import Spend
from statemachine._governor import Decision, Verdict
from statemachine._model import ToolRequest, Usage
from statemachine._planning import _replied, _usage_problem
from statemachine.testing import reply


def _ruling(verdict: Any) -> LoopGovernor:
    """A governor that answers ``verdict`` at the start of every step."""

    class _Ruling(LoopGovernor):
        def begin_step(self, loop: Any, **_: Any) -> Decision:
            return Decision(verdict, "ruled")

    return _Ruling()


def _phase_of(made: Any) -> Any:
    """The phase made, and the number of messages of each request the model got."""
    seen, requests = made
    return seen, [len(request["messages"]) for request in requests]


@pytest.mark.parametrize("verdict", list(Verdict))
def test_every_verdict_as_text_ends_where_its_member_ends(verdict: Verdict) -> None:
    """A verdict given as the member and as a ``str`` equal to it (which the identity
    test does not take) make the same phase: the match compares by ``==``."""
    outcomes = []
    for given_as in (verdict, str(verdict.value)):
        governor = _ruling(given_as)
        agent = attrs.evolve(_agent("free", False, False, "", False), governor=governor)
        turn = reply("done")
        outcomes.append(_phase_of(anyio.run(_planned, agent, turn, time.monotonic, 0)))
    member, text = outcomes
    assert member == text
    kinds = {
        Verdict.ABORT: "Failed",
        Verdict.PAUSE: "Planning",
        Verdict.FINALIZE: "Responding",
        Verdict.CONTINUE: "Responding",
        Verdict.SUPPRESS: "Responding",
    }
    assert member[0][0].__name__ == kinds[verdict]
    # Asked with the finalize note (one message more) only when the run must finish.
    asked = {Verdict.ABORT: [], Verdict.PAUSE: [], Verdict.FINALIZE: [2]}
    assert member[1] == asked.get(verdict, [1])


class _Said(ModelReply):
    """A reply of a subclass whose usage reads are counted."""

    reads: Any = None

    def __getattribute__(self, name: str) -> Any:
        if name == "usage":
            counted = object.__getattribute__(self, "__dict__").setdefault("_reads", [])
            counted.append(name)
        return object.__getattribute__(self, name)


class _Usage(Usage):
    """A usage of a subclass: ``_replied``'s refusal."""


class _Fields(dict[str, Any]):
    """A dict subclass set as a usage's ``__dict__``, whose ``get`` answers other values
    than its items (which an attribute read reads)."""

    def get(self, key: str, default: Any = None) -> Any:
        return {"input_tokens": 100, "output_tokens": 100, "cost": Decimal(9)}.get(key)


_COST_VALUES = (
    Decimal(0),
    Decimal("-0"),
    Decimal("0E+3"),
    Decimal("1.5"),
    Decimal("-1"),
    Decimal("NaN"),
    Decimal("sNaN"),
    Decimal("Infinity"),
    Decimal("-Infinity"),
    0,
    1.5,
    "1",
    None,
)
_COSTS = st.sampled_from(_COST_VALUES)
_COUNTS = st.sampled_from([0, 1, 7, -1, True, 2.0, None, "3"])


def _turn(shape: str, inputs: Any, outputs: Any, cost: Any, calls: bool) -> Any:
    values = {"input_tokens": inputs, "output_tokens": outputs, "cost": cost}
    usage: Any
    if shape == "usage":
        usage = Usage.model_construct(**values)
    elif shape == "subclass usage":
        usage = _Usage.model_construct(**values)
    elif shape == "dict subclass":
        usage = Usage.model_construct(**values)
        object.__setattr__(usage, "__dict__", _Fields(values))
    else:
        usage = {"input_tokens": 1}
    tool_calls = (ToolRequest(name="_lookup", arguments='{"key": "a"}'),) if calls else ()
    fields = {"text": "" if calls else "done", "tool_calls": tool_calls, "usage": usage}
    if calls:
        fields["finish_reason"] = "tool_calls"
    if shape == "reply subclass":
        return _Said.model_construct(**{**fields, "usage": Usage.model_construct(**values)})
    return ModelReply.model_construct(**fields)


_SHAPES = ["usage", "subclass usage", "dict subclass", "not a usage", "reply subclass"]


@settings(max_examples=300, deadline=None)
@given(
    shape=st.sampled_from(_SHAPES),
    inputs=_COUNTS,
    outputs=_COUNTS,
    cost=_COSTS,
    calls=st.booleans(),
    budget=st.sampled_from(["free", "limited"]),
)
def test_a_usage_is_added_as_heard_adds_it(
    shape: str, inputs: Any, outputs: Any, cost: Any, calls: bool, budget: str
) -> None:
    """For every kind of usage (valid, negative, not int, bool, not a finite Decimal,
    ``-0``, a subclass, a ``__dict__`` of a dict subclass, not a ``Usage``), in a reply
    of the class itself or of a subclass (its usage read as often), ``_plan`` in its own
    frame makes the phase (or raises the error) ``_heard``'s path does."""
    _both_agree(shape, inputs, outputs, cost, calls, budget)


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("cost", _COST_VALUES)
def test_every_cost_of_a_valid_count_is_added_as_heard_adds_it(shape: str, cost: Any) -> None:
    """The same, for every cost and shape with valid token counts (the cases the usage's
    sum is made of)."""
    _both_agree(shape, 1, 7, cost, True, "free")


def _both_agree(shape: str, inputs: Any, outputs: Any, cost: Any, calls: bool, budget: str) -> None:
    agent = _agent(budget, False, False, "", False)

    async def both() -> tuple[Any, Any, Any, Any]:
        fast_turn = _turn(shape, inputs, outputs, cost, calls)
        plain_turn = _turn(shape, inputs, outputs, cost, calls)
        fast = await _planned(agent, fast_turn, time.monotonic, 0)
        plain = await _planned(agent, plain_turn, lambda: time.monotonic(), 0)
        reads = [turn.__dict__.get("_reads") for turn in (fast_turn, plain_turn)]
        return fast, plain, reads[0], reads[1]

    fast, plain, fast_reads, plain_reads = anyio.run(both)
    # A NaN cost the lying dict lets through is unequal to itself: compared as written.
    assert fast == plain or repr(fast) == repr(plain)
    assert fast_reads == plain_reads


@pytest.mark.parametrize("shape", ["usage", "subclass usage", "dict subclass", "not a usage"])
@pytest.mark.parametrize("cost", _COST_VALUES)
@pytest.mark.parametrize("counts", [(1, 7), (0, 0), (-1, 2), (True, 1)])
def test_replied_adds_what_usage_problem_lets_through(
    shape: str, cost: Any, counts: tuple[Any, Any]
) -> None:
    """``_replied`` (its comparison with a zero made once) answers as ``_usage_problem``
    and the usage's own sum say: the reason it cannot be used, or the spend with it."""
    turn = _turn(shape, *counts, cost, True)
    spent = Spend()

    def replied() -> Any:
        said, added, outcome = _replied(turn, None, spent)
        return said if isinstance(said, str) else said is turn, repr(added), outcome

    def expected() -> Any:
        usage = turn.usage
        problem = _usage_problem(usage)
        if problem is not None:
            return f"the model's reply could not be used: {problem}", repr(spent), None
        return True, repr(spent.add(tokens=usage.tokens, cost=usage.cost, model_calls=1)), None

    assert _outcome(replied) == _outcome(expected)


def _outcome(how: Any) -> Any:
    try:
        return how()
    except Exception as error:  # the error itself is compared
        return "raised", type(error), str(error)
