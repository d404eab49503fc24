"""statemachine._governor: the loop governor's verdicts, as a run and as units.

Most tests drive a whole run (Runner + ScriptedModel + a gate) and assert what the
model was told, which tools really ran, and the verdicts in the run's history.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Literal

import anyio
import anyio.lowlevel
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field
from support import CityArgs, FlightArgs, exactly

from statemachine import (
    ActionRecord,
    Agent,
    Budget,
    Decision,
    Done,
    Failed,
    LoopGovernor,
    LoopState,
    Message,
    Money,
    Planning,
    ReadCall,
    Runner,
    RunPausedError,
    SetupError,
    Spend,
    ToolRegistry,
    Verdict,
    WriteCall,
    dump_phase,
    lexical_similarity,
    load_phase,
    read_tool,
    write_tool,
)
from statemachine._actions import ActionLog
from statemachine._grams import _NARROW_BITS, _TRIGRAMS_KEPT, GramMasks
from statemachine._json import canonical, canonical_hash
from statemachine._similarity import _fold, call_anchors
from statemachine.testing import AutoApproveGate, AutoDenyGate, ScriptedGate, ScriptedModel, reply
from statemachine.testing import tool_call as call

pytestmark = pytest.mark.anyio

FINALIZE_NOTE = (
    "Answer the customer now, from what you already have. Do not call tools. "
    "(The run is finishing: {}.)"
)
SKIES = {
    "Oslo": "sunny",
    "Bergen": "pouring rain all afternoon",
    "Lima": "grey overcast sea mist",
    "Tokyo": "typhoon warning in effect",
    "Nairobi": "hot and dry savanna wind",
    "Quito": "thunderstorms over the andes",
}


class ForecastArgs(BaseModel):
    """A city whose letter case does not matter."""

    city: str = Field(json_schema_extra={"case_insensitive": True})


class StockArgs(BaseModel):
    """An item and how many of it."""

    sku: str
    quantity: int


class OrderArgs(BaseModel):
    """An order number."""

    order: str


class SearchArgs(BaseModel):
    """A search query."""

    query: str


class RefundArgs(BaseModel):
    """A refund of an order."""

    order: str
    amount: Money
    reason: str = ""


class Shop:
    """Read and write tools that record every real call, by tool name."""

    def __init__(self, answers: Callable[[str], str] = lambda query: "nothing found") -> None:
        self.calls: list[tuple[str, BaseModel]] = []

        @read_tool
        async def weather(args: CityArgs) -> dict[str, str]:
            """Today's weather; the city's case is kept as sent."""
            self.calls.append(("weather", args))
            await anyio.lowlevel.checkpoint()  # let a parallel run interleave
            return {"city": args.city, "sky": SKIES.get(args.city, "no report")}

        @read_tool
        async def forecast(args: ForecastArgs) -> dict[str, str]:
            """Tomorrow's weather; the city's case does not matter."""
            self.calls.append(("forecast", args))
            return {"city": args.city.title(), "sky": "sunny"}

        @read_tool
        async def stock(args: StockArgs) -> dict[str, Any]:
            """Whether an item is in stock."""
            self.calls.append(("stock", args))
            return {"sku": args.sku, "quantity": args.quantity, "available": True}

        @read_tool
        async def lookup_order(args: OrderArgs) -> dict[str, Any] | str:
            """An order's status."""
            self.calls.append(("lookup_order", args))
            if args.order != "A-1001":
                return "no such order"
            return {"order": "A-1001", "status": "delivered", "total": Decimal("25.00")}

        @read_tool
        async def search(args: SearchArgs) -> str:
            """The shop's help pages."""
            self.calls.append(("search", args))
            return answers(args.query)

        @write_tool(cost=lambda args: args.amount)
        async def refund(args: RefundArgs) -> str:
            """Pay money back to the customer."""
            self.calls.append(("refund", args))
            return f"refunded {args.amount} on {args.order}"

        @write_tool(cost=lambda args: args.price)
        async def book(args: FlightArgs) -> str:
            """Book a flight."""
            self.calls.append(("book", args))
            return f"booked {args.flight}"

        self.tools = (weather, forecast, stock, lookup_order, search, refund, book)

    def ran(self, tool: str) -> list[Any]:
        """The arguments of every real call of ``tool``, in order."""
        return [args for name, args in self.calls if name == tool]

    def agent(self, **options: Any) -> Agent[Any]:
        return Agent[Any](name="support", tools=self.tools, **options)


def told(model: ScriptedModel, turn: int) -> str:
    """The last message the model was shown before ``turn`` (1-based): what it was told."""
    return model.requests[turn - 1].messages[-1].content


def verdicts(result: Any) -> list[tuple[str, str, str]]:
    """(hook, verdict, check) of every verdict other than continue."""
    return [(v.hook, v.verdict.value, v.check) for v in result.verdicts]


def unit_call(tool_name: str, raw: str) -> ReadCall | WriteCall:
    """A call routed from raw JSON, as the runner routes what the model sent."""
    routed = ToolRegistry(Shop().tools).route(tool_name, raw)
    assert isinstance(routed, ReadCall | WriteCall)
    return routed


def settled(
    governor: LoopGovernor,
    raw: str,
    *,
    tool_name: str = "weather",
    outcome: Literal["ok", "failed", "refused"] = "ok",
) -> LoopState:
    """A loop state holding one settled call of ``tool_name`` with ``raw`` arguments."""
    action = governor.action(unit_call(tool_name, raw), raw, "call-1")
    return LoopState().record(action).settle("call-1", outcome, "the result")


def ask(
    governor: LoopGovernor, loop: LoopState, raw: str, *, tool_name: str = "weather"
) -> Decision:
    """The governor's before_action verdict on a call of ``tool_name`` with ``raw``."""
    action = governor.action(unit_call(tool_name, raw), raw, "call-9")
    return governor.before_action(
        loop, action, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
    )


# --- exact --------------------------------------------------------------------------------


async def test_an_exact_repeat_is_suppressed_and_the_model_is_told_the_earlier_result() -> None:
    """The same bytes twice: the tool runs once and the model gets the first result back."""
    shop = Shop()
    model = ScriptedModel(
        [call("weather", '{"city":"Oslo"}'), call("weather", '{"city":"Oslo"}'), reply("Sunny.")]
    )
    result = await Runner(shop.agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Oslo?"
    )
    assert isinstance(result.final, Done)
    assert shop.ran("weather") == [CityArgs(city="Oslo")]
    assert told(model, 3) == (
        'You already called weather with these arguments and it returned: {"city":"Oslo",'
        '"sky":"sunny"}. Use that result rather than calling it again.'
    )
    assert model.requests[2].messages[-1] == Message(
        role="tool", content=told(model, 3), tool_call_id="call-4", name="weather"
    )
    assert verdicts(result) == [("before_action", "suppress", "exact")]
    assert result.verdicts[0].reason == 'exact duplicate of call-1 (weather({"city":"Oslo"}), ok)'
    assert result.trace() == (
        "Idle -> Planning -> ToolCalling -> Observing -> Planning -[suppress: exact]-> "
        "Planning -> Responding -> Done"
    )
    assert [(a.call_id, a.outcome) for a in result.final.loop.actions] == [
        ("call-1", "ok"),
        ("call-4", "suppressed"),
    ]


async def test_a_suppressed_call_counts_as_a_tool_iteration_but_spends_no_tool_call() -> None:
    """The suppressed call used an iteration (the model asked) but no tool ran."""
    model = ScriptedModel([call("weather", {"city": "Oslo"})] * 2 + [reply("Sunny.")])
    result = await Runner(Shop().agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Oslo?"
    )
    assert result.final.loop.tool_iterations == 2
    assert result.final.spent.tool_calls == 1


def test_identical_bytes_are_reported_as_exact_not_canonical() -> None:
    """Tier order: a call that is both an exact and a canonical repeat is reported as exact."""
    governor = LoopGovernor()
    loop = settled(governor, '{"city":"Oslo"}')
    decision = ask(governor, loop, '{"city":"Oslo"}')
    assert (decision.verdict, decision.check) == (Verdict.SUPPRESS, "exact")
    spaced = ask(governor, loop, '{"city": "Oslo"}')
    assert (spaced.verdict, spaced.check) == (Verdict.SUPPRESS, "canonical")


def test_a_refused_call_repeated_in_another_spelling_is_canonical_not_semantic() -> None:
    """Tier order: canonical is checked before semantic, though the similarity is 1.0."""
    governor = LoopGovernor()
    raw = '{"order":"A-1001","amount":25,"reason":"damaged"}'
    loop = settled(governor, raw, tool_name="refund", outcome="refused")
    decision = ask(
        governor, loop, '{"reason":"damaged","amount":25.0,"order":"A-1001"}', tool_name="refund"
    )
    assert (decision.verdict, decision.check) == (Verdict.SUPPRESS, "canonical")


# --- canonical ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "second",
    [
        '{"sku":"X-1","quantity":5.0}',
        '{"sku":"X-1","quantity":"5"}',
        '{"quantity":5,"sku":"X-1"}',
        '{ "sku" : "X-1", "quantity" : 5.00 }',
    ],
)
async def test_an_int_field_spelled_another_way_is_a_canonical_duplicate(second: str) -> None:
    """5, 5.0, "5", key order and spacing are one call: the second never runs."""
    shop = Shop()
    model = ScriptedModel(
        [call("stock", '{"sku":"X-1","quantity":5}'), call("stock", second), reply("In stock.")]
    )
    result = await Runner(shop.agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "5 of X-1?"
    )
    assert shop.ran("stock") == [StockArgs(sku="X-1", quantity=5)]
    assert told(model, 3) == (
        'You already called stock with these arguments and it returned: {"sku":"X-1",'
        '"quantity":5,"available":true}. Use that result rather than calling it again.'
    )
    assert verdicts(result) == [("before_action", "suppress", "canonical")]
    assert result.verdicts[0].reason == (
        'canonical duplicate of call-1 (stock({"quantity":5,"sku":"X-1"}), ok)'
    )
    assert "Planning -[suppress: canonical]-> Planning" in result.trace()


