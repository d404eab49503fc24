"""A new agent, written as a user would: every line here must type-check with no ignore.

The shop has its own context type, one read tool and two write tools. The second
write tool (``issue_refund``) needs no code of its own: ``route_call`` sends every
write call to ``request_approval`` because its type is ``WriteCall``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import assert_never

import attrs
from pydantic import BaseModel, Field

from statemachine import (
    Active,
    Agent,
    Approval,
    AwaitApproval,
    Budget,
    Done,
    Failed,
    InvalidCall,
    Money,
    Observing,
    Phase,
    Phases,
    Planning,
    ReadCall,
    Retrying,
    Runner,
    RunResult,
    Runtime,
    ToolCalling,
    WriteCall,
    read_tool,
    write_tool,
)
from statemachine.testing import AutoApproveGate, ScriptedModel, reply, tool_call


@attrs.frozen
class ShopCtx:
    """Who is shopping, and in which currency."""

    customer: str
    currency: str = "EUR"


class FindProductArgs(BaseModel):
    """Arguments of find_product."""

    query: str = Field(min_length=1)


class PlaceOrderArgs(BaseModel):
    """Arguments of place_order."""

    sku: str
    quantity: int = Field(ge=1)
    unit_price: Money


class IssueRefundArgs(BaseModel):
    """Arguments of issue_refund."""

    order_id: str
    amount: Money = Field(gt=0)


@read_tool
async def find_product(args: FindProductArgs) -> list[dict[str, str]]:
    """Search the catalogue."""
    return [{"sku": "MUG-1", "name": f"A mug matching {args.query}", "price": "9.90"}]


@write_tool(cost=lambda args: args.unit_price * args.quantity)
async def place_order(args: PlaceOrderArgs) -> dict[str, str]:
    """Order and pay."""
    return {"order_id": "O-1", "sku": args.sku}


@write_tool(idempotent=True)
async def issue_refund(args: IssueRefundArgs) -> dict[str, str]:
    """Refund (part of) an order."""
    return {"order_id": args.order_id, "refunded": str(args.amount)}


class ShopPlanning(Planning[ShopCtx]):
    """Planning whose system prompt names the customer and the currency."""

    def instructions(self) -> str:
        """The shop's system prompt, built from the context."""
        return (
            f"{self.agent.instructions}\n"
            f"Customer: {self.ctx.customer}. Quote prices in {self.ctx.currency}."
        )


def shop_agent() -> Agent[ShopCtx]:
    """The shop agent: the context type comes from its phase classes."""
    return Agent(
        name="shop",
        tools=[find_product, place_order, issue_refund],
        instructions="You sell mugs.",
        budget=Budget(cost=Decimal("100"), tool_calls=5),
        phases=Phases(planning=ShopPlanning),
    )


def route_call(
    planning: Planning[ShopCtx], name: str, arguments: str
) -> ToolCalling[ShopCtx] | AwaitApproval[ShopCtx] | Planning[ShopCtx]:
    """Route the model's call by its type; a new tool of either effect needs no new case."""
    routed = planning.agent.tools.route(name, arguments)
    match routed:
        case ReadCall():
            return planning.call_tool(routed)
        case WriteCall():
            return planning.request_approval(routed)
        case InvalidCall():
            return planning.reject_call(routed)
        case _:
            assert_never(routed)


def refund_waits_for_approval(planning: ShopPlanning) -> AwaitApproval[ShopCtx]:
    """The second write tool's call is a WriteCall like the first: approval is the path."""
    refund = issue_refund.call(IssueRefundArgs(order_id="O-1", amount=Decimal("9.90")))
    return planning.request_approval(refund)


def order_waits_for_approval(planning: ShopPlanning) -> AwaitApproval[ShopCtx]:
    """The first write tool, for comparison: the same call, the same type."""
    order = place_order.call({"sku": "MUG-1", "quantity": 2, "unit_price": "9.90"})
    return planning.request_approval(order)


def search_runs_now(planning: ShopPlanning) -> ToolCalling[ShopCtx]:
    """The read tool runs straight from Planning."""
    return planning.call_tool(find_product.call(FindProductArgs(query="blue mug")))


async def approve_then_run(
    waiting: AwaitApproval[ShopCtx], rt: Runtime
) -> Planning[ShopCtx] | Retrying[ShopCtx] | Failed[ShopCtx]:
    """Approve the exact call, run it, and narrow what came of it."""
    decision = await rt.decide(waiting.request(rt.run_id))
    if not isinstance(decision, Approval):
        return waiting.deny("not approved")
    running = waiting.approve(decision)
    after = await running.execute(rt)
    match after:
        case Observing():
            return after.observe()
        case Retrying() | Failed():
            return after
        case _:
            assert_never(after)


async def retry_once(retrying: Retrying[ShopCtx], rt: Runtime) -> str:
    """A narrowed retry() result: ToolCalling can execute, Failed has a reason."""
    again = await retrying.retry(rt)
    if isinstance(again, ToolCalling):
        after = await again.execute(rt)
        return after.kind
    return again.reason


async def drive(agent: Agent[ShopCtx], rt: Runtime) -> Done[ShopCtx] | Failed[ShopCtx]:
    """The runner's loop, by hand, from a new run."""
    return await advance_to_the_end(agent.start(ShopCtx(customer="Ada"), "A blue mug."), rt)


async def advance_to_the_end(state: Phase[ShopCtx], rt: Runtime) -> Done[ShopCtx] | Failed[ShopCtx]:
    """Advance while the phase is Active.

    The loop starts from a ``Phase`` parameter, as ``Runner.drive`` does: pyright loses
    the loop's later types when the variable starts narrowed to ``Idle`` (README, typing).
    """
    while isinstance(state, Active):
        state = await state.advance(rt)
    if isinstance(state, Done | Failed):
        return state
    raise AssertionError(f"{state.kind} is neither Active nor terminal")


async def run_with_the_runner() -> RunResult[ShopCtx]:
    """The same run through the Runner, on a scripted model and an approving gate."""
    model = ScriptedModel(
        [
            tool_call("find_product", {"query": "blue mug"}),
            tool_call("place_order", {"sku": "MUG-1", "quantity": 1, "unit_price": "9.90"}),
            reply("Your mug is on its way."),
        ]
    )
    runner = Runner(shop_agent(), model=model, gate=AutoApproveGate())
    result = await runner.run(ShopCtx(customer="Ada"), "I'd like a blue mug.")
    final: Phase[ShopCtx] = result.final
    assert final.kind in {"Done", "Failed"}
    return result


async def drive_by_hand() -> Done[ShopCtx] | Failed[ShopCtx]:
    """A Runtime built by hand, for ``drive``."""
    rt = Runtime(run_id="run-1", model=ScriptedModel([reply("Hello")]), gate=AutoApproveGate())
    return await drive(shop_agent(), rt)
