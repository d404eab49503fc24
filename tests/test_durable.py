"""Runs saved after every transition, and stop, resume and abort from the checkpoints."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from support import CityArgs, FakeClock

from statemachine import (
    Agent,
    ApprovalRequest,
    Approve,
    AwaitApproval,
    Budget,
    CheckpointCipher,
    Checkpointer,
    CheckpointKeyError,
    CheckpointTamperedError,
    Decision,
    Denial,
    Done,
    IllegalStatusChangeError,
    LoopGovernor,
    MemoryCheckpointer,
    ModelReply,
    ModelRequest,
    Money,
    Pending,
    RunClaimedError,
    Runner,
    RunStatus,
    SQLiteCheckpointer,
    Verdict,
    dump_phase,
    generate_key,
    load_phase,
    read_tool,
    write_tool,
)
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


class PriceArgs(BaseModel):
    item: str
    price: Money


class Shop:
    """Read tools that count their real calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

        @read_tool
        async def weather(args: CityArgs) -> dict[str, str]:
            self.calls.append(args.city)
            return {"city": args.city, "sky": "sunny"}

        @read_tool
        async def quote(args: PriceArgs) -> dict[str, Any]:
            self.calls.append(args.item)
            return {"item": args.item, "price": args.price}

        self.tools = (weather, quote)

    def agent(self, **options: Any) -> Agent[None]:
        return Agent[None](name="shop", tools=self.tools, **options)


def saving(agent: Agent[None], model: Any, store: Checkpointer) -> Runner[None]:
    """A runner that saves every phase to ``store`` and denies every approval."""
    return Runner(agent, model=model, gate=AutoDenyGate(), checkpointer=store, keep_states=True)


SCRIPT = [
    tool_call("weather", {"city": "Oslo"}, tokens=10, cost="0.01"),
    tool_call("quote", {"item": "umbrella", "price": 137.32}, tokens=10, cost="0.01"),
    reply("Sunny; an umbrella costs $137.32.", tokens=5, cost="0.01"),
]


async def test_every_phase_of_a_run_is_saved_and_the_last_one_loads_back(
    store: Checkpointer,
) -> None:
    """One checkpoint per phase; the latest is the final phase, exactly, money included."""
    shop = Shop()
    runner = saving(shop.agent(), ScriptedModel(SCRIPT), store)
    result = await runner.run(None, "Weather and umbrella?", run_id="run-1")
    assert isinstance(result.final, Done)
    history = await store.history("run-1")
    assert [entry.seq for entry in history] == list(range(len(result.states)))
    assert [entry.phase for entry in history] == list(result.history)
    seq, document = await store.load("run-1")
    restored = load_phase(document, agents={"shop": shop.agent()}, run_id="run-1")
    assert restored == result.final
    assert restored.spent.cost == Decimal("0.03")
    record = await store.record("run-1")
    assert (record.status, record.phase, record.seq) == (RunStatus.COMPLETED, "Done", seq)


class Crashing:
    """A model that answers from a script but raises on one turn, like a crash mid-run."""

    def __init__(self, turns: list[ModelReply], crash_on: int) -> None:
        self.turns = turns
        self.crash_on = crash_on
        self.asked = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.asked += 1
        if self.asked == self.crash_on:
            raise RuntimeError("the process died here")
        return self.turns[self.asked - 1]


async def test_a_phase_that_raises_leaves_a_resumable_run_that_continues_where_it_was(
    store: Checkpointer,
) -> None:
    """Resume re-runs only the phase that did not finish: no tool runs twice, spend goes on."""
    shop = Shop()
    crashing = Crashing(SCRIPT, crash_on=3)
    runner = saving(shop.agent(), crashing, store)
    with pytest.raises(RuntimeError, match="the process died here"):
        await runner.run(None, "Weather and umbrella?", run_id="run-2")
    record = await store.record("run-2")
    assert (record.status, record.phase) == (RunStatus.FAILED_RESUMABLE, "Planning")
    assert shop.calls == ["Oslo", "umbrella"]
    # A new process: a new runner, a model that picks up with the last turn only.
    again = saving(shop.agent(), ScriptedModel(SCRIPT[2:]), store)
    result = await again.resume("run-2")
    assert isinstance(result.final, Done)
    assert shop.calls == ["Oslo", "umbrella"]
    assert result.final.spent.tool_calls == 2
    assert result.final.spent.model_calls == 3
    assert result.final.spent.cost == Decimal("0.03")
    assert result.states[0].step == record.seq
    assert (await store.record("run-2")).status == RunStatus.COMPLETED