async def test_a_different_value_is_not_a_duplicate() -> None:
    """quantity 5 then 6: two different calls, both run, no verdict."""
    shop = Shop()
    model = ScriptedModel(
        [
            call("stock", {"sku": "X-1", "quantity": 5}),
            call("stock", {"sku": "X-1", "quantity": 6}),
            reply("Both in stock."),
        ]
    )
    result = await Runner(shop.agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "X-1?"
    )
    assert [args.quantity for args in shop.ran("stock")] == [5, 6]
    assert result.verdicts == ()


@pytest.mark.parametrize(
    "second", ['{"price":899.9,"flight":"SK1"}', '{"flight":"SK1","price":"899.900"}']
)
async def test_money_and_key_order_spelled_another_way_book_once(second: str) -> None:
    """An approved booking asked for again as 899.9 / "899.900", keys reordered: booked once."""
    shop = Shop()
    gate = AutoApproveGate()
    model = ScriptedModel(
        [call("book", '{"flight":"SK1","price":899.90}'), call("book", second), reply("Booked.")]
    )
    result = await Runner(shop.agent(), model=model, gate=gate, keep_states=True).run(
        None, "Book SK1"
    )
    assert shop.ran("book") == [FlightArgs(flight="SK1", price=Decimal("899.90"))]
    assert len(gate.requests) == 1
    assert result.final.spent.cost == Decimal("899.90")
    assert told(model, 3) == (
        'You already called book with these arguments and it returned: "booked SK1". Use '
        "that result rather than calling it again. book changes things, so it will not be "
        "done twice."
    )
    assert verdicts(result) == [("before_action", "suppress", "canonical")]


async def test_a_case_insensitive_field_folds_letter_case() -> None:
    """forecast's city is declared case-insensitive: "OSLO" after "Oslo" is a duplicate."""
    shop = Shop()
    model = ScriptedModel(
        [call("forecast", {"city": "Oslo"}), call("forecast", {"city": "OSLO"}), reply("Sunny.")]
    )
    result = await Runner(shop.agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Oslo?"
    )
    assert shop.ran("forecast") == [ForecastArgs(city="Oslo")]
    assert verdicts(result) == [("before_action", "suppress", "canonical")]
    assert result.verdicts[0].reason == (
        'canonical duplicate of call-1 (forecast({"city":"oslo"}), ok)'
    )


async def test_a_plain_string_field_keeps_letter_case() -> None:
    """weather's city is a plain str: "OSLO" after "Oslo" is another call and runs."""
    shop = Shop()
    model = ScriptedModel(
        [call("weather", {"city": "Oslo"}), call("weather", {"city": "OSLO"}), reply("Sunny.")]
    )
    result = await Runner(shop.agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Oslo?"
    )
    assert shop.ran("weather") == [CityArgs(city="Oslo"), CityArgs(city="OSLO")]
    assert result.verdicts == ()


class OpenArgs(BaseModel):
    """Arguments of any shape: extra keys are kept."""

    model_config = ConfigDict(extra="allow")


@read_tool
async def lookup(args: OpenArgs) -> str:
    """Anything."""
    return "found"


def spelled(items: list[tuple[str, int]], *, as_decimal: bool) -> str:
    """A JSON object with the items in this order, each int written as 5 or as 5.0."""
    body = ",".join(
        f"{json.dumps(key)}:{value}{'.0' if as_decimal else ''}" for key, value in items
    )
    return "{" + body + "}"


@settings(max_examples=75, deadline=None)
@given(
    st.dictionaries(
        st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6),
        st.integers(min_value=-(10**15), max_value=10**15),
        max_size=6,
    ),
    st.randoms(use_true_random=False),
)
def test_canonical_duplicates_are_found_whatever_the_key_order_and_number_spelling(
    args: dict[str, int], rng: random.Random
) -> None:
    """For any arguments, a reordered call with 5 spelled 5.0 is suppressed as a duplicate."""
    registry = ToolRegistry([lookup])
    governor = LoopGovernor()
    items = list(args.items())
    first_raw = spelled(items, as_decimal=False)
    rng.shuffle(items)
    second_raw = spelled(items, as_decimal=True)
    first, second = registry.route("lookup", first_raw), registry.route("lookup", second_raw)
    assert isinstance(first, ReadCall)
    assert isinstance(second, ReadCall)
    earlier = governor.action(first, first_raw, "call-1")
    again = governor.action(second, second_raw, "call-2")
    assert again.key == earlier.key
    loop = LoopState().record(earlier).settle("call-1", "ok", "found")
    decision = governor.before_action(
        loop, again, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
    )
    assert decision.verdict is Verdict.SUPPRESS
    assert decision.check == ("exact" if first_raw == second_raw else "canonical")


# --- semantic -----------------------------------------------------------------------------

DAMAGED = {"order": "A-1001", "amount": Decimal("25.00"), "reason": "arrived damaged"}
DAMAGED_TEXT = 'refund({"amount":25,"order":"A-1001","reason":"arrived damaged"})'


async def test_a_call_nearly_the_same_as_a_refused_one_is_suppressed() -> None:
    """After a denied refund, the same refund reworded (>= 0.92 similar) never reaches the gate."""
    shop = Shop()
    gate = ScriptedGate([False])
    reworded = {**DAMAGED, "reason": "it arrived damaged"}
    model = ScriptedModel([call("refund", DAMAGED), call("refund", reworded), reply("Sorry.")])
    result = await Runner(shop.agent(), model=model, gate=gate, keep_states=True).run(
        None, "Refund A-1001"
    )
    assert isinstance(result.final, Done)
    assert shop.ran("refund") == []
    assert len(gate.requests) == 1
    score = lexical_similarity(
        'refund({"amount":25,"order":"A-1001","reason":"it arrived damaged"})', DAMAGED_TEXT
    )
    assert score >= 0.92
    assert told(model, 3) == (
        f"This call is {score:.0%} the same as {DAMAGED_TEXT}, which was refused: denied by "
        "the script. Do not retry it in another form; tell the customer instead."
    )
    assert verdicts(result) == [("before_action", "suppress", "semantic")]
    assert result.verdicts[0].reason == (
        f"semantic duplicate ({score:.3f} >= 0.92) of call-1 ({DAMAGED_TEXT}, refused)"
    )
    assert result.trace() == (
        "Idle -> Planning -> AwaitApproval -> Planning -[suppress: semantic]-> Planning "
        "-> Responding -> Done"
    )


async def test_a_call_less_similar_than_the_threshold_goes_to_the_gate() -> None:
    """A refund for another order and reason (< 0.92 similar) is a new request: asked again."""
    shop = Shop()
    gate = ScriptedGate([False, False])
    other = {"order": "B-2002", "amount": Decimal("40"), "reason": "wrong size"}
    model = ScriptedModel([call("refund", DAMAGED), call("refund", other), reply("Sorry.")])
    result = await Runner(shop.agent(), model=model, gate=gate, keep_states=True).run(
        None, "Refunds"
    )
    assert [request.arguments["order"] for request in gate.requests] == ["A-1001", "B-2002"]
    assert result.verdicts == ()


async def test_a_call_similar_to_one_that_succeeded_is_not_semantic() -> None:
    """The semantic tier looks only at failed or refused calls: a near-repeat of a success runs."""
    shop = Shop(answers=lambda query: f"pages about {query}")
    model = ScriptedModel(
        [
            call("search", {"query": "refund policy for damaged items"}),
            call("search", {"query": "refund policy for damaged item"}),
            reply("Full refund."),
        ]
    )
    result = await Runner(shop.agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Policy?"
    )
    assert len(shop.ran("search")) == 2
    assert result.verdicts == ()


@pytest.mark.parametrize(("threshold", "suppressed"), [(0.92, False), (0.9, True)])
async def test_the_semantic_threshold_is_configuration(threshold: float, suppressed: bool) -> None:
    """A reworded refund about 0.91 similar passes the default 0.92 and is stopped at 0.9."""
    reworded = {**DAMAGED, "reason": "the item arrived damaged"}
    text = 'refund({"amount":25,"order":"A-1001","reason":"the item arrived damaged"})'
    assert 0.9 <= lexical_similarity(text, DAMAGED_TEXT) < 0.92
    gate = ScriptedGate([False, False])
    model = ScriptedModel([call("refund", DAMAGED), call("refund", reworded), reply("Sorry.")])
    agent = Shop().agent(governor=LoopGovernor(semantic_threshold=threshold))
    result = await Runner(agent, model=model, gate=gate, keep_states=True).run(None, "Refund")
    assert len(gate.requests) == (1 if suppressed else 2)
    assert verdicts(result) == ([("before_action", "suppress", "semantic")] if suppressed else [])


def same_order(first: str, second: str) -> float:
    """A pluggable similarity: two texts naming the same order number are the same request."""
    orders = [re.search(r"[A-Z]-\d{4}", text) for text in (first, second)]
    if orders[0] is None or orders[1] is None:
        return 0.0
    return 1.0 if orders[0].group() == orders[1].group() else 0.0


