# pyright: reportPrivateUsage=false
"""A spend keeps its very cost object when a zero is added (``Spend.add``, the tool
call's spend in ``_execute`` and ``_counted``), against the plain sum (``money_sum``:
``EXACT.add``).

``EXACT.add(was, Decimal(0))`` is spelled as ``was`` (the same sign, digits and exponent)
for a finite ``was`` of exponent 0 or less, not ``-0``, of at most ``EXACT.prec`` digits
and not subnormal, and for an infinity or a quiet NaN; the sum of such a ``was`` with any
zero of exponent 0 or more is then spelled as ``was`` too. ``_budget._zero_added`` finds
that by the plain sum itself (``compare_total``), gives ``was`` back when the sum is
spelled so (exact ``Decimal`` only) and keeps it in ``_budget._kept`` when the zero is
``Decimal(0)``'s spelling; ``Spend.add`` then gives that very object back for any exact
zero of exponent 0 or more without the sum, and a free tool's spend (``_FREE_COST``
added) likewise. These tests check the rule against ``EXACT.add`` over every kind of
``Decimal`` (NaNs, infinities, ``-0``, exponents at and beyond the context's limits,
more digits than it holds, subclasses), each way's result against the plain sum (the
very same value, spelling and class; the same error), that only exact ``Decimal``s are
kept, and that a run's phases share one cost object where the plain way makes new ones
of the same spelling.
"""

from __future__ import annotations

import contextlib
import copy
import decimal
import pickle
from decimal import Decimal
from typing import Any, cast

import anyio
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, ReadCall, Runner, Runtime, _budget, _calling, read_tool
from statemachine._budget import Spend, _spend, _zero_added
from statemachine._money import EXACT, money_sum
from statemachine._tools import _FREE
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class _Dec(Decimal):
    """A Decimal subclass: never kept, never given back (the plain sum is a Decimal)."""


_SIGN = st.integers(0, 1)
_EDGES = (
    EXACT.Emin,
    EXACT.Emin - 1,
    EXACT.Etiny(),
    EXACT.Etiny() - 1,
    EXACT.Emax,
    EXACT.Emax - EXACT.prec + 1,
    decimal.MIN_ETINY,
    -120,
    -99,
    -100,
    -101,
    120,
)
_EXPONENT = st.one_of(st.integers(-30, 30), st.sampled_from(_EDGES))


@st.composite
def _finite(draw: st.DrawFn, *, zero: bool = False, exponent: Any = _EXPONENT) -> Decimal:
    digits: tuple[int, ...]
    if zero:
        digits = (0,)
    else:
        size = draw(st.sampled_from((1, 3, 8, 99, 100, 101, 130)))
        digits = tuple(draw(st.lists(st.integers(0, 9), min_size=1, max_size=size)))
        if draw(st.booleans()):  # as many digits as drawn, the first not a 0
            digits = (draw(st.integers(1, 9)), *digits[1:])
    exp = draw(exponent)
    try:
        made = Decimal((draw(_SIGN), digits, exp))
    except (decimal.InvalidOperation, OverflowError, ValueError):  # beyond a Decimal
        assume(False)
        raise
    return made


_SPECIAL = st.sampled_from(
    tuple(
        Decimal(text)
        for text in ("NaN", "-NaN", "NaN123", "-NaN7", "sNaN", "-sNaN4", "Infinity", "-Infinity")
    )
)
_ZERO = st.one_of(
    _finite(zero=True),
    st.sampled_from(
        tuple(Decimal(text) for text in ("0", "-0", "0.00", "-0.0", "0E+3", "-0E+2", "0E-30"))
    ),
)
_ANY = st.one_of(_finite(), _finite(), _ZERO, _SPECIAL)
_COST = st.one_of(_ANY, _ANY.map(_Dec))
_ADDED = st.one_of(
    _ZERO,
    _ZERO,
    _ZERO.map(_Dec),
    _finite(),
    _SPECIAL,
    st.sampled_from((0, 1, -3, Decimal("0.25"), Decimal(1))),
)


