"""What ``ToolCalling`` does, as functions the phase calls: run one tool call.

The checks before the call (``_checked``: the tool and, for a write, the approval this
run's runtime made), the side-effect ledger (a committed effect is observed, not called
again: ``_replayed``), the budget, the call under its timeout and the run's deadline,
and where a failure goes (``_failed``, ``_write_failed``); then ``Retrying``'s back-off
and next attempt (``_retry``). Each takes the phase it works for, already left, and
returns the phase that comes next. ``_holds_no_unapproved_write`` is the check the
three phases that hold a call run when they are built.

This module imports the phases for the type checkers only: ``_phases`` imports it.
"""

from __future__ import annotations

from decimal import Decimal, DecimalException
from types import CoroutineType
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from . import _budget, _json
from ._approval import ApprovedCall
from ._breaker import _settle_tool, _tool_refused
from ._budget import Budget, Spend, _spend
from ._context import _run_context
from ._errors import EffectUncertainError, ToolError, UnapprovedWriteError
from ._fast._attrs import _site
from ._money import EXACT, money_sum
from ._runtime import _NEVER_WAITS, Runtime, _within
from ._seal import _own_ticket, _Ticket
from ._tools import _FREE, _IDEMPOTENCY_KEY, ReadCall, ReadTool, Tool, WriteTool, idempotency_key

if TYPE_CHECKING:
    from ._phases import Failed, Observing, Retrying, ToolCalling

# _unlimited: _execute's check in its frame, as a function (tests/test_fast_execute.py).
__all__ = ["_describe_error", "_execute", "_holds_no_unapproved_write", "_retry", "_unlimited"]

C = TypeVar("C")