async def test_a_custom_similarity_is_plugged_in() -> None:
    """With a similarity that compares order numbers, any refund of a refused order for the
    same amount is stopped, whatever its reason; another order goes to the gate."""
    shop = Shop()
    gate = ScriptedGate([False, False])
    goodwill = {"order": "A-1001", "amount": Decimal("25.00"), "reason": "goodwill"}
    other = {"order": "B-2002", "amount": Decimal("25.00"), "reason": "goodwill"}
    model = ScriptedModel(
        [call("refund", DAMAGED), call("refund", goodwill), call("refund", other), reply("Done.")]
    )
    agent = shop.agent(governor=LoopGovernor(similarity=same_order))
    result = await Runner(agent, model=model, gate=gate, keep_states=True).run(None, "Refunds")
    assert [request.arguments["order"] for request in gate.requests] == ["A-1001", "B-2002"]
    assert told(model, 3) == (
        f"This call is 100% the same as {DAMAGED_TEXT}, which was refused: denied by the "
        "script. Do not retry it in another form; tell the customer instead."
    )
    assert verdicts(result) == [("before_action", "suppress", "semantic")]


def test_a_call_similar_to_a_failed_one_is_suppressed() -> None:
    """A failed call counts like a refused one (unit: a live run ends when a tool fails)."""
    governor = LoopGovernor()
    loop = settled(
        governor,
        '{"query":"refund policy for damaged items"}',
        tool_name="search",
        outcome="failed",
    )
    decision = ask(governor, loop, '{"query":"refund policy for damaged item"}', tool_name="search")
    assert (decision.verdict, decision.check) == (Verdict.SUPPRESS, "semantic")
    assert "which failed: the result." in decision.message


# --- cycle --------------------------------------------------------------------------------


async def test_a_repeating_block_that_adds_nothing_is_suppressed_as_a_cycle() -> None:
    """search -> lookup_order -> search -> lookup_order, new arguments, nothing new: suppressed."""
    shop = Shop()
    model = ScriptedModel(
        [
            call("search", {"query": "order X-1 status"}),
            call("lookup_order", {"order": "X-1"}),
            call("search", {"query": "status of order X-1"}),
            call("lookup_order", {"order": "X-01"}),
            reply("I could not find that order."),
        ]
    )
    result = await Runner(shop.agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "X-1?"
    )
    assert isinstance(result.final, Done)
    assert [name for name, _ in shop.calls] == ["search", "lookup_order", "search"]
    assert told(model, 5) == (
        "You are repeating the same steps (search -> lookup_order -> search -> lookup_order) "
        "and the last round found nothing new. Stop repeating them: answer from what you "
        "have, or try something different."
    )
    assert verdicts(result) == [("before_action", "suppress", "cycle")]
    assert result.verdicts[0].reason == (
        "cycle: search -> lookup_order repeated twice, last round gained nothing"
    )


async def test_a_repeating_block_of_three_is_a_cycle_too() -> None:
    """search -> lookup_order -> weather, twice, the second round adding nothing: suppressed."""
    shop = Shop()
    model = ScriptedModel(
        [
            call("search", {"query": "where is X-1"}),
            call("lookup_order", {"order": "X-1"}),
            call("weather", {"city": "Atlantis"}),
            call("search", {"query": "X-1 location"}),
            call("lookup_order", {"order": "X-01"}),
            call("weather", {"city": "Atlantis City"}),
            reply("I could not find it."),
        ]
    )
    result = await Runner(shop.agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "X-1?"
    )
    assert len(shop.calls) == 5
    steps = "search -> lookup_order -> weather"
    assert told(model, 7).startswith(f"You are repeating the same steps ({steps} -> {steps})")
    assert verdicts(result) == [("before_action", "suppress", "cycle")]


async def test_a_repeating_block_that_brings_new_results_is_not_a_cycle() -> None:
    """The same tools in the same order, but each round learns something: nothing suppressed."""
    pages = {
        "refund policy": "Refunds are possible within 30 days of delivery.",
        "damaged items": "Damaged goods: we pay back the full price and the shipping.",
    }
    shop = Shop(answers=lambda query: pages[query])
    model = ScriptedModel(
        [
            call("search", {"query": "refund policy"}),
            call("lookup_order", {"order": "X-1"}),
            call("search", {"query": "damaged items"}),
            call("lookup_order", {"order": "X-2"}),
            reply("Here is what I found."),
        ]
    )
    result = await Runner(shop.agent(), model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "X?"
    )
    assert [name for name, _ in shop.calls] == ["search", "lookup_order"] * 2
    assert result.verdicts == ()


# --- writes -------------------------------------------------------------------------------


async def test_a_second_identical_refund_after_a_paid_one_is_suppressed() -> None:
    """Approved and paid once; the same refund again never reaches the gate or the money."""
    shop = Shop()
    gate = AutoApproveGate()
    model = ScriptedModel([call("refund", DAMAGED), call("refund", DAMAGED), reply("Refunded.")])
    result = await Runner(shop.agent(), model=model, gate=gate, keep_states=True).run(
        None, "Refund A-1001"
    )
    assert shop.ran("refund") == [RefundArgs(**DAMAGED)]
    assert len(gate.requests) == 1
    assert result.final.spent.cost == Decimal("25.00")
    assert told(model, 3) == (
        'You already called refund with these arguments and it returned: "refunded 25.00 '
        'on A-1001". Use that result rather than calling it again. refund changes things, so '
        "it will not be done twice."
    )
    assert verdicts(result) == [("before_action", "suppress", "exact")]


async def test_a_refused_refund_asked_for_again_is_suppressed() -> None:
    """Denied once; the same refund again is suppressed and the model is told it was refused."""
    shop = Shop()
    gate = ScriptedGate([False])
    model = ScriptedModel([call("refund", DAMAGED), call("refund", DAMAGED), reply("Sorry.")])
    result = await Runner(shop.agent(), model=model, gate=gate, keep_states=True).run(
        None, "Refund A-1001"
    )
    assert shop.ran("refund") == []
    assert len(gate.requests) == 1
    assert told(model, 3) == (
        f"You already asked for {DAMAGED_TEXT} and it was refused: denied by the script. Do "
        "not ask for it again; tell the customer instead."
    )
    assert verdicts(result) == [("before_action", "suppress", "exact")]


# --- finalize -----------------------------------------------------------------------------


async def test_a_plateau_finalizes_before_the_step_cap() -> None:
    """Three results in a row that add nothing: the model is asked, without tools, to answer."""
    shop = Shop()  # every search finds "nothing found"
    queries = ["oslo store hours", "store hours oslo", "opening times", "when do you open"]
    model = ScriptedModel(
        [call("search", {"query": query}) for query in queries] + [reply("I could not find it.")]
    )
    result = await Runner(
        shop.agent(max_steps=20), model=model, gate=AutoDenyGate(), keep_states=True
    ).run(None, "Hours?")
    assert isinstance(result.final, Done)
    assert len(model.requests) == 5
    assert [len(request.tools) > 0 for request in model.requests] == [True] * 4 + [False]
    reason = "plateau: 3 results in a row added less than 0.05"
    assert told(model, 5) == FINALIZE_NOTE.format(reason)
    assert [a.gain for a in result.final.loop.actions] == [1.0, 0.0, 0.0, 0.0]
    # Decided once, after the action; the next step acts on it without a second entry.
    assert verdicts(result) == [("after_action", "finalize", "plateau")]
    assert [v.reason for v in result.verdicts] == [reason]
    assert result.trace().endswith(
        "Observing -[finalize: plateau]-> Planning -> Responding -> Done"
    )


def test_a_result_with_news_resets_the_plateau_streak() -> None:
    """first, low, low, new, low, low: the news restarts the streak, so six results, no plateau."""
    governor = LoopGovernor()
    loop = LoopState()
    for n, result in enumerate(["same", "same", "same", "something new here", "same", "same"]):
        action = governor.action(unit_call("search", f'{{"query":"q{n}"}}'), "{}", f"call-{n}")
        loop = governor.after_action(
            loop.record(action), call_id=f"call-{n}", effect="read", result=result, ctx=None, step=n
        )
    assert loop.low_gain_streak == 2
    assert loop.finalize == ""


def test_gain_is_one_minus_the_highest_similarity_to_the_evidence() -> None:
    """gain = 1 - max similarity of a new result to what the run has seen (1.0 with nothing)."""

    def shared_words(first: str, second: str) -> float:
        a, b = set(first.split()), set(second.split())
        return len(a & b) / len(a | b)

    governor = LoopGovernor(evidence_similarity=shared_words)
    assert governor.gain(LoopState(), "anything") == 1.0
    loop = LoopState(evidence=("red green", "blue yellow"))
    assert governor.gain(loop, "red green blue") == pytest.approx(1 - 2 / 3)
    assert LoopGovernor().gain(loop, "Red   GREEN") == 0.0  # the default ignores case, spacing


@functools.lru_cache(maxsize=1024)
def _grams(text: str) -> frozenset[str]:
    folded = " ".join(text.lower().split())
    return frozenset(folded[i : i + 3] for i in range(max(1, len(folded) - 2)))