class Slow:
    """A model that never answers in time: the run is stopped while it waits."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        await anyio.sleep(10)
        raise AssertionError("not reached")


async def test_a_stopped_run_is_cancelled_at_once_and_resumes_later(store: Checkpointer) -> None:
    """Stop cancels the run, keeps every checkpoint, and resume finishes it."""
    shop = Shop()
    runner = saving(shop.agent(), Slow(), store)
    with anyio.move_on_after(0.1):
        await runner.run(None, "Weather?", run_id="run-3")
    record = await store.record("run-3")
    assert (record.status, record.phase) == (RunStatus.CANCELLED, "Planning")
    again = saving(shop.agent(), ScriptedModel([reply("Sunny.")]), store)
    result = await again.resume("run-3")
    assert isinstance(result.final, Done)
    assert result.history == ("Planning", "Responding", "Done")


def pause_first(loop: Any, ctx: Any) -> Decision:
    if not any(flag.startswith("resumed") for flag in loop.flags):
        return Decision(Verdict.PAUSE, "a person must look at this first", check="review")
    return Decision(Verdict.CONTINUE)


async def test_a_paused_run_waits_as_interrupted_and_needs_a_person_to_resume(
    store: Checkpointer,
) -> None:
    """Paused runs are listed as needing attention and go on only with a person's note."""
    shop = Shop()
    agent = shop.agent(governor=LoopGovernor(checks=(pause_first,)))
    runner = saving(agent, ScriptedModel([]), store)
    result = await runner.run(None, "Weather?", run_id="run-4")
    assert result.status == "paused"
    record = await store.record("run-4")
    assert (record.status, record.waiting_for) == (
        RunStatus.INTERRUPTED,
        "a person must look at this first",
    )
    assert [r.run_id for r in await store.needing_attention()] == ["run-4"]
    again = saving(agent, ScriptedModel([reply("Sunny.")]), store)
    result = await again.resume("run-4", note="ok by ana")
    assert isinstance(result.final, Done)
    assert "resumed: ok by ana" in result.final.loop.flags


async def test_an_aborted_run_keeps_its_record_and_cannot_be_resumed(store: Checkpointer) -> None:
    """Abort is a decision not to go on: the record stays, and resume is refused."""
    shop = Shop()
    runner = saving(shop.agent(), Slow(), store)
    with anyio.move_on_after(0.1):
        await runner.run(None, "Weather?", run_id="run-5")
    record = await runner.abort("run-5")
    assert record.status == RunStatus.ABORTED
    with pytest.raises(IllegalStatusChangeError):
        await runner.resume("run-5")
    assert [entry.seq for entry in await store.history("run-5")] == [0, 1]


async def test_the_budget_continues_across_a_resume(store: Checkpointer) -> None:
    """Spend is part of the state: after a resume the cost budget still counts what was spent."""
    shop = Shop()
    agent = shop.agent(budget=Budget(cost=Decimal("0.02")))
    crashing = Crashing(SCRIPT, crash_on=2)
    runner = saving(agent, crashing, store)
    with pytest.raises(RuntimeError):
        await runner.run(None, "Weather and umbrella?", run_id="run-6")
    again = saving(agent, ScriptedModel(SCRIPT[1:]), store)
    result = await again.resume("run-6")
    assert result.status == "failed"
    assert result.final.reason.startswith("cost budget: ")


