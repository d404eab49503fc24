"""The shortcuts of the governor's checks before an action answer as the plain paths (issue 23).

``before_action`` asks ``Budget.refuse`` only when ``admits_call`` cannot tell that a
``Budget`` itself admits the call; the cycle tier returns at once when the latest action
gained enough; ``call_anchors`` reads a call's arguments with JSON's scanner; and
``action`` hashes with CPython's own SHA-256. Each is checked here against the plain
path: ``refuse`` itself (through a subclass of ``Budget``, which always takes it), the
cycle check as first written, ``json.loads`` and ``hashlib``.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from itertools import compress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from statemachine import (
    ActionRecord,
    Budget,
    Decision,
    LoopGovernor,
    LoopState,
    Spend,
    Verdict,
    _json,
    read_tool,
)
from statemachine._budget import admits_call
from statemachine._governor import CONTINUE, _suppress
from statemachine._similarity import _arguments, _call_arguments, call_anchors, plain_anchors


class PlainBudget(Budget, frozen=True):
    """A ``Budget`` by another class: ``before_action`` always asks its ``refuse``."""


class StingyBudget(Budget, frozen=True):
    """A subclass with a ``refuse`` of its own, which must be asked."""

    def refuse(self, spent: Spend, **kwargs: Any) -> str | None:
        return f"stingy: no {kwargs['action']}"


money = st.decimals(min_value=0, max_value=10**6, places=2, allow_nan=False)
budgets = st.builds(
    Budget,
    tokens=st.none() | st.integers(0, 50),
    cost=st.none() | money,
    tool_calls=st.none() | st.integers(0, 50),
    wall_clock=st.none() | st.floats(0.5, 100.0),
)
spends = st.builds(
    Spend,
    tokens=st.integers(0, 60),
    cost=money,
    tool_calls=st.integers(0, 60),
    model_calls=st.integers(0, 5),
)
elapsed = st.floats(0.0, 120.0)


@settings(max_examples=300, deadline=None)
@given(budgets, spends, elapsed, money)
def testadmits_call_is_refuse_saying_nothing(
    budget: Budget, spent: Spend, seconds: float, price: Decimal
) -> None:
    """A budget admits a call exactly when ``refuse`` has no reason against it."""
    refusal = budget.refuse(
        spent, elapsed=seconds, action="calling search", tool_calls=1, cost=price
    )
    assert admits_call(budget, spent, seconds, price) is (refusal is None)


def testadmits_call_leaves_other_classes_to_refuse() -> None:
    """Only a ``Budget`` itself, a ``Spend`` and a ``Decimal`` price, by exact type."""
    spent, price = Spend(), Decimal(0)
    assert admits_call(Budget(), spent, 0.0, price)
    assert not admits_call(PlainBudget(), spent, 0.0, price)
    assert not admits_call(Budget(), spent, 0.0, 0)
    assert not admits_call(Budget(), Spend.model_construct(), 0.0, 1.5)
    # A NaN elapsed time is left to refuse, which admits it (elapsed >= limit is false).
    limited = Budget(wall_clock=1.0)
    assert not admits_call(limited, spent, float("nan"), price)
    assert limited.refuse(spent, elapsed=float("nan"), action="x", tool_calls=1) is None


def test_a_budget_subclass_refuse_is_asked() -> None:
    """A subclass's own ``refuse`` decides, even where a ``Budget`` would admit the call."""
    governor = LoopGovernor()
    decision = governor.before_action(
        LoopState(), act(governor, "refund 1"), spent=Spend(), budget=StingyBudget(),
        elapsed=0.0, price=Decimal(0),
    )  # fmt: skip
    assert decision == Decision(Verdict.ABORT, "stingy: no calling search", check="budget")


class Args(BaseModel):
    query: str


@read_tool
async def search(args: Args) -> str:
    return args.query


@read_tool
async def fetch(args: Args) -> str:
    return args.query


def act(
    governor: LoopGovernor, text: str, call_id: str = "c-new", tool: Any = search
) -> ActionRecord:
    return governor.action(tool.call({"query": text}), json.dumps({"query": text}), call_id)


