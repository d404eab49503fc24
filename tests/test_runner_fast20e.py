"""Two readings of a transition done once less: the runner's clock, the spend's zero.

- ``Runner._steps`` reads the run's clock at the end of a transition (``_step``'s reading
  of the time it took, unused without instruments) only when the clock is another than
  ``time.monotonic`` itself (a reading of which does nothing): another clock is read as
  often as before, as often as a run whose every transition goes through ``_step``.
- ``Spend.add`` keeps the zero it found (``_budget._zero``, which ``_found_zero`` kept) in
  its own frame: the very object, an exact ``Decimal``, known by identity at the next add.
"""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Budget, ModelReply, ModelRequest, Runner, _budget, read_tool
from statemachine._budget import Spend
from statemachine._money import money_sum
from statemachine._observe import Instruments
from statemachine.testing import AutoDenyGate, reply, tool_call


class _Args(BaseModel):
    key: str


@read_tool
async def _lookup(args: _Args) -> dict[str, str]:
    """Look a key up."""
    return {"key": args.key}


class _Counting:
    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return time.monotonic()


def _script(calls: int) -> list[ModelReply]:
    return [tool_call("_lookup", f'{{"key": "k{n}"}}') for n in range(calls)] + [reply("done")]


class _Turns:
    def __init__(self, turns: list[ModelReply]) -> None:
        self.turns = iter(turns)

    async def complete(self, request: ModelRequest) -> ModelReply:
        return next(self.turns)


@pytest.mark.anyio
@pytest.mark.parametrize("calls", [0, 1, 4])
async def test_another_clock_is_read_twice_a_transition_by_the_runner(
    calls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's loop reads a clock other than ``time.monotonic`` itself at the start
    and at the end of every transition (as ``_step`` does), besides what the phases read:
    the same count of reads as a run whose every transition goes through ``_step``."""
    agent = Agent[None](name="t", tools=[_lookup], budget=Budget(), max_steps=10**6)
    counts = []
    for stepped in (False, True):
        clock = _Counting()
        runner = Runner(agent, model=_Turns(_script(calls)), gate=AutoDenyGate(), clock=clock)
        if stepped:  # every transition through _step: instruments that record
            monkeypatch.setattr(Instruments, "quiet", lambda self: False)
        result = await runner.run(None, "go", run_id="r")
        assert result.status == "done"
        counts.append(clock.reads)
    assert counts[0] == counts[1]


# --- the zero Spend.add keeps ----------------------------------------------------------------


@given(
    cost=st.sampled_from(["0", "1.5", "12.25", "100"]),
    zero=st.sampled_from(["0", "0E+1", "0E+5", "0.0", "-0"]),
    tokens=st.integers(0, 10**6),
)
def test_add_keeps_the_zero_it_found(cost: str, zero: str, tokens: int) -> None:
    """A fresh exact zero of exponent 0 or more added to the kept cost is kept itself
    (``_budget._zero``), and the next add of that very object gives the same spend; any
    other zero is not kept, and every sum is the one ``money_sum`` spells."""
    kept, held = _budget._kept, _budget._zero
    try:
        was = Decimal(cost)
        _budget._kept = was
        spend = Spend.model_construct(cost=was)
        fresh = Decimal(zero)
        before = _budget._zero
        first = spend.add(tokens=tokens, cost=fresh, model_calls=1)
        plain = money_sum(was, fresh)
        assert str(first.cost) == str(plain)
        takes = fresh.adjusted() >= 0
        assert (_budget._zero is fresh) == takes
        if not takes:
            assert _budget._zero is before
        again = spend.add(tokens=tokens, cost=fresh, model_calls=1)
        assert (again.tokens, str(again.cost), again.tool_calls, again.model_calls) == (
            first.tokens,
            str(first.cost),
            first.tool_calls,
            first.model_calls,
        )
        assert type(_budget._zero) is Decimal
    finally:
        _budget._kept, _budget._zero = kept, held
