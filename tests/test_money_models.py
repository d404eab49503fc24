"""What a model call costs is exact whatever the ambient decimal context, and never negative.

``TokenPrices.cost`` is compared with exact ``Fraction`` arithmetic inside random
``decimal`` contexts (1 to 28 digits, any rounding, any traps, small exponent limits),
as tests/test_money_exact.py does for budgets; prices whose cost per token would need
more than money's 28 decimal places, negative prices and negative costs are refused
where they are made.
"""

from __future__ import annotations

import decimal
import json
from decimal import Decimal
from fractions import Fraction
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from support import exactly
from test_money_exact import contexts

from statemachine import ModelReply, ModelRequest, ModelResponseError, Usage, money_sum
from statemachine.models import OpenAICompatibleModel, TokenPrices
from statemachine.testing import reply, tool_call

PLACES = {1: 0, 1_000: 3, 1_000_000: 6}


def _price(per: int) -> st.SearchStrategy[Decimal]:
    # Any price from the finest a token's cost allows (28 places in all) to 1E+18.
    finest = 28 - PLACES[per]
    return st.just(Decimal(0)) | st.integers(min_value=-finest, max_value=18).flatmap(
        lambda exponent: st.integers(min_value=1, max_value=10 ** (18 - exponent)).map(
            lambda coefficient: Decimal(f"{coefficient}E{exponent}")
        )
    )


pers = st.sampled_from([1, 1_000, 1_000_000])
tokens = st.integers(min_value=0, max_value=10**12)


def exact_cost(prices: TokenPrices, input_tokens: int, output_tokens: int) -> Fraction:
    return (
        input_tokens * Fraction(prices.input) + output_tokens * Fraction(prices.output)
    ) / prices.per


# --- exact costs ------------------------------------------------------------------------


def test_a_cost_under_six_digits_keeps_every_digit() -> None:
    """Under prec=6 a call of 1,234,567 + 654,321 tokens costs 79.8658640596404, not 79.8659."""
    prices = TokenPrices(input=Decimal("12.3456789"), output=Decimal("98.7654321"))
    with decimal.localcontext(prec=6):
        cost = prices.cost(1_234_567, 654_321)
    assert str(cost) == "79.8658640596404"
    assert Fraction(cost) == exact_cost(prices, 1_234_567, 654_321)


@settings(max_examples=200, deadline=None)
@given(
    context=contexts,
    per_and_prices=pers.flatmap(lambda per: st.tuples(st.just(per), _price(per), _price(per))),
    input_tokens=tokens,
    output_tokens=tokens,
)
def test_token_prices_cost_exactly_under_any_context(
    context: decimal.Context,
    per_and_prices: tuple[int, Decimal, Decimal],
    input_tokens: int,
    output_tokens: int,
) -> None:
    """Prices made and costs computed inside a random context equal exact arithmetic."""
    per, input_price, output_price = per_and_prices
    with decimal.localcontext(context):
        prices = TokenPrices.model_validate(
            {"input": input_price, "output": output_price, "per": per}
        )
        cost = prices.cost(input_tokens, output_tokens)
    assert Fraction(cost) == exact_cost(prices, input_tokens, output_tokens)
    exponent = cost.as_tuple().exponent
    assert isinstance(exponent, int)
    assert exponent >= -28


@settings(max_examples=100, deadline=None)
@given(context=contexts, costs=st.lists(_price(1_000_000), max_size=20))
def test_usage_costs_add_up_exactly_under_any_context(
    context: decimal.Context, costs: list[Decimal]
) -> None:
    """Usages made and summed with money_sum inside a random context lose nothing."""
    with decimal.localcontext(context):
        usages = [Usage(cost=cost) for cost in costs]
        total = money_sum(*(usage.cost for usage in usages))
    assert Fraction(total) == sum((Fraction(cost) for cost in costs), Fraction(0))