def _exponent(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    return exponent


def _spelled(value: Decimal) -> tuple[Any, ...]:
    return (type(value), value.as_tuple(), repr(value), str(value))


def _rule(was: Decimal) -> bool:
    """The rule, as the comment on ``_budget._kept`` says it."""
    if was.is_infinite() or was.is_qnan():
        return True
    if was.is_snan():
        return False
    sign, digits, exponent = was.as_tuple()
    assert isinstance(exponent, int)
    negative_zero = sign == 1 and not was
    # Below the context's range: a number under Emin, a zero under Etiny (clamped).
    subnormal = was.adjusted() < EXACT.Emin if was else exponent < EXACT.Etiny()
    return exponent <= 0 and not negative_zero and len(digits) <= EXACT.prec and not subnormal


def _plain(was: Any, cost: Any) -> tuple[str, Any]:
    try:
        return "ok", money_sum(was, cost)
    except Exception as error:
        return "raise", (type(error), str(error))


def _spells_itself(was: Decimal, zero: Decimal) -> bool:
    how, total = _plain(was, zero)
    return how == "ok" and _spelled(total) == _spelled(was)


@pytest.fixture(autouse=True)
def _no_kept() -> Any:
    """Each test starts with nothing kept, and leaves it so."""
    _budget._kept = None
    yield
    _budget._kept = None


@settings(max_examples=600)
@given(_ANY)
def test_the_rule_is_the_sum_with_decimal_zero(was: Decimal) -> None:
    assert _spells_itself(was, Decimal(0)) == _rule(was)


@settings(max_examples=600)
@given(_ANY, _finite(zero=True, exponent=st.one_of(st.integers(0, 40), st.sampled_from(_EDGES))))
def test_a_kept_cost_spells_itself_with_any_zero_of_exponent_0_or_more(
    was: Decimal, zero: Decimal
) -> None:
    assume(_exponent(zero) >= 0)
    if _rule(was):
        assert _spells_itself(was, zero)


def _check_zero_added(was: Any, zero: Decimal) -> None:
    kept = _budget._kept
    plain = _plain(was, zero)
    try:
        got: tuple[str, Any] = ("ok", _zero_added(was, zero))
    except Exception as error:
        got = ("raise", (type(error), str(error)))
    assert got[0] == plain[0]
    if plain[0] == "raise":
        assert got[1] == plain[1]
        assert _budget._kept is kept
        return
    assert _spelled(got[1]) == _spelled(plain[1])
    same = type(was) is Decimal and _spelled(plain[1]) == _spelled(was)
    assert (got[1] is was) == same
    if _budget._kept is not kept:  # kept now: only by Decimal(0)'s spelling, by the rule
        assert _budget._kept is was
        assert type(was) is Decimal
        assert zero.as_tuple() == (0, (0,), 0)
        assert _rule(was)
    else:
        assert not (same and zero.as_tuple() == (0, (0,), 0) and was is not kept)


@settings(max_examples=600)
@given(_COST, _ZERO)
def test_zero_added_is_the_plain_sum(was: Any, zero: Decimal) -> None:
    _check_zero_added(was, zero)


def _check_add(spend: Spend, cost: Any, tokens: int, calls: int, models: int) -> None:
    was = spend.cost
    plain = _plain(was, cost)
    try:
        got: tuple[str, Any] = (
            "ok",
            spend.add(tokens=tokens, cost=cost, tool_calls=calls, model_calls=models),
        )
    except Exception as error:
        got = ("raise", (type(error), str(error)))
    assert got[0] == plain[0]
    if plain[0] == "raise":
        assert got[1] == plain[1]
        return
    after = got[1]
    assert type(after) is Spend
    assert (after.tokens, after.tool_calls, after.model_calls) == (
        spend.tokens + tokens,
        spend.tool_calls + calls,
        spend.model_calls + models,
    )
    assert _spelled(after.cost) == _spelled(plain[1])
    if after.cost is was:
        assert type(was) is Decimal
        assert type(cost) is Decimal
        assert not cost


@settings(max_examples=400)
@given(
    st.lists(st.tuples(_COST, _ADDED), min_size=1, max_size=8),
    st.data(),
)
def test_add_is_the_plain_sum_in_any_order(pairs: list[tuple[Any, Any]], data: Any) -> None:
    """Costs and amounts added in turn, again, and crosswise (a kept cost with another
    amount, another cost with a kept one's zero, copies and pickles of a kept cost):
    always the plain sum, down to the spelling and the class."""
    for was, cost in pairs:
        _check_add(_spend(1, was, 2, 3), cost, 4, 5, 6)
        _check_add(_spend(0, was, 0, 0), cost, 0, 0, 0)
    for _ in range(12):
        was = data.draw(st.sampled_from([w for w, _ in pairs]))
        cost = data.draw(st.sampled_from([c for _, c in pairs] + [Decimal(0), Decimal("0.0")]))
        twin = data.draw(st.sampled_from(("same", "copy", "pickle", "kept")))
        if twin == "copy":
            was = copy.copy(Decimal(str(was))) if type(was) is Decimal else was
        elif twin == "pickle":
            was = pickle.loads(pickle.dumps(was))
        elif twin == "kept" and _budget._kept is not None:
            was = _budget._kept
        _check_add(_spend(0, was, 0, 0), cost, 1, 0, 0)


@settings(max_examples=300)
@given(_COST, _ZERO, _ZERO)
def test_add_of_a_kept_cost_is_the_plain_sum(was: Any, first: Decimal, then: Decimal) -> None:
    """``Decimal(0)`` first (keeping ``was`` when the rule says so), then another zero:
    kept or not, the plain sum; the very cost when kept and the zero's exponent is 0 or
    more."""
    _check_add(_spend(0, was, 0, 0), Decimal(0), 0, 0, 1)
    _check_add(_spend(0, was, 0, 0), first, 0, 0, 1)
    _check_add(_spend(0, was, 0, 0), then, 0, 0, 1)
    spend = _spend(0, was, 0, 0)
    if _budget._kept is was and _exponent(then) >= 0:
        assert spend.add(cost=then).cost is was


def test_spellings() -> None:
    zero = Decimal(0)
    cents = _spend(1, Decimal("1.50"), 2, 3)
    same = cents.add(tokens=4, cost=zero, model_calls=1)
    assert same.cost is cents.cost
    assert _budget._kept is cents.cost
    assert (same.tokens, same.tool_calls, same.model_calls) == (5, 2, 4)
    assert same.add(cost=Decimal("-0E+3")).cost is cents.cost
    assert same.add().cost is cents.cost  # the default amount, Decimal(0)
    finer = same.add(cost=Decimal("0.000"))
    assert repr(finer.cost) == "Decimal('1.500')"
    hundred = _spend(0, Decimal("1E+2"), 0, 0)
    assert repr(hundred.add(cost=zero).cost) == "Decimal('100')"
    big = hundred.add(cost=Decimal("0E+5"))
    assert big.cost is hundred.cost  # spelled as it is: given back, not kept
    assert _budget._kept is cents.cost
    assert repr(hundred.add(cost=zero).cost) == "Decimal('100')"
    negative = _spend(0, Decimal("-0"), 0, 0)
    assert negative.add(cost=Decimal("-0")).cost is negative.cost
    assert _budget._kept is cents.cost  # -0 + -0 is -0, but -0 + 0 is 0: not kept
    assert repr(negative.add(cost=zero).cost) == "Decimal('0')"
    sub = _Dec("2.25")
    plain = _spend(0, sub, 0, 0).add(cost=zero)
    assert type(plain.cost) is Decimal
    assert plain.cost is not sub
    wide = Decimal((0, (1,) * 101, 0))
    with pytest.raises(ValueError, match="cannot be computed exactly"):
        _spend(0, wide, 0, 0).add(cost=zero)
    with pytest.raises(ValueError, match="cannot be computed exactly"):
        _spend(0, Decimal("sNaN"), 0, 0).add(cost=zero)
    assert _spend(0, Decimal("1.50"), 0, 0).add(cost=_Dec(0)).cost is not cents.cost
    assert _spend(0, cents.cost, 0, 0).add(cost=cast("Any", 0)).cost is not cents.cost


def _counted_plain(spent: Spend, price: Decimal) -> tuple[str, Any]:
    """``_counted``'s docstring: the spend ``spent.add(tool_calls=1).add(cost=price)``
    spells, made in one sum of the price's ``money_sum(Decimal(0), price)`` (the error
    that sum raises names those two)."""
    try:
        total = money_sum(spent.cost, money_sum(Decimal(0), price))
    except Exception as error:
        return "raise", (type(error), str(error))
    two_steps = spent.add(tool_calls=1).add(cost=price)
    assert _spelled(two_steps.cost) == _spelled(total)
    return "ok", _spend(spent.tokens, total, spent.tool_calls + 1, spent.model_calls)


@settings(max_examples=300)
@given(_COST, st.sampled_from(("free", "zero", "0.00", "priced")), st.booleans(), st.booleans())
def test_counted_is_the_plain_spend(was: Any, price_kind: str, keep: bool, sub: bool) -> None:
    price = {
        "free": _FREE,
        "zero": Decimal(0),
        "0.00": Decimal("0.00"),
        "priced": Decimal("0.25"),
    }[price_kind]
    if keep:  # kept first when the rule says so (the library's own way)
        with contextlib.suppress(ValueError):
            _spend(0, was, 0, 0).add(cost=Decimal(0))
    spent = (_MySpend if sub else Spend).model_construct(tokens=2, cost=was)
    plain = _counted_plain(spent, price)
    try:
        got: tuple[str, Any] = ("ok", _calling._counted(spent, price))
    except Exception as error:
        got = ("raise", (type(error), str(error)))
    assert got[0] == plain[0]
    if plain[0] == "raise":
        assert got[1] == plain[1]
        return
    after, want = got[1], plain[1]
    assert type(after) is type(want)
    assert (after.tokens, after.tool_calls, after.model_calls) == (
        want.tokens,
        want.tool_calls,
        want.model_calls,
    )
    assert _spelled(after.cost) == _spelled(want.cost)
    if after.cost is was:
        assert type(was) is Decimal
        assert not price
    if price is _FREE and type(spent) is Spend and was is _budget._kept and was is not None:
        assert after.cost is was


class _MySpend(Spend):
    pass


class _Args(BaseModel):
    key: str = "k"


async def _look(args: _Args) -> dict[str, str]:
    return {"value": args.key * 2}


def _tool_calling(cost: Decimal) -> tuple[Any, Runtime]:
    agent = Agent[None](name="t", tools=[read_tool(name="look")(_look)], max_steps=10**6)
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate())
    planning = agent.start(None, "go").receive("go")
    call = agent.tools.route("look", '{"key": "ab"}')
    assert type(call) is ReadCall
    calling: Any = planning.call_tool(call, raw_arguments='{"key": "ab"}')
    object.__setattr__(calling, "spent", _spend(3, cost, 1, 2))
    return calling, rt


