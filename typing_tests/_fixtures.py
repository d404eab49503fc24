"""What the typing tests share: a context type, one read tool and one write tool."""

from __future__ import annotations

from decimal import Decimal

import attrs
from pydantic import BaseModel

from statemachine import Money, read_tool, write_tool


@attrs.frozen
class Ctx:
    """The context type of the agent under test."""

    customer: str


@attrs.frozen
class OtherCtx:
    """Another agent's context type, to show the two do not mix."""

    ticket: int


class LookupArgs(BaseModel):
    """Arguments of ``lookup``."""

    order_id: str


class ChargeArgs(BaseModel):
    """Arguments of ``charge``."""

    order_id: str
    amount: Money


@read_tool
async def lookup(args: LookupArgs) -> dict[str, str]:
    """A read-only tool."""
    return {"order_id": args.order_id, "status": "shipped"}


@write_tool
async def charge(args: ChargeArgs) -> dict[str, str]:
    """A write (irreversible) tool."""
    return {"order_id": args.order_id, "charged": str(args.amount)}


LOOKUP_ARGS = LookupArgs(order_id="A-1")
CHARGE_ARGS = ChargeArgs(order_id="A-1", amount=Decimal("12.50"))