def _gain_by_sets(window: tuple[str, ...], result: str) -> float:
    """The default gain as the set formula states it: 1 - max |A & B| / sqrt(|A| |B|)."""
    grams = _grams
    mine = grams(result)
    return 1.0 - max(
        len(mine & grams(seen)) / math.sqrt(len(mine) * len(grams(seen))) for seen in window
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet='abcAB {}:,"\n', max_size=40), min_size=1, max_size=40),
    st.text(alphabet='abcAB {}:,"\n', max_size=40),
)
def test_the_default_gain_is_exactly_the_trigram_formula(window: list[str], result: str) -> None:
    """The default gain (computed from bitmasks) equals the set formula, float for float."""
    governor = LoopGovernor(evidence_window=64)
    loop = LoopState(evidence=tuple(window))
    assert governor.gain(loop, result) == _gain_by_sets(tuple(window), result)
    # Asked again (the masks now cached), the same value.
    assert governor.gain(loop, result) == _gain_by_sets(tuple(window), result)


def test_equal_ratios_give_the_formula_s_highest_float() -> None:
    """1 of 1 trigram shared and 3 of 9 are the same ratio, which the formula rounds to two
    floats an ulp apart (1 / sqrt(3) and 3 / sqrt(27)): the gain is the formula's higher
    one, whichever order the window holds them in (a kernel that ranked the texts by a
    rounded score and computed the formula for the first best alone would miss it)."""
    result, one, nine = "abcde", "abc", "abcdefghijk"  # 3 trigrams; 1 of 1; 3 of 9
    assert 1 / math.sqrt(3 * 1) != 3 / math.sqrt(3 * 9)
    for window in ((one, nine), (nine, one), (nine, nine, one, nine)):
        assert LoopGovernor().gain(LoopState(evidence=window), result) == _gain_by_sets(
            window, result
        )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet="ab ", min_size=1, max_size=9), min_size=1, max_size=12),
    st.text(alphabet="ab ", max_size=12),
)
def test_the_gain_is_the_formula_s_float_when_texts_tie(window: list[str], result: str) -> None:
    """Texts of two letters share trigrams in equal ratios often (a text and its repeat, 1
    of 1 and 2 of 4): the gain is still the set formula's, float for float."""
    governor = LoopGovernor(evidence_window=64)
    loop = LoopState(evidence=tuple(window))
    assert governor.gain(loop, result) == _gain_by_sets(tuple(window), result)


# Over 4,096 distinct trigrams: a vocabulary this wide makes masks segment by segment no more.
_WIDE = "".join(random.Random(11).choices("abcdefghijklmnopqrstuvwxyz0123456789#@", k=9_000))


@pytest.mark.parametrize("wide", [False, True])
@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab A\u00e9\u0130:\t\n\x1f\u2003", max_size=30), max_size=6))
def test_a_mask_made_word_by_word_is_the_mask_made_trigram_by_trigram(
    wide: bool, texts: list[str]
) -> None:
    """The convergence check's shortcut (a text's mask as the OR of its words' masks, each
    word with the letter and space before it) sets exactly the bits of its trigrams,
    whatever the spacing, case and letters (one vocabulary: the same masks share it); in a
    narrow vocabulary and in a wide one (where a segment's first sight sets its trigrams in
    one pass with the text's other new segments, and its second makes and keeps its mask),
    each text asked three times."""
    masks = GramMasks()
    if wide:
        masks.mask(_WIDE, keep=False)
        assert len(masks._bits) > _NARROW_BITS
    for _ in range(3):
        for text in texts:
            mask, size = masks.mask(text, keep=False)
            plain = masks._made(_fold(text))
            assert (mask, size) == (plain, plain.bit_count())
            assert size == len(_grams(text))
            # The bits are those of the text's trigrams in the vocabulary, one by one.
            assert mask == sum(1 << masks._bits[gram] for gram in _grams(text))


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 2**52), st.integers(1, 2**52))
def test_sizes_multiplied_as_floats_give_the_int_product_s_root(first: int, second: int) -> None:
    """The convergence kernel multiplies the sizes as floats: each is held exactly, and
    the product rounds once, as the int product's conversion does, so the root is the
    same float at any size."""
    assert math.sqrt(float(first) * float(second)) == math.sqrt(first * second)


def test_the_default_gain_is_exact_past_a_large_vocabulary() -> None:
    """Texts with thousands of distinct trigrams (wide masks) and a run long enough to
    start its cache again still give the set formula's gain."""
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789!#$%&()*+-./:;<=>?@[]^_{|}~"
    governor = LoopGovernor()
    loop = LoopState()
    seen: list[str] = []
    for n in range(300):
        result = "".join(rng.choice(letters) for _ in range(1_500 if n % 5 == 0 else 30))
        window = tuple(seen[-governor.evidence_window :])
        expected = _gain_by_sets(window, result) if window else 1.0
        assert governor.gain(loop, result) == expected
        action = governor.action(unit_call("search", f'{{"query":"q{n}"}}'), "{}", f"call-{n}")
        loop = governor.after_action(
            loop.record(action), call_id=f"call-{n}", effect="read", result=result, ctx=None, step=n
        )
        seen.append(result[:2_000])
    assert loop.actions[-1].gain == governor.gain(LoopState(evidence=tuple(seen[-33:-1])), seen[-1])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet="ab A:\n", max_size=20), max_size=8),
    st.lists(st.text(alphabet="ab A:\n", min_size=1, max_size=20), min_size=1, max_size=12),
    st.integers(1, 5),
)
def test_advancing_is_best_then_the_window_moved_on(
    evidence: list[str], results: list[str], size: int
) -> None:
    """``advance`` (after_action's one pass) gives what ``best`` gives against the last
    ``size`` texts (0.0 with none) and the window with the result's kept part last, and
    keeps for it the masks each text has on its own."""
    masks, window = GramMasks(), tuple(evidence)
    for result in results:
        kept = result[:7]
        plain = tuple(window[-size:])
        best, after = masks.advance(window, result, kept, size)
        assert (1.0 - best if plain else best) == (_gain_by_sets(plain, result) if plain else 0.0)
        assert after == (*plain, kept)[-size:]
        assert masks._signed(after) == (
            tuple(masks.mask(text)[0] for text in after),
            tuple(float(masks.mask(text)[1]) for text in after),
        )
        window = after


def _varied(rng: random.Random, tokens: int) -> str:
    """A result of ``tokens`` random words: new trigrams in nearly every result."""
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    words = ("".join(rng.choices(letters, k=rng.randint(4, 9))) for _ in range(tokens))
    return json.dumps({"items": list(words)})


@pytest.mark.parametrize("tokens", [10, 40])
def test_the_vocabulary_follows_the_window_and_the_gain_stays_exact(tokens: int) -> None:
    """Results that keep bringing new trigrams: the gain's vocabulary starts again when it
    has grown to a few times what the evidence window holds (long before the cache's own
    bound), its masks made again from the window's texts alone, and every gain is still
    the set formula's, float for float (results longer than the evidence keeps too)."""
    rng = random.Random(tokens)
    governor = LoopGovernor()
    loop = LoopState()
    seen: list[str] = []
    widest = starts = 0
    vocabulary: object = None
    for n in range(500):
        result = _varied(rng, tokens) + (" tail" * 500 if n % 50 == 7 else "")
        window = tuple(seen[-governor.evidence_window :])
        action = governor.action(unit_call("search", f'{{"query":"q{n}"}}'), "{}", f"call-{n}")
        loop = governor.after_action(
            loop.record(action), call_id=f"call-{n}", effect="read", result=result, ctx=None, step=n
        )
        assert loop.actions[-1].gain == (_gain_by_sets(window, result) if window else 1.0)
        seen.append(result[:2_000])
        assert loop.evidence == tuple(seen[-governor.evidence_window :])
        masks = loop._masks()
        starts += masks._bits is not vocabulary
        vocabulary = masks._bits
        widest = max(widest, len(masks._bits))
    assert starts > 3
    if tokens == 10:  # the window holds ~2,000 trigrams: its vocabulary stays well inside
        assert widest < _TRIGRAMS_KEPT // 2


@pytest.mark.parametrize(
    ("tool_name", "raw", "folded"),
    [
        ("stock", '{"quantity": 2.0, "sku": "A-1"}', {"sku": "A-1", "quantity": 2}),
        ("forecast", '{"city": "OSLO"}', {"city": "oslo"}),
    ],
)
def test_an_action_is_keyed_by_the_canonical_folded_arguments(
    tool_name: str, raw: str, folded: dict[str, Any]
) -> None:
    """key and text are the canonical JSON of the (case-folded) arguments and its hash."""
    action = LoopGovernor().action(unit_call(tool_name, raw), raw, "call-1")
    assert action.key == f"{tool_name}:{canonical_hash(folded)}"
    assert action.text == f"{tool_name}({canonical(folded)})"


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 12), st.text(alphabet="ab c:\n", min_size=1, max_size=12)),
        min_size=1,
        max_size=12,
    )
)
def test_after_action_makes_the_state_settle_then_evolve_makes(
    steps: list[tuple[int, str]],
) -> None:
    """after_action's one-step state (the latest action settled, the evidence and streak
    set) is the plain path's, ``settle`` then ``_evolve``: the same fields, the same set
    of fields, the same index (and what it finds); an earlier call settled takes the plain
    path itself."""
    governor = LoopGovernor(evidence_window=4, plateau_steps=100)
    loop = LoopState()
    for n, (pick, result) in enumerate(steps):
        action = governor.action(unit_call("search", f'{{"query":"q{n % 5}"}}'), "{}", f"c-{n}")
        loop = loop.record(action)
        call_id = f"c-{min(pick, n)}"  # the latest (nearly always) or an earlier call
        gain = 1.0 - max(
            (lexical_similarity(result, seen) for seen in loop.evidence[-4:]), default=0.0
        )
        evidence = (*loop.evidence, result)[-4:]
        streak = loop.low_gain_streak + 1 if gain < governor.plateau_gain else 0
        plain = loop.settle(call_id, "ok", result, gain)._evolve(
            evidence=evidence, low_gain_streak=streak
        )
        fast = governor.after_action(
            loop, call_id=call_id, effect="read", result=result, ctx=None, step=n
        )
        assert fast == plain
        assert fast._index is plain._index
        assert fast._grams is loop._grams
        keys = [a.key for a in fast.actions]
        assert [fast.earlier(k) for k in keys] == [plain.earlier(k) for k in keys]
        loop = fast


