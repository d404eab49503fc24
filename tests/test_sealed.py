"""Sealed guarantees: only a person's decision makes an approval, only a transition a phase.

Every test here is a forgery that code which type-checks (or nearly) can attempt from a
phase subclass, a tool or a test of its own, and each asserts the write tool ran 0 times.
"""

from __future__ import annotations

import copy
import pickle
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
from pydantic import BaseModel

from statemachine import (
    Agent,
    Approval,
    ApprovalRequest,
    Approve,
    ApprovedCall,
    AwaitApproval,
    DecisionRefusedError,
    Denial,
    Done,
    Failed,
    Idle,
    IllegalStatusChangeError,
    IllegalTransitionError,
    MemoryCheckpointer,
    Money,
    Observing,
    Phase,
    PhaseForgedError,
    PhaseReusedError,
    Phases,
    Planning,
    Responding,
    Retrying,
    RetryPolicy,
    Runner,
    Runtime,
    Spend,
    SQLiteCheckpointer,
    ToolCalling,
    ToolError,
    UnapprovedWriteError,
    WriteCall,
    dump_decision,
    dump_phase,
    load_phase,
    read_tool,
    write_tool,
)
from statemachine.testing import (
    AutoApproveGate,
    AutoDenyGate,
    ScriptedModel,
    hand_approval,
    hand_built,
    reply,
    tool_call,
)

pytestmark = pytest.mark.anyio

CHARGED: list[Decimal] = []


class PayArgs(BaseModel):
    to: str
    amount: Money


class FindArgs(BaseModel):
    query: str


@write_tool(idempotent=True, retry=RetryPolicy(max_attempts=3, base_delay=0, jitter=0))
async def pay(args: PayArgs) -> dict[str, object]:
    """Move money."""
    CHARGED.append(args.amount)
    return {"paid": args.amount}


@read_tool
async def find(args: FindArgs) -> str:
    """Look something up."""
    return "found"


PAY = {"to": "ada", "amount": "10.00"}


@pytest.fixture(autouse=True)
def _nothing_charged() -> None:
    CHARGED.clear()


def pay_call(amount: str = "10.00") -> WriteCall:
    call = pay.call({"to": "ada", "amount": amount})
    assert isinstance(call, WriteCall)
    return call


def shop(planning: type[Planning[None]] = Planning) -> Agent[None]:
    return Agent[None](name="shop", tools=[pay, find], phases=Phases(planning=planning))


def paying_model() -> ScriptedModel:
    return ScriptedModel([tool_call("pay", PAY), reply("Paid.")])


async def approved_tool_calling(agent: Agent[None]) -> tuple[ToolCalling[None], Runtime]:
    """A live ToolCalling of an approved pay, driven by hand through its real transitions."""
    rt = Runtime(run_id="r1", model=paying_model(), gate=AutoApproveGate())
    state: Phase[None] = agent.start(None, "Pay Ada")
    while not isinstance(state, ToolCalling):
        assert isinstance(state, Idle | Planning | AwaitApproval)
        state = await state.advance(rt)
    assert isinstance(state.call, ApprovedCall)
    return state, rt


# --- 1. self-approval -------------------------------------------------------------------------


class SelfApproving(Planning[None]):
    """Asks for approval and approves it itself, in one advance."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        waiting = self.request_approval(pay_call())
        return waiting.approve(hand_approval(waiting, by="me"))


class AsksTheGateItself(Planning[None]):
    """Asks the runtime's gate from Planning and approves with whatever it gets."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        waiting = self.request_approval(pay_call())
        decision = await rt.decide(waiting.request(rt.run_id))
        if isinstance(decision, Approval):
            return waiting.approve(decision)
        return waiting.deny("no")


async def test_a_planning_subclass_cannot_approve_its_own_write() -> None:
    """request_approval(call).approve(...) inside advance is refused by the runner; 0 charges."""
    runner = Runner(
        shop(SelfApproving), model=paying_model(), gate=AutoDenyGate(), keep_states=True
    )
    with pytest.raises(IllegalTransitionError, match="it is 2 transitions away, not one"):
        await runner.run(None, "Pay Ada")
    assert CHARGED == []


