"""statemachine._tools: tool declaration, read/write call types, and routing model output."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import CityArgs, exactly

from statemachine import (
    Agent,
    ApprovedCall,
    AwaitApproval,
    BadArgumentsError,
    InvalidCall,
    Money,
    ReadCall,
    ReadTool,
    RetryPolicy,
    SetupError,
    ToolRegistry,
    UnknownToolError,
    WriteCall,
    WriteTool,
    canonical_hash,
    dumps,
    read_tool,
    write_tool,
)
from statemachine.testing import hand_approval, hand_built


class QuoteArgs(BaseModel):
    route: str
    max_price: Money


class RefundArgs(BaseModel):
    order: str
    amount: Money


class ScoreArgs(BaseModel):
    score: float
    count: int


class Tools:
    """One read, one priced read, one write and one numeric tool, recording every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, BaseModel]] = []

        @read_tool
        async def weather(args: CityArgs) -> str:
            """Today's weather in a city."""
            self.calls.append(("weather", args))
            return "sunny"

        @read_tool
        async def quote(args: QuoteArgs) -> Decimal:
            """The price of a route."""
            self.calls.append(("quote", args))
            return args.max_price

        @write_tool(idempotent=True, cost=lambda args: args.amount)
        async def refund(args: RefundArgs) -> str:
            """Refund an order."""
            self.calls.append(("refund", args))
            return "refunded"

        @read_tool
        async def score(args: ScoreArgs) -> float:
            """Score something."""
            self.calls.append(("score", args))
            return args.score

        self.weather = weather
        self.quote = quote
        self.refund = refund
        self.score = score
        self.registry = ToolRegistry([weather, quote, refund, score])


@pytest.fixture
def tools() -> Tools:
    return Tools()


# --- declaring tools --------------------------------------------------------------------


def test_read_tool_infers_its_arguments_model_name_and_description(tools: Tools) -> None:
    """@read_tool takes the model from the annotation, name and description from the function."""
    tool = tools.weather
    assert isinstance(tool, ReadTool)
    assert tool.args_model is CityArgs
    assert tool.name == "weather"
    assert tool.description == "Today's weather in a city."
    assert tool.effect == "read"
    assert (tool.timeout, tool.retry, tool.cost) == (10.0, None, None)


def test_write_tool_takes_its_options(tools: Tools) -> None:
    """@write_tool(...) keeps name, description, timeout, retry, idempotency and cost."""
    policy = RetryPolicy(max_attempts=2)

    @write_tool(name="book", description="Book it.", timeout=2.5, retry=policy, idempotent=True)
    async def book_flight(args: RefundArgs) -> None:
        return None

    assert isinstance(book_flight, WriteTool)
    assert book_flight.args_model is RefundArgs
    assert (book_flight.name, book_flight.description) == ("book", "Book it.")
    assert (book_flight.timeout, book_flight.retry) == (2.5, policy)
    assert (book_flight.effect, book_flight.idempotent) == ("write", True)
    assert tools.refund.idempotent is True


def test_a_write_tool_is_not_idempotent_unless_declared() -> None:
    """@write_tool without idempotent=True declares a write that must not be repeated."""

    @write_tool
    async def book(args: RefundArgs) -> None:
        return None

    assert book.idempotent is False


def test_schema_shows_the_model_the_name_description_and_json_schema(tools: Tools) -> None:
    """A tool's schema is its name, description and arguments schema, Money as a number."""
    schema = tools.refund.schema()
    assert schema == {
        "name": "refund",
        "description": "Refund an order.",
        "parameters": RefundArgs.model_json_schema(),
    }
    assert schema["parameters"]["properties"]["amount"]["type"] == "number"


def test_price_is_what_the_cost_function_says_and_zero_without_one(tools: Tools) -> None:
    """A priced tool's call costs the amount its cost function returns; an unpriced one is free."""
    assert tools.refund.price(RefundArgs(order="A-1", amount="12.50")) == Decimal("12.50")
    assert tools.weather.price(CityArgs(city="Oslo")) == Decimal(0)