def test_evolved_states_and_settled_actions_are_the_models_pydantic_would_make() -> None:
    """A state made on the hot path dumps, compares and validates as one built by pydantic."""
    governor = LoopGovernor()
    action = governor.action(unit_call("search", '{"query":"q"}'), '{"query":"q"}', "call-1")
    assert action == ActionRecord.model_validate(action.model_dump())
    assert action == ActionRecord(
        call_id="call-1",
        tool="search",
        effect="read",
        exact=action.exact,
        key=action.key,
        text=action.text,
    )
    loop = governor.after_action(
        LoopState().record(action), call_id="call-1", effect="read", result="r", ctx=None, step=1
    )
    rebuilt = LoopState.model_validate(loop.model_dump())
    assert loop == rebuilt
    assert loop.model_dump() == rebuilt.model_dump()
    assert list(loop.model_dump()) == list(LoopState.model_fields)
    settled = loop.actions[0]
    assert settled == action.model_copy(update={"outcome": "ok", "result": "r", "gain": 1.0})
    with pytest.raises(AttributeError):  # frozen (an attrs class since issue 23, round 18)
        loop.tool_iterations = 3  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]


async def test_the_agents_completion_signal_finalizes() -> None:
    """LoopGovernor(completion=...): once the order is found, the model must answer."""

    def order_found(loop: LoopState, ctx: str) -> str | None:
        return f"{ctx} found" if any(ctx in seen for seen in loop.evidence) else None

    shop = Shop()
    model = ScriptedModel(
        [
            call("lookup_order", {"order": "X-9"}),
            call("lookup_order", {"order": "A-1001"}),
            reply("Your order was delivered."),
        ]
    )
    agent = shop.agent(governor=LoopGovernor(completion=order_found))
    result = await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(
        "A-1001", "Where is it?"
    )
    assert isinstance(result.final, Done)
    assert model.requests[2].tools == ()
    assert told(model, 3) == FINALIZE_NOTE.format("complete: A-1001 found")
    assert verdicts(result) == [("after_action", "finalize", "complete")]


async def test_the_tool_iteration_cap_comes_from_the_agent() -> None:
    """Agent(max_tool_iterations=5): five tool steps, then the model answers without tools."""
    shop = Shop()
    cities = ["Oslo", "Bergen", "Lima", "Tokyo", "Nairobi", "Quito"]
    model = ScriptedModel([call("weather", {"city": city}) for city in cities[:5]] + [reply("…")])
    result = await Runner(
        shop.agent(max_tool_iterations=5), model=model, gate=AutoDenyGate(), keep_states=True
    ).run(None, "Weather everywhere?")
    assert isinstance(result.final, Done)
    assert len(shop.ran("weather")) == 5
    assert [len(request.tools) > 0 for request in model.requests] == [True] * 5 + [False]
    assert told(model, 6) == FINALIZE_NOTE.format("tool-iteration cap: 5 of 5 used")
    assert verdicts(result) == [("begin_step", "finalize", "tool_iterations")]


async def test_the_step_cap_comes_from_the_agent() -> None:
    """Agent(max_steps=3): the third model call is the last, and it is made without tools."""
    model = ScriptedModel(
        [call("weather", {"city": "Oslo"}), call("weather", {"city": "Bergen"}), reply("Mixed.")]
    )
    result = await Runner(
        Shop().agent(max_steps=3), model=model, gate=AutoDenyGate(), keep_states=True
    ).run(None, "Weather?")
    assert isinstance(result.final, Done)
    assert model.requests[2].tools == ()
    assert told(model, 3) == FINALIZE_NOTE.format("step cap: this is model call 3 of 3, the last")
    assert verdicts(result) == [("begin_step", "finalize", "step_cap")]


def test_a_step_past_the_cap_aborts() -> None:
    """begin_step with the cap already used answers abort (a restored run cannot go on)."""
    decision = LoopGovernor().begin_step(
        LoopState(),
        ctx=None,
        spent=Spend(model_calls=3),
        budget=Budget(),
        elapsed=0.0,
        max_steps=3,
        max_tool_iterations=None,
    )
    assert decision == Decision(
        Verdict.ABORT, "step cap: 3 model calls made, 3 allowed", check="step_cap"
    )


# --- abort --------------------------------------------------------------------------------


async def test_a_spent_token_budget_aborts_before_the_next_model_call() -> None:
    """Budget(tokens=10) used up: Failed with the budget's reason, the verdict recorded."""
    model = ScriptedModel([call("weather", {"city": "Oslo"}, tokens=10), reply("unused")])
    agent = Shop().agent(budget=Budget(tokens=10))
    result = await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Oslo?"
    )
    assert isinstance(result.final, Failed)
    assert result.status == "failed"
    reason = "token budget: 10 of 10 tokens used, no room for the next model call"
    assert result.final.reason == reason
    assert len(model.requests) == 1
    assert verdicts(result) == [("begin_step", "abort", "budget")]
    assert result.trace().endswith("Observing -> Planning -[abort: budget]-> Failed")


async def test_a_call_over_the_cost_budget_aborts_before_it_runs() -> None:
    """Budget(cost=20.00) and a 25.00 refund: Failed before the gate is even asked."""
    shop = Shop()
    gate = AutoApproveGate()
    model = ScriptedModel([call("refund", DAMAGED)])
    agent = shop.agent(budget=Budget(cost=Decimal("20.00")))
    result = await Runner(agent, model=model, gate=gate, keep_states=True).run(None, "Refund")
    assert isinstance(result.final, Failed)
    assert result.final.reason == (
        "cost budget: calling refund would bring the run's cost to $25.00 of $20.00 allowed "
        "($0 spent so far)"
    )
    assert (shop.ran("refund"), gate.requests) == ([], [])
    assert verdicts(result) == [("before_action", "abort", "budget")]
    assert result.trace() == "Idle -> Planning -[abort: budget]-> Failed"


# --- pause --------------------------------------------------------------------------------

SUPERVISOR = "a supervisor must look at order A-1001 first"


def supervisor(loop: LoopState, ctx: object) -> Decision:
    """A custom check: after the first lookup, wait for a person (once)."""
    resumed = any(flag.startswith("resumed:") for flag in loop.flags)
    if loop.tool_iterations >= 1 and not resumed:
        return Decision(Verdict.PAUSE, SUPERVISOR, check="supervisor")
    return Decision(Verdict.CONTINUE)


async def test_a_custom_check_pauses_and_a_person_resumes_the_run() -> None:
    """pause stops the run; driving it unresumed is refused; resume(note) drives it to Done."""
    model = ScriptedModel([call("lookup_order", {"order": "A-1001"}), reply("Delivered.")])
    agent = Shop().agent(governor=LoopGovernor(checks=(supervisor,)))
    runner = Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True)
    result = await runner.run(None, "Where is A-1001?")
    assert result.status == "paused"
    assert result.ok is False
    paused = result.final
    assert isinstance(paused, Planning)
    assert paused.loop.paused == SUPERVISOR
    assert len(model.requests) == 1
    assert verdicts(result) == [("begin_step", "pause", "supervisor")]
    assert result.trace().endswith("Observing -> Planning -[pause: supervisor]-> Planning")
    message = (
        f"this run is paused for a person ({SUPERVISOR}); call resume(note) on the paused "
        "phase and drive the phase it returns"
    )
    with pytest.raises(RunPausedError, match=exactly(message)):
        await runner.drive(paused)
    resumed = await runner.drive(paused.resume("ok by ana"))
    assert resumed.status == "done"
    assert isinstance(resumed.final, Done)
    assert resumed.final.answer == "Delivered."
    assert resumed.final.loop.flags == ("resumed: ok by ana",)
    assert resumed.final.loop.paused == ""
    assert verdicts(resumed) == [("begin_step", "pause", "supervisor")]


async def test_a_custom_check_can_abort_the_run() -> None:
    """A check answering abort ends the run in Failed with its reason, the verdict recorded."""

    def fraud_hold(loop: LoopState, ctx: object) -> Decision:
        if loop.tool_iterations >= 1:
            return Decision(Verdict.ABORT, "order A-1001 is on a fraud hold", check="fraud")
        return Decision(Verdict.CONTINUE)

    model = ScriptedModel([call("lookup_order", {"order": "A-1001"}), reply("unused")])
    agent = Shop().agent(governor=LoopGovernor(checks=(fraud_hold,)))
    result = await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Refund"
    )
    assert isinstance(result.final, Failed)
    assert result.final.reason == "order A-1001 is on a fraud hold"
    assert verdicts(result) == [("begin_step", "abort", "fraud")]


async def test_a_check_that_answers_suppress_is_a_setup_error() -> None:
    """Suppress needs an action: from a step check it is refused, never a way round the caps."""

    def confused(loop: LoopState, ctx: object) -> Decision:
        return Decision(Verdict.SUPPRESS, "no", check="confused")

    model = ScriptedModel([reply("unused")])
    agent = Shop().agent(governor=LoopGovernor(checks=(confused,)))
    message = (
        "check 'confused' answered suppress at the start of a step, where there is no action "
        "to skip; a check answers continue, pause, finalize or abort"
    )
    with pytest.raises(SetupError, match=exactly(message)):
        await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(None, "Hi")
    assert model.requests == []