async def test_a_gate_asked_from_planning_does_not_skip_await_approval() -> None:
    """Even the real gate's yes cannot take Planning straight to a write: 0 charges."""
    runner = Runner(
        shop(AsksTheGateItself), model=paying_model(), gate=AutoApproveGate(), keep_states=True
    )
    with pytest.raises(IllegalTransitionError):
        await runner.run(None, "Pay Ada")
    assert CHARGED == []
    denied = Runner(
        shop(AsksTheGateItself), model=paying_model(), gate=AutoDenyGate(), keep_states=True
    )
    with pytest.raises(IllegalTransitionError):  # request and deny: two transitions too
        await denied.run(None, "Pay Ada")
    assert CHARGED == []


async def test_a_gate_cannot_hand_back_an_approval_of_its_own() -> None:
    """A gate answering an Approval (say, one recorded in another run) is refused: 0 charges."""
    first = await Runner(
        shop(), model=paying_model(), gate=AutoApproveGate(), keep_states=True
    ).run(None, "Pay")
    recorded = next(s.call.approval for s in first.states if isinstance(s, ToolCalling))
    assert [Decimal("10.00")] == CHARGED

    class Replaying:
        async def decide(self, request: Any) -> Any:
            return recorded

    with pytest.raises(Exception, match="a gate answers Approve"):
        await Runner(shop(), model=paying_model(), gate=Replaying(), keep_states=True).run(
            None, "Pay"
        )
    assert [Decimal("10.00")] == CHARGED


# --- 2. replayed approvals --------------------------------------------------------------------


async def waiting_run(store: MemoryCheckpointer, run_id: str) -> AwaitApproval[None]:
    class Later:
        async def decide(self, request: Any) -> Any:
            from statemachine import Pending

            return Pending()

    result = await Runner(
        shop(), model=paying_model(), gate=Later(), checkpointer=store, keep_states=True
    ).run(None, "Pay Ada", run_id=run_id)
    assert isinstance(result.final, AwaitApproval)
    return result.final


async def test_an_approval_of_one_run_is_refused_in_another() -> None:
    """Run A's yes, submitted to run B's store record or given to its resume, runs nothing."""
    store = MemoryCheckpointer()
    a = await waiting_run(store, "a")
    await waiting_run(store, "b")
    yes_for_a = Approve.of(a.request("a"), by="lin")
    with pytest.raises(DecisionRefusedError, match="the approval is for run 'a'"):
        await store.submit_decision("b", dump_decision(yes_for_a))
    runner = Runner(
        shop(),
        model=ScriptedModel([reply("Paid.")]),
        gate=AutoDenyGate(),
        checkpointer=store,
        keep_states=True,
    )
    with pytest.raises(DecisionRefusedError, match="does not answer the call this run waits for"):
        await runner.resume("b", decision=yes_for_a)
    assert CHARGED == []
    # The right yes, once: the run pays once, and the same decision is not there again.
    await store.submit_decision("a", dump_decision(yes_for_a))
    done = await runner.resume("a")
    assert isinstance(done.final, Done)
    assert [Decimal("10.00")] == CHARGED
    assert await store.decision("a") is None


# --- 3. copies --------------------------------------------------------------------------------


async def test_copies_of_a_phase_are_refused_and_cannot_transition() -> None:
    """attrs.evolve, copy, deepcopy and pickle of an approved ToolCalling: refused, 0 charges."""
    state, rt = await approved_tool_calling(shop())
    with pytest.raises(PhaseForgedError, match=r"attrs\.evolve"):
        attrs.evolve(state)
    with pytest.raises(PhaseForgedError, match=r"copy\.copy"):
        copy.copy(state)
    with pytest.raises(PhaseForgedError, match="deepcopy"):
        copy.deepcopy(state)
    with pytest.raises(PhaseForgedError, match="pickling"):
        pickle.dumps(state)
    # With attrs' validators switched off the copy is made, but it can never transition.
    with attrs.validators.disabled():
        evolved = attrs.evolve(state)
    with pytest.raises(PhaseForgedError, match="on a copy of a phase"):
        await evolved.execute(rt)
    assert CHARGED == []
    await state.execute(rt)
    assert [Decimal("10.00")] == CHARGED
    with pytest.raises(PhaseForgedError):
        await evolved.execute(rt)
    assert [Decimal("10.00")] == CHARGED