def test_a_cost_function_that_returns_a_float_is_refused() -> None:
    """A price is money: a cost function returning a float raises instead of charging inexactly."""

    @read_tool(cost=lambda args: 0.1)
    async def lookup(args: CityArgs) -> None:
        return None

    with pytest.raises(
        ValueError, match="^" + re.escape("money must be exact, but got the float 0.1")
    ):
        lookup.price(CityArgs(city="Oslo"))


@pytest.mark.parametrize("decorator", [read_tool, write_tool])
def test_a_sync_function_is_a_setup_error(decorator: Any) -> None:
    """A tool must be async so that its deadline can cancel it."""

    def lookup(args: CityArgs) -> None:
        return None

    message = (
        "tool 'lookup' must be an async function (async def), so that its deadline can cancel it"
    )
    with pytest.raises(SetupError, match=exactly(message)):
        decorator(lookup)


ONE_PARAMETER = (
    "tool 'lookup' must take one parameter annotated with a pydantic model of its arguments, "
    "and may take its run's context second, e.g. async def f(args: FArgs) -> ... or async "
    "def f(args: FArgs, ctx: RunContext[Deps]) -> ..."
)


@pytest.mark.parametrize("decorator", [read_tool, write_tool])
def test_an_unannotated_parameter_is_a_setup_error(decorator: Any) -> None:
    """Without an annotation there is no arguments model to validate against."""

    async def lookup(args):  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(SetupError, match=exactly(ONE_PARAMETER)):
        decorator(lookup)


def test_two_parameters_are_a_setup_error() -> None:
    """A tool takes its arguments as one model, not as several parameters."""

    async def lookup(args: CityArgs, extra: CityArgs) -> None:
        return None

    with pytest.raises(SetupError, match=exactly(ONE_PARAMETER)):
        read_tool(lookup)  # type: ignore[arg-type]


def test_no_parameter_is_a_setup_error() -> None:
    """A tool without a parameter has no arguments model."""

    async def lookup() -> None:
        return None

    with pytest.raises(SetupError, match=exactly(ONE_PARAMETER)):
        read_tool(lookup)  # type: ignore[arg-type]


def test_a_parameter_annotated_with_a_non_model_is_a_setup_error() -> None:
    """The annotation must be a pydantic BaseModel subclass; an int is not."""

    async def lookup(args: int) -> None:
        return None

    message = (
        "tool 'lookup': parameter 'args' is annotated with <class 'int'>; "
        "annotate it with a pydantic BaseModel subclass"
    )
    with pytest.raises(SetupError, match=exactly(message)):
        read_tool(lookup)  # type: ignore[type-var]


def test_a_keyword_only_parameter_is_a_setup_error() -> None:
    """The tool is called with its arguments positionally, so a keyword-only one cannot work."""

    async def lookup(*, args: CityArgs) -> None:
        return None

    with pytest.raises(SetupError):
        read_tool(lookup)  # type: ignore[arg-type]


def test_an_annotation_that_cannot_be_resolved_is_a_setup_error() -> None:
    """A model the annotation names but nobody can import is a SetupError naming the tool."""

    async def lookup(args: NowhereArgs) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(SetupError, match="'lookup'"):
        read_tool(lookup)


# --- the registry -----------------------------------------------------------------------


def test_two_tools_with_one_name_are_a_setup_error(tools: Tools) -> None:
    """Tool names identify tools for the model, so they must be unique."""
    message = "two tools are named 'weather'; tool names must be unique"
    with pytest.raises(SetupError, match=exactly(message)):
        ToolRegistry([tools.weather, tools.weather])


def test_something_that_is_not_a_tool_is_a_setup_error() -> None:
    """Only declared tools go into a registry."""
    message = "'weather' is not a tool; declare it with @read_tool or @write_tool"
    with pytest.raises(SetupError, match=exactly(message)):
        ToolRegistry(["weather"])  # type: ignore[list-item]


def test_registry_lists_its_tools_in_order(tools: Tools) -> None:
    """names, len, in and iteration all follow the order the tools were given."""
    registry = tools.registry
    assert registry.names == ("weather", "quote", "refund", "score")
    assert len(registry) == 4
    assert "refund" in registry
    assert "fly" not in registry
    assert [tool.name for tool in registry] == list(registry.names)
    assert [schema["name"] for schema in registry.schemas()] == list(registry.names)