def plain_cycle(governor: LoopGovernor, loop: LoopState, action: ActionRecord) -> Decision:
    """The cycle check as first written (every window read, every block compared)."""
    if action.effect == "write":
        return CONTINUE
    window = loop.actions[-(governor.cycle_window - 1) :]
    recent = list(compress(window, (a.outcome != "pending" for a in window)))
    tool = action.tool
    names = [*(a.tool for a in recent), tool]
    for block in range(2, len(names) // 2 + 1):
        if names[-1 - block] != tool:
            continue
        tail_names = names[-2 * block :]
        if tail_names[:block] != tail_names[block:] or len(set(tail_names[:block])) < 2:
            continue
        if all((a.gain or 0.0) < governor.cycle_gain for a in recent[-(block - 1) :]):
            steps = " -> ".join(tail_names[:block])
            message = (
                f"You are repeating the same steps ({steps} -> {steps}) and the last "
                "round found nothing new. Stop repeating them: answer from what you "
                "have, or try something different."
            )
            reason = f"cycle: {steps} repeated twice, last round gained nothing"
            return Decision(Verdict.SUPPRESS, reason, message, "cycle")
    return CONTINUE


GAINS = (None, 0.0, 0.1, 0.19, 0.2, 0.5, 1.0)
steps = st.lists(
    st.tuples(
        st.sampled_from(["search", "fetch"]),
        st.sampled_from(["ok", "ok", "ok", "failed", "pending", "suppressed"]),
        st.sampled_from(GAINS),
    ),
    max_size=70,
)


def grown(governor: LoopGovernor, made: list[tuple[str, str, float | None]]) -> LoopState:
    """A state whose actions are ``made`` (tool, outcome, gain), recorded and settled in turn."""
    loop = LoopState()
    for n, (tool, outcome, gain) in enumerate(made):
        call_id = f"c{n}"
        loop = loop.record(act(governor, f"query {n}", call_id, TOOLS[tool]))
        if outcome in ("ok", "failed"):
            loop = loop.settle(call_id, outcome, f"result {n}", gain)
        elif outcome == "suppressed":
            changed = loop.actions[-1].model_copy(update={"outcome": "suppressed"})
            loop = loop.model_copy(update={"actions": (*loop.actions[:-1], changed)})
    return loop


TOOLS = {"search": search, "fetch": fetch}


@settings(max_examples=300, deadline=None)
@given(steps, st.sampled_from(["search", "fetch"]), st.integers(4, 14), st.sampled_from(GAINS[1:]))
def test_cycle_answers_as_the_plain_check(
    made: list[tuple[str, str, float | None]], tool: str, window: int, gain: float
) -> None:
    """The cycle tier, its early return included, decides as the check as first written."""
    governor = LoopGovernor(cycle_window=window, cycle_gain=gain)
    loop = grown(governor, made)
    action = act(governor, "a new query", "c-new", TOOLS[tool])
    assert governor._cycle(loop, action) == plain_cycle(governor, loop, action)


@read_tool
async def lookup(args: Args) -> str:
    return args.query


TOOLS["lookup"] = lookup
LOW_GAINS = (None, 0.0, 0.0, 0.1, 0.3)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["search", "fetch", "lookup"]),
            st.just("ok"),
            st.sampled_from(LOW_GAINS),
        ),
        max_size=6,
    ),
    st.lists(st.sampled_from(["search", "fetch", "lookup"]), min_size=2, max_size=5),
    st.integers(1, 3),
    st.lists(st.sampled_from(LOW_GAINS), min_size=15, max_size=15),
    st.integers(4, 16),
)
def test_cycle_of_repeated_blocks_as_the_plain_check(
    prefix: list[tuple[str, str, float | None]],
    block: list[str],
    repeats: int,
    gains: list[float | None],
    window: int,
) -> None:
    """Logs that repeat a block of calls, mostly gaining little: cycles of every length
    are found (or not) as the check as first written finds them."""
    governor = LoopGovernor(cycle_window=window, cycle_gain=0.2)
    tools = (block * repeats)[:-1]
    made = [*prefix, *((tool, "ok", gain) for tool, gain in zip(tools, gains, strict=False))]
    loop = grown(governor, made)
    action = act(governor, "again", "c-new", TOOLS[block[-1]])
    assert governor._cycle(loop, action) == plain_cycle(governor, loop, action)


def test_cycle_still_found_after_a_round_that_gained_nothing() -> None:
    """The early return leaves a real cycle to the full check (the test can fail)."""
    governor = LoopGovernor()
    made: list[tuple[str, str, float | None]] = [
        ("search", "ok", 1.0),
        ("fetch", "ok", 0.0),
        ("search", "ok", 0.0),
    ]
    made.append(("fetch", "ok", 0.0))
    loop = grown(governor, made)
    assert governor._cycle(loop, act(governor, "again")).check == "cycle"
    gained = grown(governor, [*made[:-1], ("fetch", "ok", 0.5)])
    assert governor._cycle(gained, act(governor, "again")) is CONTINUE


@settings(max_examples=150, deadline=None)
@given(steps, st.text(max_size=12), budgets, spends, elapsed, money)
def test_before_action_answers_as_the_plain_budget_path(
    made: list[tuple[str, str, float | None]],
    query: str,
    budget: Budget,
    spent: Spend,
    seconds: float,
    price: Decimal,
) -> None:
    """``before_action`` with a ``Budget`` decides as with the same limits in a subclass."""
    governor = LoopGovernor()
    loop = grown(governor, made)
    plain = PlainBudget(**budget.model_dump())
    for action in (act(governor, query), act(governor, "query 3", "c-3")):
        fast = governor.before_action(
            loop, action, spent=spent, budget=budget, elapsed=seconds, price=price
        )
        slow = governor.before_action(
            loop, action, spent=spent, budget=plain, elapsed=seconds, price=price
        )
        assert fast == slow


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)


