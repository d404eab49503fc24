# pyright: reportPrivateUsage=false, reportUnknownVariableType=false, reportUnknownArgumentType=false, reportGeneralTypeIssues=false
"""``_execute``'s reading of a read call, its budget and a free call's spend in its own
frame, against the plain way.

``_execute`` takes ``_checked``'s read path (the library's ticket bound to this very
phase, of no other runtime, a ``ReadCall`` of a ``ReadTool``, both exactly), tells an
exact ``Budget`` without limits as ``_unlimited`` does, and makes a free call's spend as
``_counted`` does, all in its frame; anything else goes to ``_checked``, ``Budget.refuse``
and ``_counted``. These tests execute the same phases both ways (the plain way by giving
``_calling`` another class for ``_Ticket``, ``Budget`` and ``Spend``, of which no
ticket, budget or spend is: every shortcut then declines, and a spend is ``Spend.add``'s)
after changes made in place (another runtime on the ticket, a copy's ticket, a ticket of
another class, a call or a tool of a subclass or a write, a budget with limits or of a
subclass, a priced tool, a spend of another class or odd cost) and check the same
answer: the same refusal, or an ``Observing`` of the class exactly with the same call,
id, output, spend (spelled) and pending calls.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Budget, ReadCall, Runtime, _calling, read_tool, write_tool
from statemachine._budget import Spend
from statemachine._phases import ToolCalling
from statemachine._seal import _Ticket
from statemachine._tools import ReadTool
from statemachine.testing import AutoDenyGate, ScriptedModel


class _Args(BaseModel):
    key: str = "k"


async def _look(args: _Args) -> dict[str, str]:
    return {"value": args.key * 2}


async def _write(args: _Args) -> dict[str, str]:
    return {"wrote": args.key}


class _FakeTicket:
    """A ticket's fields, on an object of another class."""

    holder: Any
    runtime: Any
    origin: Any
    left_by: Any
    parent: Any
    via: Any
    copied: Any


# Originals of copies, kept alive while their copies run (a ticket's holder is weak).
keep: list[Any] = []


class _MyBudget(Budget):
    pass


class _MySpend(Spend):
    pass


class _MyReadCall(ReadCall):  # type: ignore[misc]
    pass


class _MyReadTool(ReadTool[Any, Any]):  # type: ignore[misc]
    pass


_CHANGES = [
    "none",
    "other runtime",
    "same runtime",
    "copy",
    "not a ticket",
    "no ticket",
    "call subclass",
    "tool subclass",
    "write tool",
    "budget with limits",
    "budget subclass",
    "priced",
    "spend subclass",
    "odd cost",
    "negative zero cost",
]


def _phase(change: str, priced: bool, limits: int) -> tuple[Any, Runtime]:
    tools: list[Any] = [
        read_tool(name="look", cost=(lambda _: Decimal("0.25")) if priced else None)(_look),
        write_tool(name="put")(_write),
    ]
    budget = (
        Budget(),
        Budget(tool_calls=100, cost=Decimal(50)),
        Budget(tool_calls=0),
        Budget(cost=Decimal("0.1")),
        Budget(wall_clock=3600.0),
    )[limits]
    agent = Agent[None](name="t", tools=tools, budget=budget, max_steps=10**6)
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate())
    planning = agent.start(None, "go").receive("go")
    call = agent.tools.route("look", '{"key": "ab"}')
    assert type(call) is ReadCall
    calling: Any = planning.call_tool(call, raw_arguments='{"key": "ab"}')
    ticket = calling._ticket
    if change == "other runtime":
        ticket.runtime = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate())
    elif change == "same runtime":
        ticket.runtime = rt
    elif change == "copy":  # a copy sharing the ticket, which is bound to the original
        twin = object.__new__(ToolCalling)
        for field in attrs.fields(ToolCalling):
            object.__setattr__(twin, field.name, getattr(calling, field.name))
        keep.append(calling)
        calling = twin
    elif change == "not a ticket":
        fake = _FakeTicket()
        for name in ("holder", "runtime", "origin", "left_by", "parent", "via", "copied"):
            setattr(fake, name, getattr(ticket, name))
        object.__setattr__(calling, "_ticket", fake)
    elif change == "no ticket":
        object.__setattr__(calling, "_ticket", None)
    elif change == "call subclass":
        object.__setattr__(calling, "call", _recalled(call, _MyReadCall, call.tool))
    elif change == "tool subclass":
        tool = object.__new__(_MyReadTool)
        for field in attrs.fields(ReadTool):
            object.__setattr__(tool, field.name, getattr(call.tool, field.name))
        object.__setattr__(calling, "call", _recalled(call, ReadCall, tool))
    elif change == "write tool":
        object.__setattr__(calling, "call", _recalled(call, ReadCall, agent.tools.get("put")))
    elif change == "budget subclass":
        object.__setattr__(agent, "budget", _MyBudget())
    elif change == "spend subclass":
        object.__setattr__(calling, "spent", _MySpend(tokens=3, cost=Decimal("1.50")))
    elif change == "odd cost":  # new spends: the one a start holds may be shared
        object.__setattr__(calling, "spent", Spend(tokens=1, cost=Decimal("1E+3")))
    elif change == "negative zero cost":
        object.__setattr__(calling, "spent", Spend(cost=Decimal("-0.00")))
    return calling, rt


