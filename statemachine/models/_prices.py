"""What a model's tokens cost, for the adapters that price their usage."""

from __future__ import annotations

from decimal import Decimal, DecimalException
from typing import Literal, Self

from pydantic import BaseModel, ValidationInfo, field_validator, model_validator

from .._money import EXACT, MONEY_PLACES, Money, money_sum, to_money

__all__ = ["TokenPrices"]


class TokenPrices(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """What a model's tokens cost: exact ``Decimal`` amounts per ``per`` tokens.

    ``TokenPrices(input=Decimal("2.50"), output=Decimal("10"), per=1_000_000)`` is
    $2.50 per million input tokens and $10 per million output tokens. The default
    prices nothing (a local server). A float is refused, as for every ``Money``; so
    is a negative price, and a price whose cost per token needs more than money's 28
    decimal places (``Decimal("1E-23")`` per million is ``1E-29`` a token), so that
    every cost is an exact amount of money.
    """

    input: Money = Decimal(0)
    output: Money = Decimal(0)
    per: Literal[1, 1_000, 1_000_000] = 1_000_000

    @field_validator("input", "output")
    @classmethod
    def _not_negative(cls, price: Decimal, info: ValidationInfo) -> Decimal:
        if price < 0:
            raise ValueError(
                f"the {info.field_name} price must not be negative, got {price}, or calls "
                "would give budget back; give Decimal(0) for free tokens"
            )
        return price

    @model_validator(mode="after")
    def _per_token_is_money(self) -> Self:
        places = _places(self.per)
        for name, price in (("input", self.input), ("output", self.output)):
            per_token = EXACT.scaleb(price, -places)
            try:
                to_money(per_token)
            except ValueError:
                raise ValueError(
                    f"the {name} price {price} per {self.per:,} tokens is {per_token} a "
                    f"token, which has more than {MONEY_PLACES} decimal places, so the cost "
                    "of a call could not be an exact amount of money; give a price with at "
                    f"most {MONEY_PLACES - places} decimal places per {self.per:,} tokens"
                ) from None
        return self

    def cost(self, input_tokens: int, output_tokens: int) -> Decimal:
        """The exact cost of one call, whatever the ambient ``decimal`` context.

        Nothing is rounded: ``per`` is a power of ten and a token's price has at most
        28 decimal places. ``ValueError`` for a negative token count, or a cost of
        ``1E+36`` or more, which is not an amount of money.
        """
        if input_tokens < 0 or output_tokens < 0:
            raise ValueError(
                f"token counts must not be negative, got {input_tokens} input and "
                f"{output_tokens} output tokens"
            )
        try:
            spent = money_sum(
                EXACT.multiply(Decimal(input_tokens), self.input),
                EXACT.multiply(Decimal(output_tokens), self.output),
            )
            return to_money(EXACT.scaleb(spent, -_places(self.per)))
        except (DecimalException, ValueError):
            raise ValueError(
                f"{input_tokens} input and {output_tokens} output tokens at these prices "
                "cost 1E+36 or more, which is not an amount of money; check the token counts"
            ) from None


def _places(per: int) -> int:
    """The decimal places a division by ``per`` (1, 1,000 or 1,000,000) adds."""
    return len(str(per)) - 1
