"""Build your own agent: the complete example from the README (a test keeps them equal)."""

from decimal import Decimal

import anyio
import attrs
from pydantic import BaseModel

from statemachine import Agent, Money, Phases, Planning, Runner, read_tool, write_tool
from statemachine.testing import ScriptedGate, ScriptedModel, reply, tool_call


@attrs.frozen
class ShopContext:  # the agent's own context type
    customer: str


class FindBook(BaseModel):
    title: str


class BuyBook(BaseModel):
    isbn: str
    price: Money  # exact Decimal; a float is refused


@read_tool
async def find_book(args: FindBook) -> dict[str, object]:
    """Look a book up in the catalogue."""
    return {"isbn": "978-0262510875", "title": args.title, "price": Decimal("39.95")}


@write_tool(cost=lambda args: args.price)  # a write tool: every call needs approval
async def buy_book(args: BuyBook) -> dict[str, object]:
    """Charge the customer for a book."""
    return {"order": "B-1", "charged": args.price}


class ShopPlanning(Planning[ShopContext]):  # a subclassed phase
    def instructions(self) -> str:
        return f"You sell books to {self.ctx.customer}. Buy only what they ask for."


shop = Agent(
    name="shop",
    tools=[find_book, buy_book],
    phases=Phases(planning=ShopPlanning),
)


async def main() -> None:
    model = ScriptedModel(  # offline; a real model implements the same protocol
        [
            tool_call("find_book", {"title": "SICP"}),
            tool_call("buy_book", '{"isbn": "978-0262510875", "price": 39.95}'),
            reply("Done: SICP is on its way."),
        ]
    )
    gate = ScriptedGate([True], by="clerk@shop.example")  # a person approves the purchase
    result = await Runner(shop, model=model, gate=gate).run(ShopContext("Ada"), "Buy SICP")
    print(result.trace())
    # Idle -> Planning -> ToolCalling -> Observing -> Planning -> AwaitApproval
    #   -> ToolCalling -> Observing -> Planning -> Responding -> Done


if __name__ == "__main__":
    anyio.run(main)