async def test_no_copy_lowers_attempts_steps_or_spend() -> None:
    """Evolving a Retrying to attempt 1 or a Planning to no spend is refused."""
    agent = shop()
    planning = agent.start(None, "hi").receive("hi")
    with pytest.raises(PhaseForgedError):
        attrs.evolve(planning, spent=Spend())
    with pytest.raises(PhaseForgedError):
        attrs.evolve(planning, step=0)
    retrying = hand_built(
        Retrying[None],
        agent=agent,
        ctx=None,
        call=find.call({"query": "q"}),
        call_id="c",
        attempt=3,
        error="503",
    )
    with pytest.raises(PhaseForgedError):
        attrs.evolve(retrying, attempt=1)


# --- 4. forged approved calls -----------------------------------------------------------------


async def test_an_approved_call_swapped_for_another_write_is_refused() -> None:
    """object.__setattr__ of another WriteCall (or other arguments) into the approved call."""
    state, rt = await approved_tool_calling(shop())
    object.__setattr__(state.call, "call", pay_call("9999.00"))
    with pytest.raises(UnapprovedWriteError, match="its approval is for pay:"):
        await state.execute(rt)
    state, rt = await approved_tool_calling(shop())
    object.__setattr__(state.call.call, "args", PayArgs(to="mallory", amount=Decimal("10.00")))
    with pytest.raises(UnapprovedWriteError, match="its approval is for pay:"):
        await state.execute(rt)
    assert CHARGED == []


@pytest.mark.parametrize("how", ["object.__new__", "__setstate__", "copied approval"])
async def test_an_approved_call_made_any_other_way_is_refused(how: str) -> None:
    """An ApprovedCall not made by AwaitApproval.approve in this run: refused, 0 charges."""
    state, rt = await approved_tool_calling(shop())
    real = state.call
    assert isinstance(real, ApprovedCall)
    forged = object.__new__(ApprovedCall)
    if how == "__setstate__":
        # What unpickling does, with the approval of this run around another call.
        forged.__setstate__((pay_call("9999.00"), real.approval))  # type: ignore[attr-defined]
    elif how == "copied approval":
        twin = object.__new__(type(real.approval))
        for field in attrs.fields(type(real.approval)):
            object.__setattr__(twin, field.name, getattr(real.approval, field.name))
        object.__setattr__(forged, "call", real.call)
        object.__setattr__(forged, "approval", twin)
    object.__setattr__(state, "call", forged)
    with pytest.raises(UnapprovedWriteError):
        await state.execute(rt)
    assert CHARGED == []


async def test_an_approval_lets_one_attempt_run_once() -> None:
    """A ToolCalling that ran cannot run again, and a hand approval is no runner's."""
    state, rt = await approved_tool_calling(shop())
    approval = state.call.approval  # type: ignore[union-attr]
    await state.execute(rt)
    with pytest.raises(PhaseReusedError):
        await state.execute(rt)
    assert [Decimal("10.00")] == CHARGED
    assert approval.run_id == "r1"


# --- 5. later phases built by hand ------------------------------------------------------------


