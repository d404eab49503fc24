# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""The runner takes ``Watch.accept``'s short way in its own frame (``Watch.pairs_from``,
read once a drive): for the library's own classes, the pair's function from the watch's
own pairs, and what it does not accept judged by ``Watch._checked``. The same verdicts,
errors and watch records as the runner calling ``accept`` (which it does whenever
``Watch.accept`` is replaced): over runs with retried calls and with the run's budget,
agent or phases changed in place by a hostile tool or transition hook; and the short way
is taken (``accept`` itself not entered for the library's pairs).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import pytest
import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    Observing,
    Planning,
    RetryPolicy,
    Runner,
    ToolCalling,
    _watch,
    read_tool,
)
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

_HOW = (
    "none",
    "budget-other",
    "budget-copy",
    "budget-back",
    "budget-add",
    "agent-steps",
    "agent-back",
    "phase-step",
    "phase-back",
    "ticket-cut",
)


class _Args(BaseModel):
    key: str


def _equal_copy(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return int(str(value))
    return object()


def _tamper(agent: Any, how: str) -> None:
    """A tool's change of the run's budget or agent, in place."""
    values = vars(agent.budget)
    if how == "budget-other":
        values["tokens"] = 10**6 + 1
    elif how == "budget-copy":
        values["tokens"] = _equal_copy(values["tokens"])
    elif how == "budget-back":
        was = values["tokens"]
        values["tokens"] = object()
        values["tokens"] = was
    elif how == "budget-add":
        values["more"] = None
    elif how == "agent-steps":
        object.__setattr__(agent, "max_steps", agent.max_steps - 1)
    elif how == "agent-back":
        was = agent.max_steps
        object.__setattr__(agent, "max_steps", object())
        object.__setattr__(agent, "max_steps", was)


def _tamper_phase(phase: Any, how: str) -> None:
    """A transition hook's change of the phase the run goes on with."""
    if how == "phase-step":
        object.__setattr__(phase, "step", phase.step + 2)
    elif how == "phase-back":
        was = phase.step
        object.__setattr__(phase, "step", -1)
        object.__setattr__(phase, "step", was)
    elif how == "ticket-cut":
        ticket = getattr(phase, "_ticket", None)
        if ticket is not None:
            ticket.parent = None


def _drive(calls: int, at: int, how: str, flaky: bool, plain: bool) -> dict[str, Any]:
    """One run, the runner calling ``accept`` (``plain``: ``Watch.accept`` replaced by a
    wrapper that calls it) or taking its short way; what the watch judged and said."""
    checked: list[tuple[str, str, object]] = []
    wrapped: list[str] = []
    entered: list[str] = []
    went: list[tuple[str, int]] = []
    count = [0]
    holder: list[Any] = []

    @read_tool
    async def probe(args: _Args) -> dict[str, object]:
        """Look a key up (a "flaky" key times out at its first call)."""
        count[0] += 1
        if count[0] == at:
            _tamper(holder[0], how)
        if args.key == "flaky" and count[0] == 1:
            raise TimeoutError(args.key)
        return {"key": args.key}

    def hook(before: Any, after: Any) -> None:
        went.append((type(after).__name__, after.step))
        if len(went) == at:
            _tamper_phase(after, how)

    turns = [tool_call("probe", f'{{"key": "k{n}"}}') for n in range(calls)]
    if flaky:
        turns.insert(0, tool_call("probe", '{"key": "flaky"}'))
    agent = Agent[None](
        name="a",
        tools=[probe],
        budget=Budget(tokens=10**6),
        max_steps=10**6,
        retry=RetryPolicy(base_delay=0, max_delay=0),
    )
    holder.append(agent)
    runner = Runner(
        agent,
        model=ScriptedModel([*turns, reply("done")]),
        gate=AutoDenyGate(),
        on_transition=hook,
    )
    accept, plain_checked = _watch.Watch.accept, _watch.Watch._checked

    def spy_checked(self: _watch.Watch, before: Any, after: Any, kinds: Any) -> Any:
        try:
            got = plain_checked(self, before, after, kinds)
        except Exception as error:
            checked.append((type(before).__name__, type(after).__name__, repr(error)))
            raise
        checked.append((type(before).__name__, type(after).__name__, got is after))
        return got

    def spy_accept(self: _watch.Watch, before: Any, after: Any, kinds: Any = None) -> Any:
        wrapped.append(type(before).__name__)
        return accept(self, before, after, kinds)

    def profiler(frame: Any, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is accept.__code__:
            entered.append(type(frame.f_locals["before"]).__name__)

    error: object = None
    _watch.Watch._checked = spy_checked  # type: ignore[method-assign]
    if plain:
        _watch.Watch.accept = spy_accept  # type: ignore[method-assign]
    sys.setprofile(profiler)
    try:
        result: Any = anyio.run(runner.run, None, "go")
        outcome: object = (type(result.final).__name__, result.final.step, result.path)
    except Exception as caught:
        outcome = None
        error = (type(caught).__name__, str(caught))
    finally:
        sys.setprofile(None)
        _watch.Watch.accept = accept  # type: ignore[method-assign]
        _watch.Watch._checked = plain_checked  # type: ignore[method-assign]
    return {
        "checked": checked,
        "went": went,
        "outcome": outcome,
        "error": error,
        "wrapped": wrapped,
        "entered": entered,
    }


_LIBRARY = {"Planning", "ToolCalling", "Observing"}


def _alike(calls: int, at: int, how: str, flaky: bool) -> dict[str, Any]:
    quick_cases._FAILED_ONCE.clear()
    short = _drive(calls, at, how, flaky, plain=False)
    plain = _drive(calls, at, how, flaky, plain=True)
    for key in ("checked", "went", "outcome", "error"):
        assert short[key] == plain[key], key
    # The plain way called accept at each transition, the short way never for the
    # library's classes (nor through the wrapper, which it never saw).
    assert len(plain["wrapped"]) >= len(plain["went"]) > 0
    assert not short["wrapped"]
    assert not _LIBRARY & set(short["entered"])
    return short


def test_a_plain_run_is_accepted_the_short_way() -> None:
    """A run of the library's classes: each transition but the retry's is accepted by the
    pair's function in the runner's frame (``_checked`` judges the rest), as by accept."""
    short = _alike(3, 0, "none", True)
    assert short["outcome"] is not None
    assert len(short["checked"]) <= 3
    assert len(short["went"]) >= 10
    assert {name for name, _ in short["went"]} >= _LIBRARY


@pytest.mark.parametrize("how", _HOW)
def test_each_change_is_judged_alike(how: str) -> None:
    """Each change refused (or, put back, accepted) as accept judges it."""
    short = _alike(2, 2, how, False)
    if how in ("budget-other", "budget-copy", "budget-add", "agent-steps", "phase-step"):
        assert short["error"] is not None
        assert short["error"][0] == "IllegalTransitionError"
    if how in ("none", "budget-back", "agent-back", "phase-back"):
        assert short["error"] is None


@settings(max_examples=40, deadline=None)
@given(
    calls=st.integers(0, 3),
    at=st.integers(0, 12),
    how=st.sampled_from(_HOW),
    flaky=st.booleans(),
)
def test_runs_are_judged_alike(calls: int, at: int, how: str, flaky: bool) -> None:
    """Any run, changed anywhere: the same verdicts, errors, records and path."""
    _alike(calls, at, how, flaky)


class _Meta(type):
    def __eq__(cls, other: object) -> bool:
        return True

    __hash__ = type.__hash__


def test_pairs_from_answers_only_for_its_class() -> None:
    """``pairs_from``: the very dict ``accept`` reads for the class itself, ``None`` for
    any other (a class equal to it by its metaclass, a subclass, a class not the
    library's)."""
    seen = quick_cases._RUN[0]
    watch = seen[0]
    for cls in (Planning, ToolCalling, Observing):
        assert watch.pairs_from(cls) is watch._pairs[cls][1]
    alike = _Meta("Planning", (), {})
    watch._pairs[alike] = watch._pairs[Planning]
    try:
        assert watch.pairs_from(alike) is None
    finally:
        del watch._pairs[alike]
    assert watch.pairs_from(quick_cases._SubPlanning) is None
    assert watch.pairs_from(int) is None
