# pyright: reportPrivateUsage=false
"""A tool call's deadline, decided in ``_execute``'s frame, as ``_within`` decides it.

``_execute`` awaits a tool's coroutine as it is when ``_within`` would (no deadline, or a
coroutine whose code was found never to wait), reading ``_never_waits``'s answer by the
code object's identity (``_runtime._NEVER_WAITS``, filled by ``_runs_through``); anything
else is ``_within``'s. These tests run whole runs both ways (the in-frame look-up made to
find nothing: ``_within`` then decides every call) over tools that never wait, raise,
wait a little or wait past their timeout, with the look-up's store empty, filled, or
holding another code object's answer at a code's id (an id reused), and check the same
run and the same answers as ``_never_waits``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Runner, _calling, _runtime, read_tool
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class _Args(BaseModel):
    n: int = 0


async def _returns(args: _Args) -> dict[str, int]:
    return {"n": args.n}


async def _raises(args: _Args) -> dict[str, int]:
    raise ValueError(f"failed {args.n}")


async def _waits_a_little(args: _Args) -> dict[str, int]:
    await anyio.lowlevel.checkpoint()
    return {"n": args.n + 1}


async def _waits_past(args: _Args) -> dict[str, int]:
    await anyio.sleep(5)
    return {"n": -1}


_FUNCTIONS: list[Callable[[_Args], Awaitable[dict[str, int]]]] = [
    _returns,
    _raises,
    _waits_a_little,
    _waits_past,
]
_WAITING = {_waits_a_little.__code__, _waits_past.__code__}


def _run(function: Callable[..., Any], calls: int) -> tuple[object, ...]:
    tool = read_tool(name="t", timeout=0.05)(function)
    agent = Agent[None](name="w14", tools=[tool], max_steps=10**6)
    turns = [tool_call("t", {"n": n}) for n in range(calls)] + [reply("done")]
    runner = Runner(agent, model=ScriptedModel(turns), gate=AutoDenyGate())
    result = anyio.run(runner.run, None, "go")
    final = result.final
    return (
        result.status,
        result.history,
        type(final).__name__,
        getattr(final, "reason", None),
        final.spent,
        tuple((m.role, m.content, m.tool_call_id) for m in final.transcript),
    )


def _fill(store: str, function: Callable[..., Any]) -> None:
    code = function.__code__
    _runtime._NEVER_WAITS.clear()
    if store == "asked":
        _runtime._runs_through(code)
    elif store == "other code at its id":
        # An id reused: another code object (never waiting) held at this code's id.
        _runtime._NEVER_WAITS[id(code)] = (_returns.__code__, True)
    elif store == "others":
        for other in _FUNCTIONS:
            if other is not function:
                _runtime._runs_through(other.__code__)


def _nothing(key: int) -> None:
    """The in-frame look-up finding nothing: ``_within`` decides every call."""
    return None


_STORES = ["empty", "asked", "other code at its id", "others"]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    function=st.sampled_from(_FUNCTIONS),
    store=st.sampled_from(_STORES),
    calls=st.integers(1, 3),
)
def test_a_run_ends_as_with_within_deciding_every_call(
    function: Callable[..., Any], store: str, calls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(store, function)
    fast = _run(function, calls)
    _fill(store, function)
    with monkeypatch.context() as patched:
        patched.setattr(_calling, "_never_waits_get", _nothing)
        plain = _run(function, calls)
    assert fast == plain
    if function is _waits_past:  # under its deadline either way: timed out, never "-1"
        assert fast[0] == "failed"
        assert "timed out" in str(fast[3])


@pytest.mark.parametrize("store", _STORES)
def test_a_waiting_tool_is_never_awaited_without_its_deadline(store: str) -> None:
    status, history, kind, reason, *_ = _run_filled(_waits_past, store)
    assert (status, kind) == ("failed", "Failed")
    assert "timed out" in str(reason)
    assert "Observing" not in str(history)


def _run_filled(function: Callable[..., Any], store: str) -> tuple[object, ...]:
    _fill(store, function)
    return _run(function, 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([*_FUNCTIONS, "copy", "clear"]), max_size=30))
def test_runs_through_answers_as_never_waits(asks: list[Any]) -> None:
    """Codes asked in any order, equal copies of them (other objects), the store cleared:
    each answer is ``_never_waits``'s own, and each entry holds its very code."""
    _runtime._NEVER_WAITS.clear()
    copies = [compile("async def f():\n    return 1\n", "<w14>", "exec")]
    for ask in asks:
        if ask == "clear":
            _runtime._NEVER_WAITS.clear()
            continue
        code = copies[-1].co_consts[0] if ask == "copy" else ask.__code__
        if ask == "copy":
            copies.append(compile("async def f():\n    return 1\n", "<w14>", "exec"))
        expected = _runtime._never_waits(code)
        assert _runtime._runs_through(code) is expected
        assert _runtime._runs_through(code) is expected
        assert _runtime._NEVER_WAITS[id(code)] == (code, expected)
        assert _runtime._NEVER_WAITS[id(code)][0] is code
    for code in _WAITING:
        assert _runtime._runs_through(code) is False


def test_the_store_is_cleared_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "_NEVER_WAITS_MAX", 3)
    _runtime._NEVER_WAITS.clear()
    for function in _FUNCTIONS:
        _runtime._runs_through(function.__code__)
    assert len(_runtime._NEVER_WAITS) == 1
    assert _runtime._NEVER_WAITS[id(_waits_past.__code__)] == (_waits_past.__code__, False)