@pytest.mark.parametrize("text", ["0", "1.50", "1.5", "1E+2", "-0", "-0.00", "0E+3", "12.345"])
@pytest.mark.parametrize("kept", ["none", "this", "a copy", "an equal one", "another"])
def test_execute_keeps_only_the_kept_object(text: str, kept: str) -> None:
    """``_execute``'s free call: the spend's very cost when it is the one kept (kept by
    ``Spend.add``, so only by the rule), the plain sum otherwise (a copy of the kept
    cost, of the same spelling, is summed: a new object; so is a kept one of the same
    value, of another spelling)."""
    cost = Decimal(text)
    if kept == "this":
        _spend(0, cost, 0, 0).add(cost=Decimal(0))
    elif kept == "a copy":
        _spend(0, Decimal(text), 0, 0).add(cost=Decimal(0))
    elif kept == "an equal one":  # the same value, of exponent 0 or below: 100 for 1E+2
        equal = Decimal(int(cost)) if cost == int(cost) else Decimal(f"{cost}0")
        _spend(0, equal, 0, 0).add(cost=Decimal(0))
        assert _budget._kept is equal
    elif kept == "another":
        _spend(0, Decimal("7.25"), 0, 0).add(cost=Decimal(0))
    calling, rt = _tool_calling(cost)
    after: Any = anyio.run(_calling._execute, calling, rt)
    want = _spend(3, cost, 1, 2).add(tool_calls=1).add(cost=_FREE)
    assert after.kind == "Observing"
    assert type(after.spent) is Spend
    assert (after.spent.tokens, after.spent.tool_calls, after.spent.model_calls) == (3, 2, 2)
    assert _spelled(after.spent.cost) == _spelled(want.cost)
    if kept == "this" and _rule(cost):
        assert after.spent.cost is cost
    if after.spent.cost is cost:
        assert _budget._kept is cost