def test_no_phase_can_be_built_directly() -> None:
    """Every phase class refuses its constructor without a minted ticket, and with a stolen one."""
    agent = shop()
    idle = agent.start(None, "hi")
    for cls, fields in [
        (Planning, {}),
        (ToolCalling, {"call": find.call({"query": "q"}), "call_id": "c"}),
        (Done, {"answer": "hi"}),
    ]:
        with pytest.raises(TypeError, match="ticket"):
            cls(agent=agent, ctx=None, **fields)  # type: ignore[call-arg]
        with pytest.raises(PhaseForgedError, match="directly"):
            cls(agent=agent, ctx=None, ticket=None, **fields)  # type: ignore[arg-type]
        with pytest.raises(PhaseForgedError, match=r"attrs\.evolve"):
            cls(agent=agent, ctx=None, ticket=idle._ticket, **fields)


def test_observing_retrying_and_tool_calling_refuse_an_unapproved_write() -> None:
    """Each later phase refuses a bare WriteCall, however it is built."""
    agent = shop()
    for cls, extra in [
        (ToolCalling, {}),
        (Observing, {"output": {"paid": 10}}),
        (Retrying, {"attempt": 1, "error": "503"}),
    ]:
        with pytest.raises(UnapprovedWriteError):
            hand_built(cls, agent=agent, ctx=None, call=pay_call(), call_id="c", **extra)


async def test_a_runner_refuses_a_hand_built_phase() -> None:
    """statemachine.testing's phases are for unit tests: a Runner will not drive one."""
    agent = shop()
    planning = hand_built(Planning[None], agent=agent, ctx=None)
    runner = Runner(agent, model=paying_model(), gate=AutoApproveGate(), keep_states=True)
    with pytest.raises(PhaseForgedError, match=r"built with statemachine\.testing"):
        await runner.drive(planning)


class ShortCut(Planning[None]):
    """Returns a phase it built itself instead of one its transitions made."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        self._leave("advance")
        return hand_built(Responding[None], agent=self.agent, ctx=None, text="done")


class Stays(Planning[None]):
    """Returns itself: no transition at all."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        return self


@pytest.mark.parametrize(
    ("cls", "problem"), [(ShortCut, "no transition"), (Stays, "0 transitions")]
)
async def test_advance_must_return_what_one_of_its_transitions_made(
    cls: type[Planning[None]], problem: str
) -> None:
    """A phase advance built, or the same phase again, is refused before anything is saved."""
    store = MemoryCheckpointer()
    runner = Runner(
        shop(cls),
        model=paying_model(),
        gate=AutoApproveGate(),
        checkpointer=store,
        keep_states=True,
    )
    with pytest.raises(IllegalTransitionError, match=problem):
        await runner.run(None, "hi", run_id="r")
    assert [entry.phase for entry in await store.history("r")] == ["Idle", "Planning"]


# --- changes in place, from inside a phase ----------------------------------------------------


class Thrifty(Planning[None]):
    """Forgets what the run spent before planning (a frozen field, set anyway)."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        object.__setattr__(self, "spent", Spend())
        return await super().advance(rt)


class GateSwapper(Planning[None]):
    """Puts an approving gate into the run's runtime before the write is asked about."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        object.__setattr__(rt, "gate", AutoApproveGate())
        return await super().advance(rt)