# --- the seed example ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("again", "tier"),
    [
        ('{"order":"A-1001","amount":25.00,"reason":"arrived damaged"}', "exact"),
        ('{"amount":25,"order":"A-1001","reason":"arrived damaged"}', "canonical"),
    ],
)
async def test_four_of_five_iterations_used_one_a_refused_refund(again: str, tier: str) -> None:
    """The seed: one iteration left, the refused refund asked again is suppressed, then answer."""
    shop = Shop(answers=lambda query: "Refunds over 20.00 need a manager's approval.")
    gate = ScriptedGate([False])
    model = ScriptedModel(
        [
            call("lookup_order", {"order": "A-1001"}),
            call("refund", '{"order":"A-1001","amount":25.00,"reason":"arrived damaged"}'),
            call("search", {"query": "refund policy"}),
            call("weather", {"city": "Oslo"}),
            call("refund", again),
            reply("I cannot refund A-1001; a manager must approve it."),
            reply("unused: the run must end at the answer above"),
        ]
    )
    agent = shop.agent(max_tool_iterations=5)
    result = await Runner(agent, model=model, gate=gate, keep_states=True).run(
        None, "Refund A-1001"
    )
    plannings = [state for state in result.states if isinstance(state, Planning)]
    assert [planning.loop.tool_iterations for planning in plannings] == [0, 1, 2, 3, 4, 5]
    assert isinstance(result.final, Done)
    assert result.final.answer == "I cannot refund A-1001; a manager must approve it."
    assert shop.ran("refund") == []
    assert len(gate.requests) == 1
    assert len(model.requests) == 6
    assert [len(request.tools) > 0 for request in model.requests] == [True] * 5 + [False]
    assert told(model, 6) == FINALIZE_NOTE.format("tool-iteration cap: 5 of 5 used")
    assert model.requests[5].messages[-2].content == (
        f"You already asked for {DAMAGED_TEXT} and it was refused: denied by the script. Do "
        "not ask for it again; tell the customer instead."
    )
    assert verdicts(result) == [
        ("before_action", "suppress", tier),
        ("begin_step", "finalize", "tool_iterations"),
    ]
    assert result.verdicts[0].reason == f"{tier} duplicate of call-4 ({DAMAGED_TEXT}, refused)"
    assert result.trace() == (
        "Idle -> Planning -> ToolCalling -> Observing -> Planning -> AwaitApproval -> "
        "Planning -> ToolCalling -> Observing -> Planning -> ToolCalling -> Observing -> "
        f"Planning -[suppress: {tier}]-> Planning -[finalize: tool_iterations]-> "
        "Responding -> Done"
    )
    assert [a.outcome for a in result.final.loop.actions] == [
        "ok",
        "refused",
        "ok",
        "ok",
        "suppressed",
    ]


# --- the loop state: in the run, checkpointable, never global -----------------------------


async def test_the_loop_state_travels_in_every_phase_and_round_trips_through_pydantic() -> None:
    """Each phase holds its LoopState; model_dump -> model_validate (and JSON) gives it back."""
    model = ScriptedModel(
        [call("weather", {"city": "Oslo"}), call("weather", {"city": "Oslo"}), reply("Sunny.")]
    )
    runner = Runner(Shop().agent(), model=model, gate=AutoDenyGate(), keep_states=True)
    result = await runner.run(None, "Oslo?")
    assert [len(state.loop.actions) for state in result.states] == [0, 0, 1, 1, 1, 2, 2, 2]
    for state in result.states:
        assert LoopState.model_validate(state.loop.model_dump()) == state.loop
        assert LoopState.model_validate_json(state.loop.model_dump_json()) == state.loop


async def test_a_restored_loop_state_still_detects_duplicates() -> None:
    """A Planning rebuilt around a round-tripped LoopState suppresses a repeat of an old call."""
    shop = Shop()
    first = ScriptedModel([call("weather", {"city": "Oslo"}), reply("Sunny.")])
    runner = Runner(shop.agent(), model=first, gate=AutoDenyGate(), keep_states=True)
    done = await runner.run(None, "Oslo?")
    planning = done.states[4]
    assert isinstance(planning, Planning)
    # Restored as a resume restores it: through the checkpoint codec.
    agent = shop.agent()
    resumed_from = load_phase(dump_phase(planning), agents={agent.name: agent})
    assert resumed_from.loop == LoopState.model_validate_json(planning.loop.model_dump_json())
    second = ScriptedModel([call("weather", {"city": "Oslo"}), reply("Still sunny.")])
    result = await Runner(agent, model=second, gate=AutoDenyGate(), keep_states=True).drive(
        resumed_from
    )
    assert shop.ran("weather") == [CityArgs(city="Oslo")]
    assert verdicts(result) == [("before_action", "suppress", "exact")]


def test_a_restored_loop_state_remembers_old_calls_after_recording_a_new_one() -> None:
    """Its index is rebuilt even when the first thing done with it is to record a new call."""
    governor = LoopGovernor()
    loop = settled(governor, '{"city":"Oslo"}')
    restored = LoopState.model_validate(loop.model_dump())
    bergen = governor.action(unit_call("weather", '{"city":"Bergen"}'), '{"city":"Bergen"}', "c2")
    grown = restored.record(bergen).settle("c2", "ok", "rain")
    assert (ask(governor, grown, '{"city":"Oslo"}').check) == "exact"
    assert (ask(governor, grown, '{"city":"Bergen"}').check) == "exact"


def test_two_states_grown_from_one_do_not_see_each_others_calls() -> None:
    """Branches from the same LoopState (the default one included) keep their own memory."""
    governor = LoopGovernor()
    root = LoopState()
    oslo = settled(governor, '{"city":"Oslo"}')
    bergen_action = governor.action(
        unit_call("weather", '{"city":"Bergen"}'), '{"city":"Bergen"}', "b1"
    )
    bergen = root.record(bergen_action).settle("b1", "ok", "rain")
    assert ask(governor, bergen, '{"city":"Oslo"}').verdict is Verdict.CONTINUE
    assert ask(governor, oslo, '{"city":"Bergen"}').verdict is Verdict.CONTINUE
    assert root == LoopState()


async def test_a_second_run_does_not_inherit_the_first_runs_memory() -> None:
    """Sequential runs of one agent: the second's Oslo is not taken for the first's."""
    shop = Shop()
    agent = shop.agent()
    await Runner(
        agent,
        model=ScriptedModel([call("weather", {"city": "Oslo"}), reply("ok")]),
        gate=AutoDenyGate(),
        keep_states=True,
    ).run(None, "Oslo?")
    model = ScriptedModel(
        [call("weather", {"city": "Bergen"}), call("weather", {"city": "Oslo"}), reply("ok")]
    )
    result = await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(
        None, "Both?"
    )
    assert [args.city for args in shop.ran("weather")] == ["Oslo", "Bergen", "Oslo"]
    assert result.verdicts == ()


async def test_two_runs_in_parallel_do_not_see_each_others_actions() -> None:
    """Two runners in one task group, interleaved at every tool call: no cross-run duplicates."""
    shop = Shop()
    agent = shop.agent()
    results: dict[str, Any] = {}

    async def run(name: str, cities: list[str]) -> None:
        model = ScriptedModel([call("weather", {"city": city}) for city in cities] + [reply("ok")])
        results[name] = await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(
            None, name
        )

    async with anyio.create_task_group() as group:
        group.start_soon(run, "first", ["Oslo", "Bergen", "Lima"])
        group.start_soon(run, "second", ["Bergen", "Lima", "Oslo"])
    # The runs took turns at every tool call: each asked for a city the other had just seen.
    assert [args.city for args in shop.ran("weather")] == [
        "Oslo",
        "Bergen",
        "Bergen",
        "Lima",
        "Lima",
        "Oslo",
    ]
    for name in ("first", "second"):
        assert results[name].verdicts == ()
        assert len(results[name].final.loop.actions) == 3


# --- the baseline flag --------------------------------------------------------------------


async def test_a_run_far_longer_than_usual_is_flagged_not_stopped() -> None:
    """baseline_steps=2, factor 3: past step 6 the run is flagged once, and still answers."""
    cities = ["Oslo", "Bergen", "Lima"]
    model = ScriptedModel([call("weather", {"city": city}) for city in cities] + [reply("ok")])
    governor = LoopGovernor(baseline_steps=2, baseline_factor=3.0)
    result = await Runner(
        Shop().agent(governor=governor), model=model, gate=AutoDenyGate(), keep_states=True
    ).run(None, "Weather?")
    assert isinstance(result.final, Done)
    assert result.final.loop.flags == ("long_run: 7 steps, about 3x the usual 2",)
    assert result.verdicts == ()


async def test_a_usual_run_is_not_flagged() -> None:
    """A run within the baseline carries no flag."""
    model = ScriptedModel([call("weather", {"city": "Oslo"}), reply("ok")])
    governor = LoopGovernor(baseline_steps=2, baseline_factor=3.0)
    result = await Runner(
        Shop().agent(governor=governor), model=model, gate=AutoDenyGate(), keep_states=True
    ).run(None, "Weather?")
    assert result.final.loop.flags == ()