class LaterGate:
    """A gate whose person answers later: every request is Pending."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        self.requests.append(request)
        return Pending(reason="sent to the refunds desk")


class RefundArgs(BaseModel):
    order_id: int
    amount: Money


class Payments:
    """A write tool that records every refund it pays."""

    def __init__(self) -> None:
        self.paid: list[Decimal] = []

        @write_tool(cost=lambda args: args.amount)
        async def refund(args: RefundArgs) -> dict[str, Any]:
            self.paid.append(args.amount)
            return {"refunded": args.amount, "order_id": args.order_id}

        self.agent = Agent[None](name="refunds", tools=[refund])


REFUND = [tool_call("refund", '{"order_id": 17, "amount": 137.32}'), reply("Refunded $137.32.")]


async def test_a_run_waiting_for_approval_stops_and_resumes_with_the_persons_decision(
    store: Checkpointer,
) -> None:
    """No decision yet: the run waits, interrupted; resumed with an approval it pays once."""
    payments = Payments()
    runner = Runner(
        payments.agent,
        model=ScriptedModel(REFUND[:1]),
        gate=LaterGate(),
        checkpointer=store,
        keep_states=True,
    )
    result = await runner.run(None, "Refund order 17", run_id="run-7")
    assert result.status == "paused"
    assert isinstance(result.final, AwaitApproval)
    record = await store.record("run-7")
    assert record.status == RunStatus.INTERRUPTED
    # The tool, not its arguments: the registry row is readable without the key.
    assert record.waiting_for == "approval of refund"
    assert payments.paid == []
    waiting = result.final
    approval = Approve.of(waiting.request("run-7"), by="ana@shop.example")
    again = Runner(
        payments.agent,
        model=ScriptedModel(REFUND[1:]),
        gate=LaterGate(),
        checkpointer=store,
        keep_states=True,
    )
    resumed = await again.resume("run-7", decision=approval)
    assert isinstance(resumed.final, Done)
    assert resumed.history[:3] == ("AwaitApproval", "ToolCalling", "Observing")
    assert payments.paid == [Decimal("137.32")]


async def test_a_waiting_run_resumed_with_a_denial_pays_nothing(store: Checkpointer) -> None:
    """Denied at resume: the model is told, nothing is paid."""
    payments = Payments()
    first = Runner(
        payments.agent,
        model=ScriptedModel(REFUND[:1]),
        gate=LaterGate(),
        checkpointer=store,
        keep_states=True,
    )
    await first.run(None, "Refund order 17", run_id="run-8")
    again = Runner(
        payments.agent,
        model=ScriptedModel([reply("The refund was not approved.")]),
        gate=LaterGate(),
        checkpointer=store,
        keep_states=True,
    )
    resumed = await again.resume("run-8", decision=Denial(reason="no receipt", denied_by="ana"))
    assert isinstance(resumed.final, Done)
    assert resumed.history[:2] == ("AwaitApproval", "Planning")
    assert payments.paid == []


async def test_each_turn_is_its_own_run_so_a_waiting_turn_blocks_nothing(
    store: Checkpointer,
) -> None:
    """Turn 1 waits for a refund approval; turn 2 of the same customer runs to the end."""
    payments = Payments()
    waiting = Runner(
        payments.agent,
        model=ScriptedModel(REFUND[:1]),
        gate=LaterGate(),
        checkpointer=store,
        keep_states=True,
    )
    await waiting.run(None, "Refund order 17", run_id="thread-1:turn-1")
    answering = Runner(
        payments.agent,
        model=ScriptedModel([reply("Your order ships Monday.")]),
        gate=LaterGate(),
        checkpointer=store,
        keep_states=True,
    )
    result = await answering.run(None, "When does it ship?", run_id="thread-1:turn-2")
    assert isinstance(result.final, Done)
    assert [r.run_id for r in await store.needing_attention()] == ["thread-1:turn-1"]


async def test_stop_cancels_a_run_at_once_and_keeps_where_it_got(store: Checkpointer) -> None:
    """stop() cancels the phase under way; the result says stopped and the run resumes later."""
    shop = Shop()
    runner = saving(shop.agent(), Slow(), store)
    async with anyio.create_task_group() as group:
        results: list[Any] = []

        async def drive() -> None:
            results.append(await runner.run(None, "Weather?", run_id="run-9"))

        group.start_soon(drive)
        await anyio.sleep(0.05)
        report = await runner.stop("run-9")
    (result,) = results
    assert result.status == "stopped"
    assert result.final.kind == "Planning"
    assert report is not None
    assert (report.run_id, report.phase, report.step) == ("run-9", "Planning", 1)
    assert report.history == ("Idle", "Planning")
    assert (await store.record("run-9")).status == RunStatus.CANCELLED
    assert await runner.stop("run-9") is None
    again = saving(shop.agent(), ScriptedModel([reply("Sunny.")]), store)
    assert isinstance((await again.resume("run-9")).final, Done)


async def test_two_resumes_of_one_run_at_once_let_exactly_one_proceed(tmp_path: Path) -> None:
    """Two workers (two connections to one file) resume the same run: one goes, one is refused."""
    path = tmp_path / "shared.sqlite3"
    async with SQLiteCheckpointer(path) as first_store, SQLiteCheckpointer(path) as second_store:
        shop = Shop()
        with anyio.move_on_after(0.1):
            await saving(shop.agent(), Slow(), first_store).run(None, "Weather?", run_id="run-10")
        answers = ScriptedModel([reply("Sunny.")])
        outcomes: list[str] = []

        async def resume(store: Checkpointer, model: Any) -> None:
            try:
                result = await saving(shop.agent(), model, store).resume("run-10")
                outcomes.append(result.status)
            except RunClaimedError as error:
                outcomes.append(f"refused: {error.run_id}")

        slow_then_done = ScriptedModel([reply("Sunny.")])
        async with anyio.create_task_group() as group:
            group.start_soon(resume, first_store, SlowOnce(answers))
            await anyio.sleep(0.05)
            group.start_soon(resume, second_store, slow_then_done)
        assert sorted(outcomes) == ["done", "refused: run-10"]
        assert (await first_store.record("run-10")).status == RunStatus.COMPLETED


class SlowOnce:
    """Takes a moment before answering, so a second resume arrives while the first runs."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model

    async def complete(self, request: ModelRequest) -> ModelReply:
        await anyio.sleep(0.2)
        return await self.model.complete(request)