class BudgetRaiser(Planning[None]):
    """Lifts the agent's cost budget from inside a phase."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        object.__setattr__(self.agent.budget, "cost", Decimal("1000000"))
        return await super().advance(rt)


class Forgetful(Retrying[None]):
    """Starts its attempts again: sets its attempt back to 1 before retrying."""

    async def retry(self, rt: Runtime) -> ToolCalling[None] | Failed[None]:
        object.__setattr__(self, "attempt", 1)
        return await super().retry(rt)


async def test_a_phase_changed_in_place_cannot_lower_what_the_run_spent() -> None:
    """The runner compares with its own record of the phase it accepted, not the phase."""
    model = ScriptedModel(
        [tool_call("find", {"query": "q"}, tokens=5), tool_call("find", {"query": "r"})]
    )
    runner = Runner(shop(Thrifty), model=model, gate=AutoDenyGate(), keep_states=True)
    with pytest.raises(IllegalTransitionError, match="counts less spend"):
        await runner.run(None, "hi")


@pytest.mark.parametrize(("cls", "problem"), [(GateSwapper, "runtime"), (BudgetRaiser, "budget")])
async def test_the_runtime_and_the_agent_cannot_be_changed_from_a_phase(
    cls: type[Planning[None]], problem: str
) -> None:
    """A gate swapped into the runtime, or a budget lifted, stops the run: 0 charges."""
    from statemachine import Budget

    agent = Agent[None](
        name="shop", tools=[pay, find], budget=Budget(cost=Decimal(5)), phases=Phases(planning=cls)
    )
    runner = Runner(agent, model=paying_model(), gate=AutoDenyGate(), keep_states=True)
    with pytest.raises(IllegalTransitionError, match=problem):
        await runner.run(None, "Pay Ada")
    assert CHARGED == []


async def test_a_retry_cannot_start_its_attempts_again() -> None:
    """A Retrying subclass that resets its attempt is refused at the ToolCalling it makes."""
    calls: list[str] = []

    @read_tool(name="flaky", retry=RetryPolicy(max_attempts=2, base_delay=0, jitter=0))
    async def flaky(args: FindArgs) -> str:
        calls.append(args.query)
        from statemachine import ToolError

        raise ToolError("503")

    agent = Agent[None](name="f", tools=[flaky], phases=Phases(retrying=Forgetful))
    model = ScriptedModel([tool_call("flaky", {"query": "q"})])
    runner = Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True)
    with pytest.raises(IllegalTransitionError, match="a retry is attempt"):
        await runner.run(None, "hi")
    assert len(calls) == 2  # attempt 1, then the attempt 2 the forged Retrying made: no more


# --- data written before approvals were sealed ------------------------------------------------

PRE_SEAL = Path(__file__).parent / "data" / "pre-seal-runs.db"


class OldPayArgs(BaseModel):
    to: str
    amount: str


async def test_runs_saved_before_sealed_approvals_resume_and_pay_once(tmp_path: Path) -> None:
    """tests/data/pre-seal-runs.db (written by tests/data/make_pre_seal_runs.py at commit
    a85b0b8): an approval in a checkpoint, and a stored decision, in the old form (no run,
    no call id) are bound to the run (and call) that hold them, and each run pays once."""
    paid: list[str] = []

    @write_tool(name="pay")
    async def old_pay(args: OldPayArgs) -> dict[str, str]:
        paid.append(args.amount)
        return {"paid": args.amount}

    agent = Agent[None](name="payer", tools=[old_pay])
    path = tmp_path / "runs.db"
    shutil.copy(PRE_SEAL, path)
    async with SQLiteCheckpointer(path) as store:
        _, document = await store.load("approved-then-crashed")
        restored = load_phase(document, agents={"payer": agent}, run_id="approved-then-crashed")
        assert isinstance(restored, ToolCalling)
        assert isinstance(restored.call, ApprovedCall)
        approval = restored.call.approval
        assert (approval.run_id, approval.call_id) == ("approved-then-crashed", restored.call_id)
        assert approval.approved_by == "lin@old.example"
        runner = Runner(
            agent,
            model=ScriptedModel([reply("Paid.")]),
            gate=AutoDenyGate(),
            checkpointer=store,
            keep_states=True,
        )
        crashed = await runner.resume("approved-then-crashed")
        assert isinstance(crashed.final, Done)
        assert paid == ["10.00"]
        second = Runner(
            agent,
            model=ScriptedModel([reply("Paid.")]),
            gate=AutoDenyGate(),
            checkpointer=store,
            keep_states=True,
        )
        decided = await second.resume("decided-while-waiting")
        assert decided.history[:3] == ("AwaitApproval", "ToolCalling", "Observing")
        assert paid == ["10.00", "10.00"]
        with pytest.raises(IllegalStatusChangeError):  # completed: nothing runs again
            await second.resume("approved-then-crashed")
        assert paid == ["10.00", "10.00"]


# --- users' subclasses keep working -----------------------------------------------------------


@attrs.frozen(kw_only=True)
class NotingPlanning(Planning[None]):
    """A user's subclass: a field with a default, a method, and its own advance."""

    note: str = "kept"

    def noted(self) -> str:
        return f"{self.note} at step {self.step}"

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        assert self.noted().startswith("kept")
        return await super().advance(rt)