@pytest.mark.anyio
async def test_the_adapter_prices_a_reply_exactly_under_six_digits() -> None:
    """An OpenAI-compatible reply's cost is exact while the caller's context has 6 digits."""
    body = {
        "choices": [{"message": {"content": "Sunny."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1_234_567, "completion_tokens": 654_321},
    }
    prices = TokenPrices(input=Decimal("12.3456789"), output=Decimal("98.7654321"))
    got = await _complete(body, prices, context=decimal.Context(prec=6))
    assert got.usage == Usage(
        input_tokens=1_234_567, output_tokens=654_321, cost=Decimal("79.8658640596404")
    )


# --- prices money cannot hold -------------------------------------------------------------


@pytest.mark.parametrize(
    ("price", "per", "per_token", "most"),
    [
        ("1E-23", 1_000_000, "1E-29", 22),
        ("0.00000000000000000000000001", 1_000, "1E-29", 25),
        ("12.3456789012345678901234567", 1_000_000, "0.0000123456789012345678901234567", 22),
    ],
)
def test_a_price_finer_than_a_token_can_cost_is_refused(
    price: str, per: int, per_token: str, most: int
) -> None:
    """A token's cost must be money (28 places at most): a finer price fails at construction."""
    with pytest.raises(ValidationError) as caught:
        TokenPrices.model_validate({"output": price, "per": per})
    (error,) = caught.value.errors(include_url=False)
    assert error["msg"] == (
        f"Value error, the output price {Decimal(price)} per {per:,} tokens is {per_token} a "
        "token, which has more than 28 decimal places, so the cost of a call could not be an "
        f"exact amount of money; give a price with at most {most} decimal places per {per:,} "
        "tokens"
    )


def test_the_finest_prices_and_zeros_past_them_are_accepted() -> None:
    """1E-22 per million, 1E-25 per thousand and 1E-28 per token are the finest; zeros are free."""
    assert TokenPrices(input=Decimal("1E-22")).cost(1, 0) == Decimal("1E-28")
    assert TokenPrices(input=Decimal("1E-25"), per=1_000).cost(0, 0) == 0
    assert TokenPrices(output=Decimal("1E-28"), per=1).cost(0, 3) == Decimal("3E-28")
    trailing = Decimal("2.5000000000000000000000000000")  # 28 places, 6 more per million
    assert TokenPrices(input=trailing).cost(2, 0) == Decimal("0.000005")


@pytest.mark.parametrize("field", ["input", "output"])
@pytest.mark.parametrize("price", [Decimal("-0.01"), "-1", -2])
def test_a_negative_price_is_refused_naming_it(field: str, price: Any) -> None:
    """A negative price would pay the run for tokens: refused, naming the price."""
    with pytest.raises(ValidationError) as caught:
        TokenPrices(**{field: price})
    (error,) = caught.value.errors(include_url=False)
    assert error["loc"] == (field,)
    assert error["msg"] == (
        f"Value error, the {field} price must not be negative, got {Decimal(price)}, or calls "
        "would give budget back; give Decimal(0) for free tokens"
    )


def test_a_cost_money_cannot_hold_or_negative_tokens_raise() -> None:
    """Token counts that price to 1E+36 or more, or below zero, are ValueError, not a cost."""
    prices = TokenPrices(input=Decimal("2.50"))
    assert prices.cost(10**41, 0) == Decimal("2.5E+35")
    with pytest.raises(
        ValueError,
        match=exactly(
            f"{4 * 10**41} input and 0 output tokens at these prices cost 1E+36 or more, which "
            "is not an amount of money; check the token counts"
        ),
    ):
        prices.cost(4 * 10**41, 0)
    with pytest.raises(ValueError, match="cost 1E\\+36 or more"):
        prices.cost(10**200, 0)  # more digits than the exact context has
    with pytest.raises(
        ValueError,
        match=exactly("token counts must not be negative, got 0 input and -1 output tokens"),
    ):
        prices.cost(0, -1)


@pytest.mark.anyio
async def test_a_reply_whose_usage_cannot_be_priced_is_a_model_response_error() -> None:
    """A server reporting absurd token counts gets a ModelResponseError, not a ValueError."""
    body = {
        "choices": [{"message": {"content": "hi"}}],
        "usage": {"prompt_tokens": 10**45, "completion_tokens": 0},
    }
    with pytest.raises(ModelResponseError) as raised:
        await _complete(body, TokenPrices(input=Decimal("2.50")))
    assert raised.value.detail == (
        f"usage cannot be priced: {10**45} input and 0 output tokens at these prices cost "
        "1E+36 or more, which is not an amount of money; check the token counts"
    )
    assert "Check that base_url points at an OpenAI-compatible API" in str(raised.value)


# --- a negative cost --------------------------------------------------------------------

NEGATIVE_COST = (
    "Value error, a model call's cost must not be negative, got {}, or calls would give "
    "budget back; report Decimal(0) for a free call"
)


@pytest.mark.parametrize("cost", [Decimal("-0.01"), "-1E-28", -3])
def test_a_negative_usage_cost_is_refused(cost: Any) -> None:
    """Usage(cost=...) below zero fails where it is made, from code or from JSON."""
    for make in (
        lambda: Usage(cost=cost),
        lambda: ModelReply.model_validate({"usage": {"cost": cost}}),
    ):
        with pytest.raises(ValidationError) as caught:
            make()
        (error,) = caught.value.errors(include_url=False)
        assert error["loc"][-1] == "cost"
        assert error["msg"] == NEGATIVE_COST.format(Decimal(cost))


def test_zero_cost_and_the_turn_helpers_still_work() -> None:
    """Zero is a cost; reply() and tool_call() refuse a negative one like Usage does."""
    assert Usage(cost=Decimal(0)).cost == 0
    assert reply("ok", cost="0.002").usage.cost == Decimal("0.002")
    with pytest.raises(ValidationError, match="must not be negative"):
        reply("ok", cost="-0.002")
    with pytest.raises(ValidationError, match="must not be negative"):
        tool_call("lookup", {}, cost="-1")


# --- helpers ------------------------------------------------------------------------------


async def _complete(
    body: dict[str, Any], prices: TokenPrices, *, context: decimal.Context | None = None
) -> ModelReply:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(body).encode())

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = OpenAICompatibleModel("https://example.test/v1", "m", client=client, prices=prices)
        request = ModelRequest(messages=())
        if context is None:
            return await model.complete(request)
        with decimal.localcontext(context):
            return await model.complete(request)