def test_get_of_an_unknown_name_lists_the_known_tools(tools: Tools) -> None:
    """An unknown name raises UnknownToolError naming every tool the agent has."""
    message = (
        "unknown tool 'fly'; this agent's tools are: weather, quote, refund, score. "
        "Register the tool on the agent or fix the name."
    )
    with pytest.raises(UnknownToolError, match=exactly(message)) as caught:
        tools.registry.get("fly")
    assert caught.value.tool == "fly"
    assert caught.value.known == ("weather", "quote", "refund", "score")


def test_an_empty_registry_says_it_has_no_tools() -> None:
    """With no tools the message says (none) rather than an empty list."""
    message = (
        "unknown tool 'fly'; this agent's tools are: (none). "
        "Register the tool on the agent or fix the name."
    )
    with pytest.raises(UnknownToolError, match=exactly(message)):
        ToolRegistry([]).get("fly")


def test_call_in_code_raises_for_arguments_that_fail_the_schema(tools: Tools) -> None:
    """registry.call is for code: bad arguments raise BadArgumentsError naming the field."""
    message = (
        "arguments for tool 'refund' are invalid: amount: Field required. "
        "Pass arguments that match the tool's schema."
    )
    with pytest.raises(BadArgumentsError, match=exactly(message)) as caught:
        tools.registry.call("refund", '{"order": "A-1"}')
    assert caught.value.problems == ("amount: Field required",)


def test_a_tool_refuses_another_tools_arguments_model(tools: Tools) -> None:
    """Passing a CityArgs to the refund tool is refused, not coerced."""
    message = (
        "arguments for tool 'refund' are invalid: got CityArgs, expected RefundArgs. "
        "Pass arguments that match the tool's schema."
    )
    with pytest.raises(BadArgumentsError, match=exactly(message)):
        tools.refund.call(CityArgs(city="Oslo"))


# --- route ------------------------------------------------------------------------------


def test_route_makes_a_read_call_for_a_read_tool(tools: Tools) -> None:
    """A valid call of a read tool becomes a ReadCall with validated arguments."""
    routed = tools.registry.route("weather", '{"city": "Oslo"}')
    assert type(routed) is ReadCall
    assert routed.tool is tools.weather
    assert routed.args == CityArgs(city="Oslo")
    assert tools.calls == []


def test_route_makes_a_write_call_for_a_write_tool(tools: Tools) -> None:
    """A valid call of a write tool becomes a WriteCall, which still needs approval."""
    routed = tools.registry.route("refund", '{"order": "A-1", "amount": 20}')
    assert type(routed) is WriteCall
    assert routed.tool is tools.refund
    assert tools.calls == []


def test_route_accepts_arguments_as_a_mapping(tools: Tools) -> None:
    """Arguments already parsed into a dict route like the same JSON text."""
    routed = tools.registry.route("refund", {"order": "A-1", "amount": Decimal("20.00")})
    assert isinstance(routed, WriteCall)
    assert routed.args == RefundArgs(order="A-1", amount=Decimal("20.00"))


@pytest.mark.parametrize(("name", "kind"), [("quote", ReadCall), ("refund", WriteCall)])
def test_route_keeps_a_json_number_for_money_exact(tools: Tools, name: str, kind: type) -> None:
    """137.32 from the model becomes Decimal("137.32") in the call's arguments, digit for digit."""
    field = "max_price" if name == "quote" else "amount"
    other = "route" if name == "quote" else "order"
    routed = tools.registry.route(name, f'{{"{other}": "X", "{field}": 137.32}}')
    assert type(routed) is kind
    amount = getattr(routed.args, field)
    assert type(amount) is Decimal
    assert str(amount) == "137.32"