async def test_a_claim_lapses_after_its_lease_so_a_dead_worker_never_locks_a_run() -> None:
    """A holder that died stops blocking once its lease is over."""
    store = MemoryCheckpointer()
    assert await store.claim("run-11", "worker-a", lease=timedelta(seconds=0))
    assert await store.claim("run-11", "worker-b")
    assert not await store.claim("run-11", "worker-a")
    await store.release("run-11", "worker-b")
    assert await store.claim("run-11", "worker-a")


class Ticking:
    """A model that takes 50 s of a fake clock per call and records the time it was given."""

    def __init__(self, clock: Any, turns: list[ModelReply], crash_on: int = 0) -> None:
        self.clock = clock
        self.turns = turns
        self.crash_on = crash_on
        self.timeouts: list[float | None] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.timeouts.append(request.timeout)
        self.clock.advance(50)
        if len(self.timeouts) == self.crash_on:
            raise RuntimeError("the process died here")
        return self.turns[len(self.timeouts) - 1]


async def test_the_run_clock_goes_on_after_a_resume(store: Checkpointer) -> None:
    """Time used before a crash still counts: the resumed model call gets only what is left."""
    shop = Shop()
    agent = shop.agent(budget=Budget(wall_clock=120))
    before = FakeClock()
    first = Ticking(before, [tool_call("weather", {"city": "Oslo"})], crash_on=2)
    runner = Runner(
        agent, model=first, gate=AutoDenyGate(), clock=before, checkpointer=store, keep_states=True
    )
    with pytest.raises(RuntimeError):
        await runner.run(None, "Weather?", run_id="run-12")
    assert first.timeouts == [120, 70]
    after = FakeClock(start=1_000.0)  # a new process: its monotonic clock means nothing here
    second = Ticking(after, [reply("Sunny.")])
    again = Runner(
        agent, model=second, gate=AutoDenyGate(), clock=after, checkpointer=store, keep_states=True
    )
    result = await again.resume("run-12")
    assert isinstance(result.final, Done)
    assert second.timeouts == [pytest.approx(70)]


class Killed(BaseException):
    """Stands for SIGKILL: nothing in the process gets to record what happened."""


