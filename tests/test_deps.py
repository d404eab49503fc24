"""Typed dependencies: declared by the agent, given to each run and each resume, never saved."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from pydantic import BaseModel

from statemachine import (
    Agent,
    ApprovalRequest,
    Approve,
    Done,
    Failed,
    Observing,
    Pending,
    Phases,
    Retrying,
    RunContext,
    Runner,
    RunStatus,
    Runtime,
    SetupError,
    SQLiteCheckpointer,
    ToolCalling,
    read_tool,
    write_tool,
)
from statemachine.testing import (
    AutoApproveGate,
    MemoryCheckpointer,
    ScriptedModel,
    reply,
    tool_call,
)

pytestmark = pytest.mark.anyio


@attrs.define
class Shop:
    """The dependencies of the shop agent: a secret, and what its tools did."""

    api_key: str
    seen: list[str] = attrs.field(factory=list[str])
    charged: list[Decimal] = attrs.field(factory=list[Decimal])


@attrs.define
class LocalShop(Shop):
    """Dependencies that are a Shop and more."""

    city: str = "Oslo"


@attrs.define
class Bank:
    """Another agent's dependencies."""

    iban: str


class StockArgs(BaseModel):
    sku: str


class ChargeArgs(BaseModel):
    amount: Decimal


@read_tool
async def stock(args: StockArgs, ctx: RunContext[Shop]) -> dict[str, Any]:
    """How many of ``sku`` the shop has."""
    ctx.deps.seen.append(f"{ctx.run_id}:{args.sku}")
    return {"sku": args.sku, "count": 3}


@write_tool(idempotent=True)
async def charge(args: ChargeArgs, ctx: RunContext[Shop]) -> dict[str, Any]:
    """Charge the customer."""
    ctx.deps.charged.append(args.amount)
    return {"charged": args.amount}


@read_tool
async def balance(args: StockArgs, ctx: RunContext[Bank]) -> str:
    """A tool of another agent."""
    return ctx.deps.iban


@read_tool
async def city(args: StockArgs, ctx: RunContext[LocalShop]) -> str:
    """A tool that needs more than a Shop."""
    return ctx.deps.city


def shop_agent(**options: Any) -> Agent[None, Shop]:
    return Agent(name="shop", deps_type=Shop, tools=[stock, charge], **options)


STOCK = tool_call("stock", {"sku": "mug"})
CHARGE = tool_call("charge", {"amount": 12.5})


class Later:
    """A gate whose person answers later: every request waits."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> Pending:
        self.requests.append(request)
        return Pending(reason="a person decides later")


def missing(agent: str = "shop", kind: str = "Shop") -> str:
    return (
        f"agent {agent!r} declares its dependencies (deps_type={kind}) and this run was given "
        f"none: pass deps={kind}(...) to Runner.run(ctx, text, deps=...) or "
        "Runner.resume(run_id, deps=...), or once to Runner(agent, ..., deps=...). "
        "Dependencies are never checkpointed, so a resumed run is given them again"
    )


async def test_each_run_gives_its_tools_its_own_dependencies() -> None:
    """Two runs of one runner, two values: each tool call sees its run's."""
    agent = shop_agent()
    runner = Runner(
        agent, model=ScriptedModel([STOCK, reply("3"), STOCK, reply("3")]), gate=AutoApproveGate()
    )
    first, second = Shop("k1"), Shop("k2")
    await runner.run(None, "mugs?", run_id="a", deps=first)
    await runner.run(None, "mugs?", run_id="b", deps=second)
    assert first.seen == ["a:mug"]
    assert second.seen == ["b:mug"]


async def test_the_runners_dependencies_serve_every_run_unless_a_run_brings_its_own() -> None:
    """Runner(deps=...) is the default (a worker's); a run's deps= wins."""
    default, own = Shop("default"), Shop("own")
    model = ScriptedModel([STOCK, reply("3"), STOCK, reply("3")])
    runner = Runner(shop_agent(), model=model, gate=AutoApproveGate(), deps=default)
    await runner.run(None, "mugs?", run_id="a")
    await runner.run(None, "mugs?", run_id="b", deps=own)
    assert default.seen == ["a:mug"]
    assert own.seen == ["b:mug"]