def test_route_turns_an_unknown_tool_into_feedback_naming_the_known_tools(tools: Tools) -> None:
    """An unknown name is not an exception: the model is told which tools exist."""
    routed = tools.registry.route("fly", '{"to": "Oslo"}')
    assert routed == InvalidCall(
        name="fly",
        arguments='{"to": "Oslo"}',
        problems=("unknown tool 'fly'",),
        feedback=(
            "There is no tool named 'fly'. Call one of: weather, quote, refund, score; "
            "or answer without a tool."
        ),
    )


def test_route_turns_json_that_does_not_parse_into_feedback(tools: Tools) -> None:
    """Text that is not JSON becomes an InvalidCall saying so, with the parser's reason."""
    routed = tools.registry.route("weather", "city=Oslo")
    problem = "arguments are not valid JSON (Expecting value: line 1 column 1 (char 0))"
    assert routed == InvalidCall(
        name="weather",
        arguments="city=Oslo",
        problems=(problem,),
        feedback=(
            f"The arguments for weather were not accepted: {problem}. "
            "Call weather again with arguments that match its schema."
        ),
    )


def test_route_refuses_json_that_is_not_an_object(tools: Tools) -> None:
    """Arguments must be a JSON object; an array is refused with that reason."""
    routed = tools.registry.route("weather", '["Oslo"]')
    assert isinstance(routed, InvalidCall)
    assert routed.problems == ("arguments must be a JSON object",)


def test_route_names_the_field_that_failed_the_schema(tools: Tools) -> None:
    """Each problem starts with the field's name, so the model knows what to fix."""
    routed = tools.registry.route("refund", '{"order": "A-1", "amount": "lots"}')
    assert isinstance(routed, InvalidCall)
    assert routed.problems == (
        "amount: Value error, money must be a number like '137.32', got the text 'lots'",
    )
    missing = tools.registry.route("refund", "{}")
    assert isinstance(missing, InvalidCall)
    assert missing.problems == ("order: Field required", "amount: Field required")
    assert missing.feedback == (
        "The arguments for refund were not accepted: order: Field required; "
        "amount: Field required. Call refund again with arguments that match its schema."
    )


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("score", '{"score": NaN, "count": 1}'),
        ("score", '{"score": Infinity, "count": 1}'),
        ("score", '{"score": 1.5, "count": 1e5000}'),
        ("refund", '{"order": "A-1", "amount": 1e5000}'),
        ("refund", '{"order": "A-1", "amount": 1e2000000}'),
        ("weather", '{"city": "\\ud800"}'),
        ("weather", "[" * 100_000),
        ("weather", '{"city": ' * 100_000),
    ],
    ids=[
        "nan-for-a-float",
        "infinity-for-a-float",
        "huge-number-for-an-int",
        "huge-number-for-money",
        "number-beyond-decimal-range",
        "lone-surrogate",
        "deeply-nested-array",
        "deeply-nested-object",
    ],
)
def test_route_answers_hostile_model_output_with_an_invalid_call(
    tools: Tools, name: str, arguments: str
) -> None:
    """Output a model can write (NaN, huge exponents, escapes, deep nesting) never raises."""
    routed = tools.registry.route(name, arguments)
    assert isinstance(routed, InvalidCall)
    assert tools.calls == []


def test_route_answers_a_mapping_holding_nan_with_an_invalid_call(tools: Tools) -> None:
    """A dict from an adapter holding float("nan") is bad model output too, not an exception."""
    routed = tools.registry.route("score", {"score": float("nan"), "count": 1})
    assert isinstance(routed, InvalidCall)


# --- keys and hashes --------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        '{"order": "A-1", "amount": 5}',
        '{"order": "A-1", "amount": 5.0}',
        '{"order": "A-1", "amount": 5.00}',
        '{"amount": 5, "order": "A-1"}',
        '{"order": "A-1", "amount": "5.000"}',
    ],
)
def test_one_call_has_one_key_however_its_amount_is_spelled(tools: Tools, arguments: str) -> None:
    """5, 5.0, "5.000" and key order give the same args_hash and key, which approvals bind to."""
    expected = canonical_hash({"order": "A-1", "amount": 5})
    routed = tools.registry.route("refund", arguments)
    assert isinstance(routed, WriteCall)
    assert routed.args_hash == expected
    assert routed.key == f"refund:{expected}"
    assert routed.describe() == 'refund({"amount":5,"order":"A-1"})'


