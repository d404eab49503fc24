# pyright: reportPrivateUsage=false
"""The runner leaves the library's ``ToolCalling`` (``_leave("execute")``) in its own
loop's frame when the class holds ``Phase._leave`` (``_own_advance``): an exact
``_Ticket`` held by this very phase and not left is left; anything else goes through
``_leave``, which judges and raises.

Checked against the plain way (``_own_advance`` answering ``False``: each phase's
``advance`` awaited, ``ToolCalling.execute`` calling ``_leave``): runs of any tool calls
give the same path, final phase's kind and step, and every ToolCalling left by
"execute"; a hook (``on_transition``) that leaves the ToolCalling first, gives it
another phase's ticket, or deletes its ticket slot makes both ways raise the same
error (class and text); ``ToolCalling._leave`` replaced is called by both ways.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    ModelReply,
    Phase,
    PhaseForgedError,
    PhaseReusedError,
    Runner,
    ToolCalling,
    read_tool,
)
from statemachine import _runner as runner_module
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class KeyArgs(BaseModel):
    key: str


@read_tool
async def look(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


_AGENT = Agent[None](name="leave17run", tools=[look])


def _turns(keys: list[str]) -> list[ModelReply]:
    return [*(tool_call("look", f'{{"key": "{key}"}}') for key in keys), reply("done")]


def _run(keys: list[str], *, plain: bool, hook: Any = None) -> Any:
    callings: list[Phase[None]] = []

    def on_transition(before: Phase[None], after: Phase[None]) -> None:
        if isinstance(after, ToolCalling):
            callings.append(after)
            if hook is not None:
                hook(after)

    async def go() -> Any:
        return await Runner(
            _AGENT,
            model=ScriptedModel(_turns(keys)),
            gate=AutoDenyGate(),
            on_transition=on_transition,
        ).run(None, "go")

    saved = runner_module._own_advance
    if plain:
        runner_module._own_advance = lambda: False
    try:
        try:
            result = anyio.run(go)
        except Exception as error:  # compared
            return ("raised", type(error), str(error))
    finally:
        runner_module._own_advance = saved
    left = [phase._ticket.left_by for phase in callings]
    return (result.path, result.final.kind, result.final.step, left)


_KEYS = st.lists(st.text("abc", min_size=1, max_size=3), max_size=5, unique=True)


@settings(max_examples=30, deadline=None)
@given(_KEYS)
def test_a_run_leaves_each_tool_call_as_the_plain_way(keys: list[str]) -> None:
    fast = _run(keys, plain=False)
    assert fast == _run(keys, plain=True)
    assert fast[3] == ["execute"] * len(keys)


def _left_first(phase: Phase[None]) -> None:
    phase._leave("by-hand")


def _other_ticket(phase: Phase[None]) -> None:
    other = _AGENT.start(None, "hi").receive("hi")
    object.__setattr__(phase, "_ticket", other._ticket)


def _no_ticket(phase: Phase[None]) -> None:
    object.__delattr__(phase, "_ticket")


@pytest.mark.parametrize(
    ("hook", "error"),
    [
        (_left_first, PhaseReusedError),
        (_other_ticket, PhaseForgedError),
        (_no_ticket, PhaseForgedError),
    ],
)
@pytest.mark.parametrize("keys", [["a"], ["a", "b"]])
def test_a_tool_call_left_or_forged_is_refused_as_the_plain_way(
    hook: Any, error: type[Exception], keys: list[str]
) -> None:
    fast = _run(keys, plain=False, hook=hook)
    assert fast == _run(keys, plain=True, hook=hook)
    assert fast[0] == "raised"
    assert fast[1] is error


def test_a_replaced_leave_is_called_by_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    own = ToolCalling[None]._leave

    def spy(self: Any, transition: str) -> None:
        calls.append(transition)
        own(self, transition)

    monkeypatch.setattr(ToolCalling, "_leave", spy)
    fast = _run(["a", "b"], plain=False)
    fast_calls = list(calls)
    calls.clear()
    assert fast == _run(["a", "b"], plain=True)
    assert fast_calls == calls == ["execute", "execute"]