def spellings(value: Any) -> st.SearchStrategy[str]:
    text = json.dumps(value, separators=(",", ":"))
    return st.sampled_from(
        [text, json.dumps(value), f" {text}", f"{text} ", f"{text}x", f"\ufeff{text}", text[:-1]]
    )


call_texts = st.one_of(
    json_values.flatmap(spellings).map(lambda inner: f"tool({inner})"),
    st.text(max_size=20),
    st.text(max_size=10).map(lambda inner: f"f({inner})"),
)


# Words of digits, letters and the punctuation around tokens, under keys that name a thing
# (compared whole) and keys that do not.
words = st.text(alphabet=" 0123456789aZ@#$.,-+:()\u00e9\u0663", max_size=24)
arguments = st.dictionaries(
    st.sampled_from(["query", "order_id", "email", "note", "sku"]),
    words | st.integers() | st.booleans() | st.none() | st.lists(words, max_size=2),
    max_size=4,
)


@settings(max_examples=400, deadline=None)
@given(arguments)
def test_anchors_of_a_call_as_the_plain_walk(value: dict[str, Any]) -> None:
    """A call's arguments (strings walked in call_anchors' own frame) anchor as the plain
    walk's: identifiers whole, tokens with a digit or an @, numbers one way."""
    text = f"tool({json.dumps(value, separators=(',', ':'), ensure_ascii=False)})"
    assert call_anchors.__wrapped__(text) == plain_anchors(text)


@settings(max_examples=400, deadline=None)
@given(call_texts)
def test_call_arguments_read_as_json_loads(text: str) -> None:
    """The scanner reads what ``json.loads`` reads, and gives the rest to the plain way."""
    assert repr(_call_arguments(text)) == repr(_arguments(text))
    assert call_anchors.__wrapped__(text) == plain_anchors(text)


def test_call_arguments_refused_the_same() -> None:
    """Text that is not one JSON value is the text itself, either way (and NaN is read)."""
    for text in ('f({"a":1}x)', 'f( {"a":1})', "f(\ufeff{})", "f()", "x", "(1)", "f([1,)"):
        assert _call_arguments(text) == _arguments(text)
    assert repr(_call_arguments("f(NaN)")) == "nan"


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30), st.text(max_size=30))
def test_action_hashes_as_hashlib(query: str, raw: str) -> None:
    """The record's exact key and canonical key are hashlib's SHA-256 digests."""
    governor = LoopGovernor()
    call = search.call({"query": query})
    made = governor.action(call, raw, "c-1")
    assert made.exact == hashlib.sha256(f"search\x00{raw}".encode()).hexdigest()
    assert made.key == f"search:{call.args_hash}"


class CityArgs(BaseModel):
    city: str = Field(json_schema_extra={"case_insensitive": True})


@read_tool
async def weather(args: CityArgs) -> str:
    return args.city


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30))
def test_folded_action_hashes_as_hashlib(city: str) -> None:
    """A call with a case-insensitive field: its key hashes the folded arguments so."""
    made = LoopGovernor().action(weather.call({"city": city}), "{}", "c-1")
    folded = _json.canonical({"city": city.casefold()})
    assert made.key == f"weather:{hashlib.sha256(folded.encode()).hexdigest()}"
    assert made.text == f"weather({folded})"


@pytest.mark.parametrize("size", [0, 5, 40])
def test_new_call_passes_every_tier(size: int) -> None:
    """A new call after settled ones continues (every tier asked, none suppressing)."""
    governor = LoopGovernor()
    loop = grown(governor, [("search", "ok", 1.0)] * size)
    decision = governor.before_action(
        loop, act(governor, "a new query 7"), spent=Spend(), budget=Budget(cost=Decimal(5)),
        elapsed=0.0, price=Decimal(1),
    )  # fmt: skip
    assert decision is CONTINUE


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=20), st.text(max_size=20), st.sampled_from(["exact", "cycle", "semantic"]))
def test_suppress_is_the_decision_attrs_makes(reason: str, message: str, check: str) -> None:
    """A suppression made without attrs' __init__ holds the very values it was given."""
    made = _suppress(reason, message, check)
    plain = Decision(Verdict.SUPPRESS, reason, message, check)
    assert type(made) is Decision
    assert made == plain
    assert hash(made) == hash(plain)
    assert made.verdict is Verdict.SUPPRESS
    assert (made.reason, made.message, made.check) == (reason, message, check)
    assert made.reason is reason
    assert made.message is message
    assert made.check is check