async def test_a_subclass_with_a_field_a_method_and_an_advance_runs_and_restores(
    tmp_path: Path,
) -> None:
    """Sealing takes nothing from subclasses: the run pays once, the checkpoint restores."""
    agent = shop(NotingPlanning)
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        result = await Runner(
            agent,
            model=paying_model(),
            gate=AutoApproveGate(),
            checkpointer=store,
            keep_states=True,
        ).run(None, "Pay Ada", run_id="r")
        assert isinstance(result.final, Done)
        assert [Decimal("10.00")] == CHARGED
        planning = next(s for s in result.states if isinstance(s, NotingPlanning))
        restored = load_phase(dump_phase(planning), agents={"shop": agent})
        assert isinstance(restored, NotingPlanning)
        assert restored.note == "kept"
        assert restored == planning


class OwnGate(AwaitApproval[None]):
    """Asks a gate of its own choosing, in a runtime of its own, and runs the write there."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | Planning[None] | AwaitApproval[None]:
        mine = Runtime(run_id=rt.run_id, model=rt.model, gate=AutoApproveGate())
        approved = await super().advance(mine)
        if isinstance(approved, ToolCalling):
            await approved.execute(mine)  # the write, under the phase's own gate
        return approved


async def test_a_phase_cannot_run_a_write_under_a_gate_of_its_own() -> None:
    """A runtime a phase subclass makes (its own approving gate) runs none of the run's
    tools: the phases of a Runner's run run their tools with the runner's runtime only."""
    agent = Agent[None](name="shop", tools=[pay, find], phases=Phases(await_approval=OwnGate))
    runner = Runner(agent, model=paying_model(), gate=AutoDenyGate(), keep_states=True)
    with pytest.raises(UnapprovedWriteError, match="another runtime than the one its run has"):
        await runner.run(None, "Pay Ada")
    assert CHARGED == []


def test_a_write_tool_has_no_public_function_to_call() -> None:
    """The tool object is no way around approval: its function is not a public attribute."""
    with pytest.raises(AttributeError):
        pay.fn  # type: ignore[attr-defined]  # noqa: B018
    assert CHARGED == []


async def test_a_stored_approval_of_an_earlier_call_is_refused_and_dropped() -> None:
    """A yes stored for another call of the same run is refused at resume, and dropped, so
    the run stays waiting for a decision about its own call; nothing is paid."""
    store = MemoryCheckpointer()
    waiting = await waiting_run(store, "r")
    other = waiting.request("r").model_copy(update={"call_id": "call-99"})
    await store.submit_decision("r", dump_decision(Approve.of(other, by="lin")))
    runner = Runner(
        shop(),
        model=ScriptedModel([reply("Paid.")]),
        gate=AutoDenyGate(),
        checkpointer=store,
        keep_states=True,
    )
    with pytest.raises(DecisionRefusedError, match="it was given for call id 'call-99'"):
        await runner.resume("r")
    assert await store.decision("r") is None
    assert (await store.record("r")).status == "interrupted"
    assert CHARGED == []


class Stash(Planning[None]):
    """Gets the gate's yes to a cheap call it never makes, and keeps the approval."""

    kept: list[Approval[Any]] = []  # noqa: RUF012 - the forger's stash, shared on purpose

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        if not self.kept:
            cheap = ApprovalRequest.for_call(pay_call("1.00"), run_id=rt.run_id, agent="shop")
            decision = await rt.decide(cheap)
            assert isinstance(decision, Approval)
            self.kept.append(decision)
        return await super().advance(rt)


