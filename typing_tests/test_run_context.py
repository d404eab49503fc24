"""Typed dependencies: a tool's RunContext[Deps] must fit its agent's, and a run's deps too.

Every legal line here type-checks with no ignore; every illegal line carries the
ignore of both checkers, which ``warn_unused_ignores`` and
``reportUnnecessaryTypeIgnoreComment`` turn into a failure once the line is legal.
"""

from __future__ import annotations

import attrs
from pydantic import BaseModel

from statemachine import (
    Agent,
    Phase,
    ReadTool,
    RunContext,
    Runner,
    RunResult,
    WriteTool,
    read_tool,
    write_tool,
)
from statemachine.testing import AutoDenyGate, ScriptedModel

from ._fixtures import Ctx, lookup


@attrs.frozen
class Shop:
    """The dependencies of the shop agent: its database's address."""

    dsn: str


@attrs.frozen
class Bank:
    """Another agent's dependencies, to show the two do not mix."""

    iban: str


@attrs.frozen
class LocalShop(Shop):
    """Dependencies that are a Shop and more."""

    city: str = "Oslo"


class StockArgs(BaseModel):
    """Arguments of the tools below."""

    sku: str


@read_tool
async def stock(args: StockArgs, ctx: RunContext[Shop]) -> dict[str, str]:
    """A read tool that needs the shop's dependencies."""
    return {"sku": args.sku, "dsn": ctx.deps.dsn, "run": ctx.run_id}


@write_tool(idempotent=True)
async def reorder(args: StockArgs, ctx: RunContext[Shop]) -> str:
    """A write tool that needs them too, and hands its idempotency key on."""
    return f"{ctx.deps.dsn}:{args.sku}:{ctx.idempotency_key}"


@read_tool(name="balance")
async def balance(args: StockArgs, ctx: RunContext[Bank]) -> str:
    """A tool of another agent: it needs a Bank."""
    return ctx.deps.iban


@read_tool
async def local_stock(args: StockArgs, ctx: RunContext[LocalShop]) -> str:
    """A tool that needs more than a Shop."""
    return ctx.deps.city


@read_tool
async def where(args: StockArgs, ctx: RunContext) -> str:
    """A tool that reads the run but needs no dependencies in particular."""
    return f"{ctx.run_id}@{ctx.step}: {ctx.budget_left.cost} left, {ctx.seconds_left()}s"


def the_decorators_keep_the_dependencies_type() -> None:
    # Legal: a tool's type says what its context asks for; a tool without one asks for
    # nothing (object), and ReadTool[Args] (no second parameter) still names any tool.
    _stock: ReadTool[StockArgs, Shop] = stock
    _reorder: WriteTool[StockArgs, Shop] = reorder
    _old_style: ReadTool[StockArgs] = stock
    _plain: ReadTool[StockArgs, object] = where
    # Rule: a tool that needs a Shop is not a tool that needs a Bank.
    _wrong: ReadTool[StockArgs, Bank] = stock  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


def an_agent_takes_tools_whose_dependencies_fit() -> None:
    # Legal: tools that need its dependencies, a base of them, or none.
    _shop: Agent[Ctx, Shop] = Agent(
        name="shop", deps_type=Shop, tools=[stock, reorder, where, lookup]
    )
    _local: Agent[Ctx, LocalShop] = Agent(name="local", deps_type=LocalShop, tools=[stock])
    # Rule: a tool whose RunContext asks for other dependencies than the agent's.
    Agent(name="shop", deps_type=Shop, tools=[stock, balance])  # type: ignore[list-item]  # pyright: ignore[reportArgumentType]
    # Rule: the same when the agent's type is written out instead.
    _mixed: Agent[Ctx, Shop] = Agent(name="shop", tools=[balance])  # type: ignore[list-item]  # pyright: ignore[reportAssignmentType, reportUnknownVariableType]
    # Rule: a tool that needs a LocalShop cannot run with any Shop.
    Agent(name="shop", deps_type=Shop, tools=[local_stock])  # type: ignore[misc]  # pyright: ignore[reportArgumentType]


async def a_run_is_given_the_agents_dependencies(agent: Agent[Ctx, Shop], ctx: Ctx) -> None:
    runner = Runner(agent, model=ScriptedModel([]), gate=AutoDenyGate(), deps=Shop("db"))
    # Legal: the agent's dependencies, or a subclass of them, to run and resume.
    _ran: RunResult[Ctx] = await runner.run(ctx, "hello", deps=Shop("db"))
    await runner.run(ctx, "hello", deps=LocalShop("db"))
    await runner.resume("run-1", deps=Shop("db"))
    runner.run_sync(ctx, "hello", deps=Shop("db"))
    # Rule: a run given another value than the agent's dependencies.
    await runner.run(ctx, "hello", deps=Bank("NO93"))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: nor a resumed one (dependencies are never checkpointed: it is given them again).
    await runner.resume("run-1", deps=Bank("NO93"))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: nor from synchronous code, nor as events.
    runner.run_sync(ctx, "hello", deps="db")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    runner.events(ctx, "hello", deps=Bank("NO93"))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    runner.resume_events("run-1", deps=Bank("NO93"))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: nor the runner's own (mypy: the agent and the deps make D two types at once).
    Runner(agent, model=ScriptedModel([]), gate=AutoDenyGate(), deps=Bank("NO93"))  # type: ignore[misc]  # pyright: ignore[reportArgumentType]


async def a_tool_reads_only_what_the_context_has(ctx: RunContext[Shop]) -> None:
    # Legal: what every RunContext carries, and the fields of its dependencies.
    _fields = (ctx.deps.dsn, ctx.run_id, ctx.step, ctx.idempotency_key, ctx.deadline)
    _left = (ctx.budget_left.cost, ctx.budget_left.tokens, ctx.spent.cost, ctx.messages)
    # Rule: a field the context does not have.
    ctx.approve  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: a field its dependencies do not have.
    ctx.deps.iban  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: the context is read-only: a tool cannot lower the step or the budget through it.
    ctx.step = 0  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]
    ctx.budget_left = ctx.budget_left  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]


def a_bare_agent_type_still_means_any_dependencies(agent: Agent[Ctx, Shop]) -> None:
    # Legal: Agent[Ctx] (written before agents had dependencies) and Runner[Ctx] take it.
    _any: Agent[Ctx] = agent
    _runner: Runner[Ctx] = Runner(agent, model=ScriptedModel([]), gate=AutoDenyGate())
    # Legal: a phase holds its agent whatever its dependencies.
    _phase: Phase[Ctx] | None = None