# --- configuration errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"semantic_threshold": 1.5}, "semantic_threshold must be between 0 and 1, got 1.5"),
        ({"semantic_threshold": -0.01}, "semantic_threshold must be between 0 and 1, got -0.01"),
        ({"semantic_threshold": math.nan}, "semantic_threshold must be between 0 and 1, got nan"),
        ({"cycle_gain": 2.0}, "cycle_gain must be between 0 and 1, got 2.0"),
        ({"plateau_gain": -0.5}, "plateau_gain must be between 0 and 1, got -0.5"),
        ({"cycle_window": 3}, "cycle_window must be at least 4, got 3"),
        ({"plateau_steps": 0}, "plateau_steps must be at least 1, got 0"),
        (
            {"baseline_steps": 0},
            "baseline_steps must be more than 0 (or None for no baseline), got 0",
        ),
        ({"baseline_factor": 0.5}, "baseline_factor must be 1 or more, got 0.5"),
    ],
)
def test_thresholds_outside_their_range_are_setup_errors(
    options: dict[str, Any], message: str
) -> None:
    """A fraction outside [0, 1] or a window too small fails when the governor is made."""
    with pytest.raises(SetupError, match=exactly(message)):
        LoopGovernor(**options)


def test_a_setup_error_is_a_type_error() -> None:
    """Callers' existing except TypeError clauses catch a bad governor configuration."""
    with pytest.raises(TypeError):
        LoopGovernor(plateau_gain=1.01)


async def test_writes_to_different_targets_are_never_a_cycle() -> None:
    """stock A -> refund A -> stock B -> refund B is work, not a loop: both refunds are asked.

    The two stock results are nearly the same text, so without the rule that keeps
    writes out of the cycle tier, the second refund would be suppressed as a cycle.
    """
    shop = Shop()
    model = ScriptedModel(
        [
            call("stock", {"sku": "MUG-1", "quantity": 1}),
            call("refund", {"order": "A-1001", "amount": "5.00"}),
            call("stock", {"sku": "MUG-2", "quantity": 1}),
            call("refund", {"order": "A-1002", "amount": "5.00"}),
            reply("Both refunded."),
        ]
    )
    gate = AutoApproveGate()
    result = await Runner(shop.agent(), model=model, gate=gate, keep_states=True).run(
        None, "Refund both"
    )
    assert isinstance(result.final, Done)
    assert [args.order for args in shop.ran("refund")] == ["A-1001", "A-1002"]
    assert len(gate.requests) == 2
    assert all(v.check != "cycle" for v in result.verdicts)


# --- work per check, however long the run -------------------------------------------------


class Counted:
    """Counts the actions read from any action log, by index or slice, and its walks."""

    items_read = 0
    walks = 0

    @staticmethod
    def install(monkeypatch: pytest.MonkeyPatch) -> None:
        """Count every read of an ActionLog from now on (until the test ends)."""
        read, walk = ActionLog.__getitem__, ActionLog.__iter__

        def getitem(self: ActionLog, at: Any) -> Any:
            found = read(self, at)
            Counted.items_read += len(found) if isinstance(at, slice) else 1
            return found

        def iterate(self: ActionLog) -> Any:
            Counted.walks += 1
            return walk(self)

        monkeypatch.setattr(ActionLog, "__getitem__", getitem)
        monkeypatch.setattr(ActionLog, "__iter__", iterate)


def long_run(governor: LoopGovernor, calls: int) -> tuple[LoopState, ActionRecord]:
    """A state after ``calls`` settled calls, one in five failed, and the same call asked
    ``calls`` more times and suppressed each time; and that call."""
    search = ToolRegistry(Shop().tools).route
    loop = LoopState()
    for n in range(calls):
        raw = f'{{"query":"question number {n}"}}'
        routed = search("search", raw)
        assert isinstance(routed, ReadCall)
        loop = loop.record(governor.action(routed, raw, f"call-{n}"))
        loop = loop.settle(f"call-{n}", "failed" if n % 5 == 0 else "ok", f"answer {n}")
    raw = '{"query":"question number 1"}'
    again = governor.action(unit_call("search", raw), raw, "again")
    for n in range(calls):
        decision = governor.before_action(
            loop, again, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
        )
        suppressed = again.model_copy(update={"outcome": "suppressed", "result": decision.reason})
        loop = loop.record(suppressed).noted(n, "before_action", decision)
    return loop, again


@pytest.mark.parametrize("calls", [50, 2_000])
def test_a_check_reads_as_many_actions_with_a_long_run_as_with_a_short_one(
    calls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each hook and state update reads at most the semantic and cycle windows' actions,
    and never walks the whole log: an exact duplicate asked thousands of times over
    (each one suppressed and recorded) is found without passing over the repeats."""
    governor = LoopGovernor()
    loop, again = long_run(governor, calls)
    counted = loop.model_copy(update={"actions": loop.actions})
    assert counted.earlier("no such key") is None  # the index is made from the actions once
    Counted.install(monkeypatch)
    Counted.items_read = Counted.walks = 0

    def ask_about(raw: str, tool_name: str = "search") -> Decision:
        action = governor.action(unit_call(tool_name, raw), raw, "call-new")
        return governor.before_action(
            counted, action, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
        )

    assert ask_about('{"query":"question number 1"}').check == "exact"
    assert ask_about('{"query": "question number 1"}').check == "canonical"
    failed = (calls - 1) // 5 * 5  # the latest failed call
    assert ask_about(f'{{"query":"Question  number {failed}"}}').check == "semantic"
    assert ask_about('{"query":"something else"}').verdict is Verdict.CONTINUE
    assert ask_about('{"order":"A-1"}', "lookup_order").verdict is Verdict.CONTINUE
    assert counted.settle("no such call", "ok", "r") is counted
    assert counted.earlier(again.key) is not None
    begun = governor.begin_step(
        counted,
        ctx=None,
        spent=Spend(),
        budget=Budget(),
        elapsed=0.0,
        max_steps=10**6,
        max_tool_iterations=None,
    )
    assert begun is not None
    governor.gain(counted, "a result")
    window = governor.semantic_window + governor.cycle_window
    assert Counted.walks == 0
    assert Counted.items_read <= 5 * window + 2
    # Recording, then settling, the next call reads none of the earlier ones (at most the
    # action it settles, which it finds at the log's end).
    Counted.items_read = 0
    raw = '{"query":"the next question"}'
    grown = counted.record(governor.action(unit_call("search", raw), raw, "next"))
    grown = governor.after_action(
        grown, call_id="next", effect="read", result="news", ctx=None, step=1
    )
    assert Counted.items_read <= 1
    assert Counted.walks == 0
    assert (grown.actions[-1].call_id, grown.actions[-1].outcome) == ("next", "ok")


def test_a_state_with_other_actions_from_model_copy_is_checked_against_them() -> None:
    """model_copy(update={"actions": ...}) makes the index again, from the new actions."""
    governor = LoopGovernor()
    oslo = settled(governor, '{"city":"Oslo"}')
    bergen = settled(governor, '{"city":"Bergen"}')
    swapped = oslo.model_copy(update={"actions": bergen.actions})
    assert ask(governor, swapped, '{"city":"Bergen"}').check == "exact"
    assert ask(governor, swapped, '{"city":"Oslo"}').verdict is Verdict.CONTINUE
    assert ask(governor, oslo, '{"city":"Oslo"}').check == "exact"


# A reference: the governor's state updates and duplicate tiers as their docstrings state
# them, from scratch on every call, on plain dumps of the state.

SETTLED = ("ok", "failed", "refused")
CALLS = [
    ("weather", '{"city":"Oslo"}'),
    ("weather", '{"city": "Oslo"}'),
    ("weather", '{"city":"oslo"}'),
    ("weather", '{"city":"Bergen"}'),
    ("forecast", '{"city":"OSLO"}'),
    ("forecast", '{"city":"oslo"}'),
    ("search", '{"query":"refund my order"}'),
    ("search", '{"query":"Refund my  order!"}'),
    ("search", '{"query":"where is my parcel"}'),
    ("lookup_order", '{"order":"A-1001"}'),
    ("lookup_order", '{"order":"A-1002"}'),
]
# Calls the runs never make: no duplicate tier catches them, the cycle tier may.
FRESH = [
    ("weather", '{"city":"Quito"}'),
    ("forecast", '{"city":"Lima"}'),
    ("search", '{"query":"opening hours"}'),
    ("lookup_order", '{"order":"Z-9"}'),
]
RESULTS = ["sunny", "rain all day", "no such order", "sunny", "delivered on monday"]


@functools.cache
def made(governor: LoopGovernor, tool_name: str, raw: str, call_id: str) -> ActionRecord:
    """The governor's record of a call (made once: routing a call builds a registry)."""
    return governor.action(unit_call(tool_name, raw), raw, call_id)


def reference_settle(
    dump: dict[str, Any], call_id: str, outcome: str, result: str, gain: float | None
) -> None:
    actions = dump["actions"]
    for position in range(len(actions) - 1, -1, -1):
        if actions[position]["call_id"] == call_id:
            actions[position] = {
                **actions[position],
                "outcome": outcome,
                "result": result[:2_000],
                "gain": gain,
            }
            if outcome != "ok":
                dump["failures"] = (*dump["failures"], position)
            return


def reference_after_action(
    governor: LoopGovernor, dump: dict[str, Any], call_id: str, result: str, step: int
) -> None:
    window = tuple(dump["evidence"][-governor.evidence_window :])
    gain = _gain_by_sets(window, result) if window else 1.0
    streak = dump["low_gain_streak"] + 1 if gain < governor.plateau_gain else 0
    dump["evidence"] = (*dump["evidence"], result[:2_000])[-governor.evidence_window :]
    dump["low_gain_streak"] = streak
    reference_settle(dump, call_id, "ok", result, gain)
    if streak >= governor.plateau_steps:
        reason = f"plateau: {streak} results in a row added less than {governor.plateau_gain:g}"
        verdict = {
            "step": step,
            "hook": "after_action",
            "verdict": Verdict.FINALIZE,
            "check": "plateau",
            "reason": reason,
        }
        dump["verdicts"] = (*dump["verdicts"], verdict)
        dump["finalize"] = reason


def reference_similarity(first: str, second: str) -> float:
    mine, theirs = _grams(first), _grams(second)
    return len(mine & theirs) / math.sqrt(len(mine) * len(theirs))


def reference_decision(
    governor: LoopGovernor, dump: dict[str, Any], actions: list[ActionRecord], action: ActionRecord
) -> Decision:
    for check, key in (("exact", action.exact), ("canonical", action.key)):
        for earlier in reversed(actions):
            if key in (earlier.exact, earlier.key) and earlier.outcome in SETTLED:
                return governor._duplicate(action, earlier, check)
    for position in reversed(dump["failures"][-governor.semantic_window :]):
        earlier = actions[position]
        if earlier.tool == action.tool and call_anchors(earlier.text) == call_anchors(action.text):
            score = reference_similarity(action.text, earlier.text)
            if score >= governor.semantic_threshold:
                return Decision(
                    Verdict.SUPPRESS,
                    f"semantic duplicate ({score:.3f} >= {governor.semantic_threshold}) of "
                    f"{earlier.call_id} ({earlier.text}, {earlier.outcome})",
                    f"This call is {score:.0%} the same as {earlier.text}, which "
                    f"{'failed' if earlier.outcome == 'failed' else 'was ' + earlier.outcome}: "
                    f"{earlier.result}. Do not retry it in another form; tell the customer "
                    "instead.",
                    "semantic",
                )
    if action.effect == "write":
        return Decision(Verdict.CONTINUE)
    recent = [a for a in actions[-(governor.cycle_window - 1) :] if a.outcome != "pending"]
    names = [a.tool for a in recent] + [action.tool]
    for block in range(2, len(names) // 2 + 1):
        first, second = names[-2 * block : -block], names[-block:]
        gained = any((a.gain or 0.0) >= governor.cycle_gain for a in recent[-(block - 1) :])
        if first == second and len(set(first)) >= 2 and not gained:
            steps = " -> ".join(first)
            return Decision(
                Verdict.SUPPRESS,
                f"cycle: {steps} repeated twice, last round gained nothing",
                f"You are repeating the same steps ({steps} -> {steps}) and the last round "
                "found nothing new. Stop repeating them: answer from what you have, or try "
                "something different.",
                "cycle",
            )
    return Decision(Verdict.CONTINUE)


# Mostly the latest state (a run), sometimes an older one (a branch).
pick = st.one_of(st.just(-1), st.just(-1), st.just(-1), st.integers(0, 10**6))
call_ids = st.integers(0, 5).map(lambda n: f"c{n}")
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("call"),
            pick,
            st.sampled_from(CALLS),
            call_ids,
            st.sampled_from([*SETTLED, "observe", "suppressed"]),
            st.sampled_from(RESULTS),
            st.sampled_from([None, 0.0, 0.1, 0.5, 1.0]),
        ),
        st.tuples(st.just("call"), pick, st.sampled_from(CALLS), call_ids, st.just("pending")),
        st.tuples(
            st.just("settle"),
            pick,
            call_ids,
            st.sampled_from(SETTLED),
            st.sampled_from(RESULTS),
            st.sampled_from([None, 0.0, 0.1, 0.5, 1.0]),
        ),
        st.tuples(st.just("observe"), pick, call_ids, st.sampled_from(RESULTS)),
        st.tuples(st.just("restore"), pick),
        st.tuples(st.just("copy"), pick),
    ),
    min_size=5,
    max_size=60,
)