def test_run_sync_and_a_subclass_of_the_dependencies_are_accepted() -> None:
    """A LocalShop is a Shop: the run is given it, synchronously."""
    local = LocalShop("k")
    runner = Runner(shop_agent(), model=ScriptedModel([STOCK, reply("3")]), gate=AutoApproveGate())
    result = runner.run_sync(None, "mugs?", run_id="s", deps=local)
    assert isinstance(result.final, Done)
    assert local.seen == ["s:mug"]


async def test_a_run_without_the_declared_dependencies_is_refused_before_anything_is_saved() -> (
    None
):
    """No deps, no runner deps: a clear SetupError, and the store never hears of the run."""
    store = MemoryCheckpointer()
    model = ScriptedModel([STOCK, reply("3")])
    runner = Runner(shop_agent(), model=model, gate=AutoApproveGate(), checkpointer=store)
    with pytest.raises(SetupError, match=f"^{re.escape(missing())}$"):
        await runner.run(None, "mugs?", run_id="r")
    assert await store.registry() == []
    assert model.requests == []


async def test_events_without_the_declared_dependencies_raise_the_same_error() -> None:
    """Runner.events goes through run: the same refusal comes out of the iteration."""
    runner = Runner(shop_agent(), model=ScriptedModel([]), gate=AutoApproveGate())

    async def drain() -> None:
        async with runner.events(None, "mugs?") as events:
            async for _ in events:
                pass

    with pytest.raises(SetupError, match=f"^{re.escape(missing())}$"):
        await drain()


async def test_a_resume_is_given_the_dependencies_again_and_refused_without_them(
    tmp_path: Path,
) -> None:
    """Paused before a charge; resumed without deps: refused, the run untouched; with: done.

    The dependencies (and their secret) are in no byte of the store's files.
    """
    async with SQLiteCheckpointer(tmp_path / "runs.sqlite3") as store:
        await _pause_resume(store)
    stored = b"".join([await path.read_bytes() async for path in anyio.Path(tmp_path).iterdir()])
    assert b"a mug, please" in stored  # the run's own words are saved
    assert b"secret-key-1" not in stored
    assert b"secret-key-2" not in stored


async def _pause_resume(store: SQLiteCheckpointer) -> None:
    later = Later()
    first = Shop("secret-key-1")
    runner = Runner(
        shop_agent(), model=ScriptedModel([STOCK, CHARGE]), gate=later, checkpointer=store
    )
    paused = await runner.run(None, "a mug, please", run_id="r", deps=first)
    assert paused.status == "paused"
    assert first.seen == ["r:mug"]

    approval = Approve.of(later.requests[-1], by="ada@shop.example")
    resumer = Runner(
        shop_agent(), model=ScriptedModel([reply("Charged.")]), gate=later, checkpointer=store
    )
    with pytest.raises(SetupError, match=f"^{re.escape(missing())}$"):
        await resumer.resume("r", decision=approval)
    record = await store.record("r")
    assert record.status == RunStatus.INTERRUPTED  # nothing changed: it still waits
    assert first.charged == []

    second = Shop("secret-key-2")  # a new process: its own dependencies
    resumed = await resumer.resume("r", decision=approval, deps=second)
    assert isinstance(resumed.final, Done)
    assert second.charged == [Decimal("12.5")]
    assert first.charged == []
    assert (await store.record("r")).status == RunStatus.COMPLETED


async def test_resume_pending_gives_every_run_the_dependencies() -> None:
    """A run whose process died (still running) is resumed with the deps given now."""
    store = MemoryCheckpointer()
    runner = Runner(
        shop_agent(),
        model=ScriptedModel([STOCK, reply("3")]),
        gate=AutoApproveGate(),
        checkpointer=store,
    )
    await runner.submit(None, "mugs?", run_id="p")
    deps = Shop("k")
    with pytest.raises(SetupError, match=f"^{re.escape(missing())}$"):
        await runner.resume_pending()
    (result,) = await runner.resume_pending(deps=deps)
    assert isinstance(result.final, Done)
    assert deps.seen == ["p:mug"]


