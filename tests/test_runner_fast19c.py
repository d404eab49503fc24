# pyright: reportPrivateUsage=false
"""The run loop reading its drive's ``hand_back`` and ``_Told``'s logger, levels dict,
capture class, processors list and plain class once a drive (none is rebound during a
drive; the dict and the list change in place and are read in place at every transition).

``hand_back`` set from inside a resumed run at any transition: the run stops at the very
next checkpoint and stays ``running``, as when the loop read ``driving.hand_back`` each
time. The logger's cached answer ``False`` when the run starts, the level set to INFO
inside the run: every later transition is logged. (More changes between transitions:
tests/test_fast_runner4.py and tests/test_fast_runner5.py.)
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_runner5 import _logging_restored, _Records, _runner

from statemachine import Agent, Budget, Runner
from statemachine.persist import MemoryCheckpointer, RunStatus
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

_CALLS = 3  # three tool calls and an answer: 10 transitions after the first


class _Boom(Exception):
    pass


@settings(max_examples=25, deadline=None)
@given(at=st.integers(min_value=1, max_value=3 * _CALLS + 2))
def test_a_hand_back_set_inside_a_run_stops_it_at_the_next_checkpoint(at: int) -> None:
    async def go() -> None:
        store = MemoryCheckpointer()
        agent = Agent[None](name="a", tools=[quick_cases.lookup], budget=Budget(), max_steps=100)
        turns = [tool_call("lookup", f'{{"key": "k{n}"}}') for n in range(_CALLS)]

        def fail_first(before: Any, after: Any) -> None:
            raise _Boom

        first = Runner(
            agent,
            model=ScriptedModel([*turns, reply("done")]),
            gate=AutoDenyGate(),
            checkpointer=store,
            on_transition=fail_first,
        )
        with pytest.raises(_Boom):
            await first.run(None, "go", run_id="r")
        hand_back = anyio.Event()
        seen: list[tuple[str, int]] = []

        def count(before: Any, after: Any) -> None:
            seen.append((after.kind, after.step))
            if len(seen) == at:
                hand_back.set()

        again = Runner(
            agent,
            model=ScriptedModel([*turns, reply("done")]),
            gate=AutoDenyGate(),
            checkpointer=store,
            on_transition=count,
        )
        result = await again.resume("r", hand_back=hand_back)
        if at <= len(seen):  # set: stopped right after that transition, nothing ran after it
            assert len(seen) == at
            assert (result.final.kind, result.final.step) == seen[-1]
            if result.status != "done":
                record = (await store.registry())[0]
                assert record.status is RunStatus.RUNNING
        else:  # the run ended before
            assert result.status == "done"
        _, document = await store.load("r")
        assert document["kind"] == seen[-1][0]

    anyio.run(go)


@settings(max_examples=20, deadline=None)
@given(at=st.integers(min_value=1, max_value=3 * _CALLS + 2))
def test_levels_read_in_place_after_a_cached_no(at: int) -> None:
    """The logger's cached answer (the very dict the loop read once a drive) holds ``False``
    when the run starts; the level set to INFO from inside the run is read at the next
    transition: every transition after it is logged, none before."""
    with _logging_restored() as logger:
        records = _Records()
        logger.handlers[:] = [records]
        logger.propagate = False
        logging.getLogger().setLevel(logging.WARNING)
        logger.setLevel(logging.WARNING)
        assert not logger.isEnabledFor(logging.INFO)  # the cache holds False now
        seen = [0]

        def moved(before: object, after: object) -> None:
            seen[0] += 1
            if seen[0] == at:
                logger.setLevel(logging.INFO)

        result = anyio.run(_runner(moved).run, None, "go")
    steps = [after for _kind, after in result.path[1:]]
    logged = [record for record in records.records if "transition" in record.getMessage()]
    assert len(logged) == len(steps) - at