def drive(
    governor: LoopGovernor, steps: list[tuple[Any, ...]]
) -> list[tuple[LoopState, dict[str, Any]]]:
    """Every state ``steps`` make, each with the reference's dump of it."""
    pool: list[tuple[LoopState, dict[str, Any]]] = [(LoopState(), LoopState().model_dump())]
    for step, (kind, at, *rest) in enumerate(steps):
        loop, dump = pool[at % len(pool)]
        dump = json.loads(json.dumps(dump))  # a copy of the reference's own
        dump["failures"], dump["evidence"] = tuple(dump["failures"]), tuple(dump["evidence"])
        dump["verdicts"] = tuple(dump["verdicts"])
        if kind == "call":
            (tool_name, raw), call_id, outcome, *settling = rest
            action = made(governor, tool_name, raw, call_id)
            if outcome == "suppressed":
                action = action.model_copy(update={"outcome": "suppressed", "result": "no"})
            loop = loop.record(action)
            dump["actions"].append(action.model_dump())
            dump["tool_iterations"] += 1
            if outcome == "observe":
                loop = governor.after_action(
                    loop, call_id=call_id, effect="read", result=settling[0], ctx=None, step=step
                )
                reference_after_action(governor, dump, call_id, settling[0], step)
            elif outcome in SETTLED:
                loop = loop.settle(call_id, outcome, *settling)
                reference_settle(dump, call_id, outcome, *settling)
        elif kind == "settle":
            call_id, outcome, result, gain = rest
            loop = loop.settle(call_id, outcome, result, gain)
            reference_settle(dump, call_id, outcome, result, gain)
        elif kind == "observe":
            call_id, result = rest
            loop = governor.after_action(
                loop, call_id=call_id, effect="read", result=result, ctx=None, step=step
            )
            reference_after_action(governor, dump, call_id, result, step)
        elif kind == "restore":
            loop = LoopState.model_validate_json(loop.model_dump_json())
        else:
            loop = loop.model_copy(update={"actions": loop.actions})
        pool.append((loop, dump))
    return pool


def decide_as_the_reference(
    governor: LoopGovernor, pool: list[tuple[LoopState, dict[str, Any]]]
) -> list[str]:
    """Each state of ``pool`` dumps as the reference's, and decides every call as it does;
    the checks that decided."""
    decided_by = []
    for loop, dump in pool:
        assert loop.model_dump() == LoopState.model_validate(dump).model_dump()
        actions = [ActionRecord.model_validate(a) for a in dump["actions"]]
        for tool_name, raw in CALLS + FRESH:
            action = made(governor, tool_name, raw, "c-new")
            decided = governor.before_action(
                loop, action, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
            )
            assert decided == reference_decision(governor, dump, actions, action)
            decided_by.append(decided.check)
    return decided_by


@settings(max_examples=100, deadline=None)
@given(
    operations,
    st.sampled_from([0.92, 0.6]),
    st.sampled_from([4, 6, 12]),
    st.sampled_from([4, 64]),
    st.booleans(),
)
def test_decisions_and_states_are_those_of_the_plain_reference(
    steps: list[tuple[Any, ...]], threshold: float, cycle: int, semantic: int, plugged: bool
) -> None:
    """Random runs, branched from older states, restored and copied: every state dumps as
    the reference's and every check decides as the reference does, with the default
    similarity (trigram sets or bitmasks, by window) and with a plugged-in one."""
    governor = LoopGovernor(
        similarity=(lambda a, b: lexical_similarity(a, b)) if plugged else lexical_similarity,
        semantic_threshold=threshold,
        cycle_window=cycle,
        semantic_window=semantic,
        plateau_steps=2,
        evidence_window=4,
    )
    pool = drive(governor, steps)
    for check in set(decide_as_the_reference(governor, pool[-2:] + pool[:: len(pool) // 3])):
        event(f"decided by {check or 'no check'}")
    failures = min(len(pool[-1][0].failures), semantic)
    event(f"the last state: {'more than 8' if failures > 8 else 'up to 8'} failures in its window")


@pytest.mark.parametrize(("seed", "threshold"), [(1, 0.92), (2, 0.6), (3, 0.6)])
def test_long_runs_decide_as_the_plain_reference(seed: int, threshold: float) -> None:
    """Runs of hundreds of calls, a third of them failed (the semantic check's bitmasks,
    past a few failures), with branches, restores and copies on the way."""
    rng = random.Random(seed)
    steps: list[tuple[Any, ...]] = []
    for _ in range(400):
        at = -1 if rng.random() < 0.95 else -rng.randrange(2, 30)  # a branch: a recent state
        roll = rng.random()
        if roll < 0.9:
            outcome = rng.choice([*SETTLED, "failed", "observe", "observe", "suppressed"])
            steps.append(
                (
                    "call",
                    at,
                    rng.choice(CALLS),
                    f"c{rng.randrange(40)}",
                    outcome,
                    rng.choice(RESULTS) + " " * rng.randrange(3),
                    rng.choice([None, 0.0, 0.1, 0.5, 1.0]),
                )
            )
        elif roll < 0.95:
            steps.append(("settle", at, f"c{rng.randrange(40)}", "ok", rng.choice(RESULTS), 0.0))
        else:
            steps.append((rng.choice(["restore", "copy"]), at))
    # The run ends lookup_order, search, lookup_order, each gaining nothing: a search
    # it has not made yet repeats the block.
    for n, call_made in enumerate([CALLS[9], CALLS[8], CALLS[10]]):
        steps.append(("call", -1, call_made, f"t{n}", "ok", "same", 0.0))
    governor = LoopGovernor(semantic_threshold=threshold, cycle_window=6, evidence_window=4)
    pool = drive(governor, steps)
    assert len(pool[-1][0].failures) > 40
    decided_by = decide_as_the_reference(governor, pool[-3:] + pool[::25])
    assert {"", "exact", "canonical", "semantic", "cycle"} <= set(decided_by)