async def test_dependencies_given_to_an_agent_that_declares_none_are_refused() -> None:
    """Deps where none are declared are a mistake, said so, not ignored."""
    agent: Agent[None] = Agent(name="plain")
    runner = Runner(agent, model=ScriptedModel([reply("hi")]), gate=AutoApproveGate())
    with pytest.raises(
        SetupError,
        match=(
            r"^agent 'plain' declares no dependencies, but the run was given deps=Shop\(\.\.\.\): "
            r"declare them with Agent\(\.\.\., deps_type=Shop\), or run it without deps=$"
        ),
    ):
        await runner.run(None, "hi", deps=Shop("k"))
    with pytest.raises(SetupError, match=r"^agent 'plain' declares no dependencies"):
        Runner(agent, model=ScriptedModel([]), gate=AutoApproveGate(), deps=Shop("k"))


async def test_dependencies_of_another_type_are_refused_at_run_time() -> None:
    """What the type checkers refuse, refused again for code they do not see."""
    runner: Any = Runner(shop_agent(), model=ScriptedModel([]), gate=AutoApproveGate())
    with pytest.raises(
        SetupError,
        match=r"^agent 'shop' declares deps_type=Shop, but the run was given a Bank: pass a Shop$",
    ):
        await runner.run(None, "hi", deps=Bank("NO93"))


def test_an_agent_refuses_a_tool_that_needs_other_dependencies() -> None:
    """Where the agent is defined: a tool's RunContext must ask for the agent's deps or a base."""
    with pytest.raises(
        SetupError,
        match=(
            r"^tool 'balance' takes RunContext\[Bank\], but agent 'shop' declares deps_type=Shop: "
            r"give the tool RunContext\[Shop\] \(or a base of it\), or the agent the dependencies "
            r"the tool needs$"
        ),
    ):
        Agent(name="shop", deps_type=Shop, tools=[stock, balance])  # type: ignore[list-item]
    with pytest.raises(
        SetupError,
        match=r"^tool 'city' takes RunContext\[LocalShop\], but agent 'shop' declares deps_type=",
    ):
        Agent(name="shop", deps_type=Shop, tools=[city])  # type: ignore[misc]
    with pytest.raises(
        SetupError,
        match=(
            r"^tool 'stock' takes RunContext\[Shop\], but agent 'plain' declares no dependencies: "
            r"give Agent\(\.\.\., deps_type=Shop\) and pass deps=\.\.\. to every run$"
        ),
    ):
        Agent(name="plain", tools=[stock])
    # A base of the agent's dependencies is fine: a LocalShop is a Shop.
    assert Agent(name="local", deps_type=LocalShop, tools=[stock, city]).deps_type is LocalShop


class Checking(ToolCalling[None]):
    """A ToolCalling subclass that reads the run's dependencies from the runtime."""

    async def advance(self, rt: Runtime) -> Observing[None] | Retrying[None] | Failed[None]:
        rt.deps_as(Shop).seen.append("phase")
        return await super().advance(rt)


async def test_a_phase_reads_the_dependencies_from_its_runtime() -> None:
    """rt.deps_as(Shop) gives the run's deps; another type is a clear SetupError."""
    agent = Agent(
        name="shop", deps_type=Shop, tools=[stock], phases=Phases[None](tool_calling=Checking)
    )
    deps = Shop("k")
    runner = Runner(agent, model=ScriptedModel([STOCK, reply("3")]), gate=AutoApproveGate())
    await runner.run(None, "mugs?", run_id="x", deps=deps)
    assert deps.seen == ["phase", "x:mug"]
    rt = Runtime(run_id="y", model=ScriptedModel([]), gate=AutoApproveGate(), deps=Bank("NO93"))
    with pytest.raises(
        SetupError,
        match=(
            r"^run 'y' was given dependencies of type Bank, not Shop: pass deps=Shop\(\.\.\.\) to "
            r"the run \(Runner\.run, Runner\.resume\)$"
        ),
    ):
        rt.deps_as(Shop)