def _run(costs: tuple[str, ...]) -> Any:
    agent = Agent[None](name="t", tools=[read_tool(name="look")(_look)], max_steps=10**6)
    turns = [tool_call("look", {"key": "ab"}, tokens=2, cost=cost) for cost in costs]
    model = ScriptedModel([*turns, reply("done", tokens=1)])
    runner = Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True)
    return anyio.run(lambda: runner.run(None, "go", run_id="run-1"))


def _plain_zero(was: Decimal, zero: Decimal) -> Decimal:
    return money_sum(was, zero)


@pytest.mark.parametrize(
    "costs",
    [("0", "0", "0", "0"), ("0", "0.00", "0"), ("0.10", "0", "0", "0.05", "0"), ("1E+2", "0")],
)
def test_a_run_shares_one_cost_object(monkeypatch: pytest.MonkeyPatch, costs: Any) -> None:
    """A run's phases: the same spends (spelled) as the plain way's, which makes a new
    cost at every step; here one cost object from the first step that adds a zero on,
    until a step adds something."""
    fast = _run(costs)
    _budget._kept = None
    with monkeypatch.context() as patched:  # the plain way: nothing ever kept
        patched.setattr(_budget, "_zero_added", _plain_zero)
        plain = _run(costs)
    assert fast.history == plain.history
    assert len(fast.states) == len(plain.states)
    for one, two in zip(fast.states, plain.states, strict=True):
        assert type(one.spent) is type(two.spent) is Spend
        assert one.spent == two.spent
        assert _spelled(one.spent.cost) == _spelled(two.spent.cost)
    fast_costs = [state.spent.cost for state in fast.states]
    plain_costs = [state.spent.cost for state in plain.states]
    if costs[0] == "0":  # from the first Planning step on: the very start's cost
        start = fast_costs[0]
        kept_until = next(
            (i for i, c in enumerate(fast_costs) if _spelled(c) != _spelled(start)),
            len(fast_costs),
        )
        assert all(cost is start for cost in fast_costs[:kept_until])
        distinct_plain = {id(cost) for cost in plain_costs[:kept_until]}
        assert len(distinct_plain) > 2  # the plain way makes new ones
    assert len({id(cost) for cost in fast_costs}) < len({id(cost) for cost in plain_costs})