class DiesOnce:
    """A model that kills its process on one turn (a BaseException no handler sees)."""

    def __init__(self, turns: list[ModelReply], die_on: int) -> None:
        self.turns = turns
        self.die_on = die_on
        self.asked = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.asked += 1
        if self.asked == self.die_on:
            raise Killed
        return self.turns[self.asked - 1]


async def test_start_up_resumes_crashed_runs_but_never_one_waiting_before_a_money_move(
    store: Checkpointer,
) -> None:
    """A died run and a failed one are resumed at start-up; a refund awaiting a person is not."""
    payments = Payments()
    refund_then_answer = [*REFUND[:1], reply("Done.")]
    died = Runner(payments.agent, model=DiesOnce(refund_then_answer, 1), gate=LaterGate(),
                  checkpointer=store, keep_states=True)  # fmt: skip
    with pytest.raises(Killed):
        await died.run(None, "Hello", run_id="died")
    failed = Runner(payments.agent, model=Crashing(refund_then_answer, 1), gate=LaterGate(),
                    checkpointer=store, keep_states=True)  # fmt: skip
    with pytest.raises(RuntimeError):
        await failed.run(None, "Hello", run_id="failed")
    waiting = Runner(payments.agent, model=ScriptedModel(REFUND[:1]), gate=LaterGate(),
                     checkpointer=store, keep_states=True)  # fmt: skip
    await waiting.run(None, "Refund order 17", run_id="waiting")
    assert (await store.record("died")).status == RunStatus.RUNNING
    start_up = Runner(
        payments.agent,
        model=ScriptedModel([reply("Hello again."), reply("Hello again.")]),
        gate=LaterGate(),
        checkpointer=store,
        keep_states=True,
    )
    results = await start_up.resume_pending()
    assert sorted(result.run_id for result in results) == ["died", "failed"]
    assert all(result.status == "done" for result in results)
    assert (await store.record("waiting")).status == RunStatus.INTERRUPTED
    assert payments.paid == []


async def test_a_checkpoint_read_with_the_wrong_key_is_refused_and_nothing_else_is_touched(
    tmp_path: Path,
) -> None:
    """A wrong key never loads a run: a clear error names it; the other key's runs still load."""
    path = tmp_path / "runs.sqlite3"
    right = CheckpointCipher({"k1": generate_key()}, "k1")
    async with SQLiteCheckpointer(path, sealer=right) as store:
        await saving(Shop().agent(), ScriptedModel(SCRIPT), store).run(None, "Hi", run_id="run-13")
    wrong = CheckpointCipher({"k1": generate_key()}, "k1")
    async with SQLiteCheckpointer(path, sealer=wrong) as store:
        with pytest.raises(CheckpointTamperedError) as caught:
            await store.load("run-13")
        assert "run-13" in str(caught.value)
    unknown = CheckpointCipher({"k2": generate_key()}, "k2")
    async with SQLiteCheckpointer(path, sealer=unknown) as store:
        with pytest.raises(CheckpointKeyError) as missing:
            await store.load("run-13")
        assert "k1" in str(missing.value)
    async with SQLiteCheckpointer(path, sealer=right) as store:
        seq, _ = await store.load("run-13")
        assert seq == len(await store.history("run-13")) - 1


async def test_a_resumed_run_saves_deltas_from_the_loaded_checkpoint_exactly(
    store: Checkpointer,
) -> None:
    """A resume's saves go on from the document it loaded (the store's ops, not a diff):
    what is stored after it is exactly the dump of each phase it went through."""
    shop = Shop()
    runner = saving(shop.agent(), Crashing(SCRIPT, crash_on=3), store)
    with pytest.raises(RuntimeError, match="the process died here"):
        await runner.run(None, "Weather and umbrella?", run_id="run-d")
    loaded = (await store.load("run-d"))[0]
    again = saving(shop.agent(), ScriptedModel(SCRIPT[2:]), store)
    result = await again.resume("run-d")
    assert isinstance(result.final, Done)
    seq, document = await store.load("run-d")
    assert seq > loaded
    assert {key: value for key, value in document.items() if key != "elapsed"} == dump_phase(
        result.final
    )
    restored = load_phase(document, agents={"shop": shop.agent()}, run_id="run-d")
    assert restored == result.final