def _describe_error(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _holds_no_unapproved_write(call: object) -> None:
    """Refuse a write call that did not come through ``AwaitApproval.approve``."""
    # The exact type first: cheaper than isinstance on a union, and nearly always it.
    if type(call) is not ReadCall and type(call) is not ApprovedCall:
        raise UnapprovedWriteError(getattr(call, "name", repr(call)))


async def _execute(
    calling: ToolCalling[C], rt: Runtime, free: object = None
) -> Observing[C] | Retrying[C] | Failed[C]:
    """What ``ToolCalling.execute`` does once the phase is left (its docstring says what).

    ``free`` is the budget the runner found with no limit at the drive's start (a
    ``Budget`` itself, frozen: what it read then it would read now), or ``None``.
    """
    agent = calling.agent
    # _checked's read path in this frame, its reads in its order: the library's ticket,
    # bound to this very phase, of no other runtime, holding a ReadCall (exactly) of a
    # ReadTool (exactly). Anything else (a write, another call or tool, a ticket it
    # would refuse) is _checked's, which reads all again and judges.
    held: Any
    try:  # getattr(calling, "_ticket", None), its slot read in this frame
        held = calling._ticket
    except AttributeError:
        held = None
    call: Any = None
    tool: Tool
    if (
        type(held) is _Ticket
        and (holder := held.holder) is not None
        and holder() is calling
        and ((runtime := held.runtime) is None or runtime is rt)
        and type(call := calling.call) is ReadCall
        and type(tool := call.tool) is ReadTool
    ):
        args = call.args
        args_hash = ""
    else:
        tool, args, args_hash = _checked(calling, rt)
    # A read tool (exactly the library's) with no cost function: Tool.price's first answer.
    price = _FREE if type(tool) is ReadTool and tool.cost is None else tool.price(args)
    write = args_hash != ""
    key = idempotency_key(rt.run_id, tool.name, args_hash) if write else None
    ledger = rt.ledger if write else None
    if ledger is not None and key is not None:
        recorded = await ledger.effect(key)
        if recorded is not None and recorded.status == "committed":
            return _replayed(calling, recorded.result, price)
        if recorded is not None and not (isinstance(tool, WriteTool) and tool.idempotent):
            raise EffectUncertainError(rt.run_id, tool=tool.name, key=key)
    budget = agent.budget
    breaker = agent.breaker
    # A budget of exactly this class with no limit refuses nothing: its check (and the
    # clock reading and the text it would be given) is skipped; any other is asked.
    # _unlimited(budget), in this frame; not read again for the very budget the runner
    # found with none at the drive's start (``free``).
    unlimited = type(budget) is Budget and (
        budget is free
        or (
            budget.wall_clock is None
            and budget.tool_calls is None
            and budget.tokens is None
            and budget.cost is None
        )
    )
    refusal = (
        None
        if unlimited
        else budget.refuse(
            calling.spent,
            elapsed=rt.elapsed(),
            action=f"calling {tool.name}",
            tool_calls=1,
            cost=price,
        )
    )
    if not refusal:  # no breaker: no circuit to be open (_tool_refused answers None)
        refusal = None if breaker is None else _tool_refused(breaker, tool.name, rt.clock())
    if refusal is not None:
        return calling._fail_call(refusal)
    if ledger is not None and key is not None:
        await ledger.record_intent(key, run_id=rt.run_id, tool=tool.name, args_hash=args_hash)
    # The call is counted (one tool call) where the count is read. An answered call's
    # spend adds the call and its price at once (``_counted``).
    spent = calling.spent
    # No wall-clock limit: nothing remains to read (Runtime.remaining answers None).
    remaining = None if unlimited and type(rt) is Runtime else rt.remaining(budget)
    timeout = tool.timeout if remaining is None else min(tool.timeout, remaining)
    context = (
        _run_context(
            calling, rt, key=key, seconds=timeout, spent=spent.add(tool_calls=1), price=price
        )
        if tool.takes_context
        else None
    )
    # No key to give and none in place (a read call, nearly always): the tool reads None
    # without a new context and its token; any other key is set, and reset after.
    token = None if key is None and _key_now() is None else _IDEMPOTENCY_KEY.set(key)
    try:
        running = tool._fn(args) if context is None else tool._fn(args, context)
        # _within's first case in this frame (a coroutine whose code was found never to
        # wait: awaited as it is), without its coroutine; anything else (a code not
        # asked yet, one that waits, a timeout of None) is _within's.
        if (
            type(running) is CoroutineType
            and (known := _never_waits_get(id(code := running.cr_code))) is not None
            and known[0] is code
            and known[1]
        ):
            output = await running
        else:
            output = await _within(running, timeout)
    except BaseException as error:
        _settle_tool(agent.breaker, tool.name, rt.clock(), error)
        if not isinstance(error, Exception):
            raise
        return _failed(calling, tool, error, spent.add(tool_calls=1), price)
    finally:
        if token is not None:
            _IDEMPOTENCY_KEY.reset(token)
        elif _key_now() is not None:  # the tool set one itself: None again, as reset makes it
            _IDEMPOTENCY_KEY.set(None)
    if breaker is not None:
        _settle_tool(breaker, tool.name, rt.clock(), None)
    if ledger is not None and key is not None:
        await ledger.record_result(key, _json.to_plain(output))
    # _counted(spent, price) in this frame for a free tool's call (its first case: the
    # sum with _FREE_COST, exact, else an error; the cost itself when it is the one
    # _budget._kept holds, which that sum spells as itself); anything else is _counted's.
    total: Decimal | None = None
    if price is _FREE and type(spent) is Spend and type(was := spent.cost) is Decimal:
        if was is _budget._kept:
            total = was
        else:
            try:
                total = _exact_add(was, _FREE_COST)
            except DecimalException:
                total = None
    observing: Observing[C] = _TO_OBSERVING(
        agent.phases.observing,
        calling,
        calling.call,
        calling.call_id,
        output,
        _counted(spent, price)
        if total is None
        else _spend(spent.tokens + 0, total, spent.tool_calls + 1, spent.model_calls + 0),
        calling.pending,
    )
    return observing


# What ``calling._next(observing, call=..., call_id=..., output=..., spent=..., pending=...)``
# makes, the values passed as they are (no dict of them).
_TO_OBSERVING = _site("call", "call_id", "output", "spent", "pending")


def _unlimited(budget: object) -> bool:
    """Whether ``budget`` is a ``Budget`` (exactly) with no limit: ``Budget.refuse``
    answers ``None`` for any spend and ``remaining_seconds`` ``None`` for any time."""
    return (
        type(budget) is Budget
        and budget.wall_clock is None
        and budget.tool_calls is None
        and budget.tokens is None
        and budget.cost is None
    )


def _counted(spent: Spend, price: Decimal) -> Spend:
    """``spent.add(tool_calls=1).add(cost=price)`` in one step: the first step adds
    ``Decimal(0)`` to the cost, which can change its exponent (``1E+2`` becomes ``100``),
    so it is added to the price first (exact sums: the same value and spelling)."""
    # A free tool's price is _FREE itself: its sum with _ZERO is made once.
    cost = _FREE_COST if price is _FREE else money_sum(_ZERO, price)
    if type(spent) is Spend and type(was := spent.cost) is Decimal:
        # What add makes, without its keywords: the exact sum (an error in the plain way);
        # a free tool's: the cost itself when it is the one _budget._kept holds.
        if cost is _FREE_COST and was is _budget._kept:
            total = was
        else:
            try:
                total = _exact_add(was, cost)
            except DecimalException:
                return spent.add(tool_calls=1, cost=cost)
        return _spend(spent.tokens + 0, total, spent.tool_calls + 1, spent.model_calls + 0)
    return spent.add(tool_calls=1, cost=cost)


_key_now = _IDEMPOTENCY_KEY.get
_never_waits_get = _NEVER_WAITS.get
_ZERO = Decimal(0)
_exact_add = EXACT.add
_FREE_COST = money_sum(_ZERO, _FREE)


def _checked(calling: ToolCalling[C], rt: Runtime) -> tuple[Tool, BaseModel, str]:
    """The tool to run, its arguments, and (a write) their hash, checked first.

    A read call must be of a read tool. A write must carry the approval this run's
    runtime made for exactly this call (``rt.decide``), and that approval must not
    have let this attempt run already: else :class:`UnapprovedWriteError`, and the
    tool does not run.
    """
    # _own_ticket's check without its frame when the slot holds a bound _Ticket (as _leave).
    held: object = getattr(calling, "_ticket", None)
    if type(held) is _Ticket and held.holder is not None and held.holder() is calling:
        ticket = held
    else:
        ticket = _own_ticket(calling, "execute")
    if ticket.runtime is not None and ticket.runtime is not rt:
        raise UnapprovedWriteError(
            calling.call.name, "it was given another runtime than the one its run has"
        )
    call: object = calling.call
    if type(call) is ReadCall:
        tool, args = call.tool, call.args
        if type(tool) is not ReadTool:
            raise UnapprovedWriteError(tool.name, "a read call must be of a read tool")
        return tool, args, ""
    if not isinstance(call, ApprovedCall):
        raise UnapprovedWriteError(getattr(call, "name", repr(call)))
    write, args = rt._approvals.authorize(
        call,
        run_id=rt.run_id,
        call_id=calling.call_id,
        attempt=calling.attempt,
        tools=calling.agent.tools,
        hand_phase=ticket.origin == "hand",
    )
    return write, args, call.approval.args_hash


def _replayed(calling: ToolCalling[C], result: Any, price: Decimal) -> Observing[C]:
    """Observe a committed effect's recorded result; the tool is not called.

    The call is counted (one tool call, its price) without a budget check: the
    phase being replayed was saved before the call was counted (that happens on
    the way to ``Observing``, which was not saved), so the money it moved is
    counted now, once, and the next step's budget check sees it. The output is
    the recorded plain JSON (a pydantic output comes back as its dict), which
    the model is shown exactly as before.
    """
    return calling._next(
        calling.agent.phases.observing,
        call=calling.call,
        call_id=calling.call_id,
        output=result,
        spent=calling.spent.add(tool_calls=1, cost=price),
        pending=calling.pending,
    )


def _failed(
    calling: ToolCalling[C], tool: Tool, error: Exception, spent: Spend, price: Decimal
) -> Retrying[C] | Failed[C]:
    """Where a failed call goes: ``Retrying`` if its policy retries the error, else
    ``Failed`` (a write that is not idempotent is never retried)."""
    if calling.agent.retry_for(tool).retries(error):
        return calling._next(
            calling.agent.phases.retrying,
            call=calling.call,
            call_id=calling.call_id,
            attempt=calling.attempt,
            error=_describe_error(error),
            spent=spent,
            pending=calling.pending,
        )
    if isinstance(tool, WriteTool) and not tool.idempotent:
        return _write_failed(calling, tool.name, error, spent, price)
    return calling._fail_call(f"{tool.name} failed: {_describe_error(error)}", spent=spent)


def _write_failed(
    calling: ToolCalling[C], name: str, error: BaseException, spent: Spend, price: Decimal
) -> Failed[C]:
    reason = f"{name} failed: {_describe_error(error)}"
    if isinstance(error, ToolError):
        return calling._fail_call(
            f"{reason}; it is a write tool that is not idempotent, so it is not retried",
            spent=spent,
        )
    # No word from the service: it may have acted before the error. Count the
    # price, so the budget never undercounts, and tell the person to check.
    return calling._fail_call(
        f"{reason}; it is a write tool that is not idempotent, so it is not retried "
        "(a second attempt might act twice). Check with its service whether the "
        "first attempt went through.",
        spent=spent.add(cost=price),
    )


async def _retry(retrying: Retrying[C], rt: Runtime) -> ToolCalling[C] | Failed[C]:
    """What ``Retrying.retry`` does once the phase is left: back off, then call again."""
    policy = retrying.policy
    name = retrying.call.name
    if retrying.attempt >= policy.max_attempts:
        return retrying._fail_call(
            f"{name} failed {retrying.attempt} time(s), the cap is {policy.max_attempts}; "
            f"last error: {retrying.error}"
        )
    delay = policy.delay(retrying.attempt, rt.rng)
    remaining = rt.remaining(retrying.agent.budget)
    if remaining is not None and delay >= remaining:
        return retrying._fail_call(
            f"wall-clock budget: {remaining:.2f}s left, not enough to wait {delay:.2f}s "
            f"and retry {name}; last error: {retrying.error}"
        )
    await rt.sleep(delay)
    return retrying._next(
        retrying.agent.phases.tool_calling,
        call=retrying.call,
        call_id=retrying.call_id,
        attempt=retrying.attempt + 1,
        pending=retrying.pending,
    )