def _recalled(call: Any, cls: type[Any], tool: Any) -> Any:
    """A copy of ``call`` (a new object: the routed one is left as it is) of ``cls``,
    holding ``tool``."""
    made = object.__new__(cls)
    for field in attrs.fields(ReadCall):
        object.__setattr__(made, field.name, getattr(call, field.name))
    object.__setattr__(made, "tool", tool)
    return made


class _Nothing:
    """No object is of this class: every shortcut's exact-type check declines."""


def _outcome(calling: Any, rt: Runtime, plain: bool) -> tuple[Any, ...]:
    names = ("_Ticket", "Budget", "Spend")
    saved = [getattr(_calling, name) for name in names]
    if plain:
        for name in names:
            setattr(_calling, name, _Nothing)
    try:
        try:
            after: Any = anyio.run(_calling._execute, calling, rt)
        except Exception as error:
            return ("raised", type(error), str(error))
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(_calling, name, value)
    spent = after.spent
    fields: tuple[Any, ...] = ()
    if hasattr(after, "output"):
        call = after.call
        fields = (type(call), call.args, call.args_hash, type(call.tool), call.tool.name)
        fields += (after.call_id, after.output, after.pending)
    return (
        type(after),
        after.kind,
        getattr(after, "reason", None),
        type(spent),
        spent.tokens,
        type(spent.cost),
        str(spent.cost),
        spent.tool_calls,
        spent.model_calls,
        *fields,
    )


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_CHANGES), st.booleans(), st.integers(0, 4))
def test_execute_answers_as_the_plain_way(change: str, priced: bool, limits: int) -> None:
    calling, rt = _phase(change, priced, limits)
    fast = _outcome(calling, rt, plain=False)
    calling, rt = _phase(change, priced, limits)
    before = calling.spent
    plain = _outcome(calling, rt, plain=True)
    assert fast == plain
    if fast[1] == "Observing":  # the spend as the docstring of _counted says
        price = Decimal("0.25") if priced else Decimal(0)
        spend = before.add(tool_calls=1).add(cost=price)
        assert fast[3:9] == (
            type(spend),
            spend.tokens,
            Decimal,
            str(spend.cost),
            spend.tool_calls,
            spend.model_calls,
        )
    if change in ("other runtime", "copy", "not a ticket", "no ticket", "write tool"):
        assert fast[0] == "raised"  # every one of these is refused, both ways
    if change in ("none", "same runtime"):
        refused = limits == 2 or (limits == 3 and priced)
        assert fast[1] == ("Failed" if refused else "Observing")
        if not refused:
            assert fast[7] == 1  # the call counted once


def test_the_shortcuts_are_taken() -> None:
    """The plain way is another way: with a budget of limits, a refusal differs only in
    the budget asked, so the read path's shortcut is shown taken by its reads alone."""
    calling, rt = _phase("none", priced=False, limits=0)
    assert type(calling._ticket) is _Ticket
    assert type(calling.call) is ReadCall
    assert type(calling.call.tool) is ReadTool
    after: Any = anyio.run(_calling._execute, calling, rt)
    assert after.kind == "Observing"
    assert after.spent.cost == calling.spent.cost
    assert after.spent.tool_calls == 1


@pytest.mark.parametrize("change", _CHANGES)
def test_each_change_alike(change: str) -> None:
    for priced in (False, True):
        for limits in range(5):
            one, rt = _phase(change, priced, limits)
            two, rt2 = _phase(change, priced, limits)
            assert _outcome(one, rt, plain=False) == _outcome(two, rt2, plain=True)