def test_another_amount_is_another_key(tools: Tools) -> None:
    """5 and 5.01 are different calls with different keys."""
    five = tools.registry.route("refund", '{"order": "A-1", "amount": 5}')
    more = tools.registry.route("refund", '{"order": "A-1", "amount": 5.01}')
    assert isinstance(five, WriteCall)
    assert isinstance(more, WriteCall)
    assert five.key != more.key


def test_one_call_has_one_key_whether_routed_or_built_in_code(tools: Tools) -> None:
    """tool.call(model) and route(name, json) of the same arguments share a key."""
    routed = tools.registry.route("refund", '{"order": "A-1", "amount": 5.0}')
    built = tools.refund.call(RefundArgs(order="A-1", amount=Decimal(5)))
    assert isinstance(routed, WriteCall)
    assert routed.key == built.key


# --- ApprovedCall -----------------------------------------------------------------------


def test_approved_call_has_no_public_constructor(tools: Tools) -> None:
    """Only AwaitApproval.approve makes an ApprovedCall; constructing one directly fails."""
    call = tools.refund.call({"order": "A-1", "amount": 5})
    agent = Agent[None](name="a", tools=[tools.refund])
    waiting = hand_built(AwaitApproval[None], agent=agent, ctx=None, call=call, call_id="c")
    approval = hand_approval(waiting, by="ana", at=datetime(2026, 1, 1, tzinfo=UTC))
    message = (
        "ApprovedCall has no public constructor; a write call is approved by "
        "AwaitApproval.approve(approval)"
    )
    with pytest.raises(SetupError, match=exactly(message)):
        ApprovedCall(call, approval)  # type: ignore[call-arg]
    with pytest.raises(SetupError, match=exactly(message)):
        ApprovedCall(call=call, approval=approval)  # type: ignore[call-arg]


def test_approved_call_refuses_a_forged_token(tools: Tools) -> None:
    """Guessing the private keyword does not help: any token but the library's is refused."""
    call = tools.refund.call({"order": "A-1", "amount": 5})
    agent = Agent[None](name="a", tools=[tools.refund])
    waiting = hand_built(AwaitApproval[None], agent=agent, ctx=None, call=call, call_id="c")
    approval = hand_approval(waiting, by="ana", at=datetime(2026, 1, 1, tzinfo=UTC))
    message = (
        "ApprovedCall has no public constructor; a write call is approved by "
        "AwaitApproval.approve(approval)"
    )
    with pytest.raises(SetupError, match=exactly(message)):
        ApprovedCall(call, approval, _token=cast(Any, object()))


# --- properties -------------------------------------------------------------------------

field_names = st.sampled_from(["city", "route", "max_price", "order", "amount", "score", "count"])
json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.decimals(allow_nan=False, allow_infinity=False, places=2)
    | st.text(max_size=10)
)
json_arguments = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(field_names | st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=8,
).map(dumps)
tool_names = st.sampled_from(["weather", "quote", "refund", "score"]) | st.text(max_size=10)


@settings(max_examples=200, deadline=None)
@given(name=tool_names, arguments=st.text(max_size=40) | json_arguments)
def test_route_never_raises_and_never_runs_a_tool(name: str, arguments: str) -> None:
    """For any name and argument text, route answers a call or an InvalidCall and runs nothing."""
    tools = Tools()
    routed = tools.registry.route(name, arguments)
    assert isinstance(routed, ReadCall | WriteCall | InvalidCall)
    assert tools.calls == []


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        lambda coefficient, exponent: Decimal(f"{coefficient}E{exponent}"),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.integers(min_value=-28, max_value=5),
    )
)
def test_any_amount_sent_as_a_json_number_reaches_the_call_exactly(amount: Decimal) -> None:
    """Whatever amount in money's range the model writes, the WriteCall holds exactly."""
    routed = Tools().registry.route("refund", dumps({"order": "A-1", "amount": amount}))
    assert isinstance(routed, WriteCall)
    assert routed.args.amount == amount  # type: ignore[attr-defined]