class Rebinding(AwaitApproval[None]):
    """Rewrites the stashed approval to the call waiting here, and approves with it."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | Planning[None] | AwaitApproval[None]:
        forged = Stash.kept[0]
        for name, value in [
            ("call_id", self.call_id),
            ("tool", self.call.name),
            ("args_hash", self.call.args_hash),
        ]:
            object.__setattr__(forged, name, value)
        return self.approve(forged)


async def test_an_approval_changed_in_place_no_longer_approves_anything() -> None:
    """A yes to a cheap call, rewritten (object.__setattr__) to another call: refused."""

    class CheapOnly:
        async def decide(self, request: ApprovalRequest) -> Approve | Denial:
            cheap = request.arguments["amount"] <= Decimal("1.00")
            return Approve(by="policy") if cheap else Denial(reason="a person decides")

    Stash.kept.clear()
    agent = Agent[None](
        name="shop",
        tools=[pay, find],
        phases=Phases(planning=Stash, await_approval=Rebinding),
    )
    runner = Runner(agent, model=paying_model(), gate=CheapOnly(), keep_states=True)
    with pytest.raises(UnapprovedWriteError, match="its approval was changed after it was given"):
        await runner.run(None, "Pay Ada")
    assert CHARGED == []


class Lenient(Retrying[None]):
    """Widens its own retry policy: ten attempts where the agent allows two."""

    @property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(max_attempts=10, base_delay=0, jitter=0)


async def test_a_retrying_subclass_cannot_widen_the_agents_retry_cap() -> None:
    """The runner holds the agent's cap, not the phase's: attempt 3 of a cap of 2 is refused."""
    calls: list[str] = []

    @read_tool(name="flaky", retry=RetryPolicy(max_attempts=2, base_delay=0, jitter=0))
    async def flaky(args: FindArgs) -> str:
        calls.append(args.query)
        raise ToolError("503")

    agent = Agent[None](name="f", tools=[flaky], phases=Phases(retrying=Lenient))
    model = ScriptedModel([tool_call("flaky", {"query": "q"})])
    with pytest.raises(IllegalTransitionError, match="past the retry cap of 2"):
        await Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True).run(None, "hi")
    assert len(calls) == 2


# --- a phase that claims another class -------------------------------------------------------


class ClaimsFailed(Planning[None]):
    """Answers ``__class__`` itself: ``isinstance(phase, Failed)`` would say yes, and a
    ``Failed`` is exempt from the check that the model's calls are all accounted for."""

    @property
    def __class__(self) -> Any:  # type: ignore[override]
        return Failed


class ClaimsDone(Planning[None]):
    """Answers ``__class__`` through ``__getattribute__``."""

    def __getattribute__(self, name: str) -> Any:
        if name == "__class__":
            return Done
        return object.__getattribute__(self, name)


class ClassRaises(Planning[None]):
    @property
    def __class__(self) -> Any:  # type: ignore[override]
        raise RuntimeError("no")


@pytest.mark.parametrize(
    ("cls", "problem"),
    [
        (ClaimsFailed, "its __class__ answers Failed, not its own class ClaimsFailed"),
        (ClaimsDone, "its __class__ answers Done, not its own class ClaimsDone"),
        (ClassRaises, "asking its __class__ raised RuntimeError"),
    ],
)
async def test_a_phase_that_claims_another_class_is_refused(
    cls: type[Planning[None]], problem: str
) -> None:
    """The Watch judges a phase by isinstance; a phase whose ``__class__`` is not its type
    is refused at its first transition, before anything is saved or run."""
    store = MemoryCheckpointer()
    runner = Runner(shop(cls), model=paying_model(), gate=AutoApproveGate(), checkpointer=store)
    with pytest.raises(IllegalTransitionError, match=problem):
        await runner.run(None, "hi", run_id="r")
    assert [entry.phase for entry in await store.history("r")] == ["Idle"]


def test_driving_a_phase_that_claims_another_class_is_refused() -> None:
    from statemachine._watch import check_start

    claims: Any = object.__new__(ClaimsDone)
    with pytest.raises(PhaseForgedError, match="may not claim another class"):
        check_start(claims, shop(ClaimsDone))
