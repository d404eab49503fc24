"""Our side of the benchmark, and the floors in plain Python (run in the project's venv).

``python bench/loops.py WORKLOAD --calls N`` prints one JSON object (see
``_common.main``). The workloads, from the bare mechanism up to a durable run:

- ``floor-attrs``: frozen attrs objects, each returning the next one.
- ``floor-attrs-wide``: the same with the fields our phases carry (agent, context,
  transcript, spend, step, loop memory, and the call and its result), keyword-only.
- ``ours-bare``: our phase classes, one transition = the single-use check plus
  building the next frozen phase (``_leave`` + ``_next``), nothing else.
- ``ours-phases``: the public transitions without the runner: the model's call
  routed and validated, ``Planning.call_tool`` (the governor's action record),
  ``ToolCalling.execute`` (budget check, deadline, the tool), ``Observing.observe``
  (the result as JSON, the governor's convergence check).
- ``ours``: the full run in memory: ``Runner`` with the scripted turns, the governor,
  the budget and the default (no-op) tracer; the result keeps the final phase and the
  path (the default).
- ``ours-kept``: the same with ``Runner(keep_states=True)``: the result keeps every phase.
- ``ours-long`` / ``ours-sqlite-long``: ``ours`` / ``ours-sqlite`` timing each transition,
  for long runs: the cost per transition at the start and at the end of the run.
- ``ours-otel``: the same with the OpenTelemetry SDK on (a batch span processor and
  an exporter that drops the spans), for the tracing overhead.
- ``ours-sqlite``: the full run with ``SQLiteCheckpointer`` saving after every transition.
- ``floor-sqlite-full`` / ``floor-sqlite-delta``: one SQLite insert per transition
  (WAL, ``synchronous=NORMAL``, one transaction each) of the whole state as JSON, or
  of only what changed.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import time
from collections.abc import Sequence
from typing import Any

import anyio
import attrs
from _common import Cap, CapReachedError, Outcome, Run, Workload, main, script, small_dict
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    LoopGovernor,
    ModelReply,
    ModelRequest,
    Observing,
    Phase,
    ReadCall,
    Runner,
    Runtime,
    SQLiteCheckpointer,
    read_tool,
)
from statemachine.testing import AutoDenyGate, reply, tool_call

# --- our agent ----------------------------------------------------------------------------


class LookupArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: LookupArgs) -> dict[str, object]:
    """Look a key up."""
    return small_dict(args.key)


def _agent(*, long: bool = False) -> Agent[None]:
    # max_steps: the loop is measured, not the step cap (which would end it at 50).
    if not long:
        return Agent[None](name="bench", tools=[lookup], budget=Budget(), max_steps=10**9)
    # A long run's results, alike but for their keys, plateau after about 11,000 calls;
    # the convergence check still runs at every call, but does not end the run.
    governor = LoopGovernor(plateau_steps=10**9)
    return Agent[None](
        name="bench", tools=[lookup], budget=Budget(), max_steps=10**9, governor=governor
    )


class CappedModel:
    """The precomputed turns, one per call, checking the run's time cap first.

    Unlike ``ScriptedModel`` (a testing helper that records every request, each holding
    the whole conversation), it keeps nothing: the peers' loops keep no request either.
    """

    def __init__(self, calls: int, cap: Cap) -> None:
        self.turns = iter(
            [
                reply("done") if turn is None else tool_call(turn.name, turn.arguments)
                for turn in script(calls)
            ]
        )
        self.cap = cap

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.cap.check()
        return next(self.turns)


def _read_call(agent: Agent[None], name: str, arguments: str) -> ReadCall:
    call = agent.tools.route(name, arguments)
    if not isinstance(call, ReadCall):
        raise TypeError(f"expected a read call, got {call!r}")
    return call


def ours_bare(calls: int, db: str | None, cap: Cap) -> Run:
    agent = _agent()
    phases = agent.phases
    call = _read_call(agent, "lookup", '{"key": "k0"}')
    output = small_dict("k0")

    def run() -> Outcome:
        planning = agent.start(None, "go").receive("go")
        for _ in range(calls):
            planning._leave("call_tool")
            calling = planning._next(phases.tool_calling, call=call, call_id="call-1")
            calling._leave("execute")
            observing = calling._next(phases.observing, call=call, call_id="call-1", output=output)
            observing._leave("observe")
            planning = observing._next(phases.planning)
        return Outcome(3 * calls)

    return run


def ours_phases(calls: int, db: str | None, cap: Cap) -> Run:
    agent = _agent()
    turns = script(calls)[:-1]
    model = CappedModel(calls, cap)

    async def loop() -> int:
        rt = Runtime(run_id="bench", model=model, gate=AutoDenyGate())
        planning = agent.start(None, "go").receive("go")
        transitions = 0
        for turn in turns:
            assert turn is not None
            calling = planning.call_tool(
                _read_call(agent, turn.name, turn.arguments), raw_arguments=turn.arguments
            )
            observed = await calling.execute(rt)
            if not isinstance(observed, Observing):
                raise TypeError(f"the tool call did not succeed: {observed!r}")
            planning = observed.observe()
            transitions += 3
        return transitions

    return lambda: Outcome(anyio.run(loop))


def _run_ours(runner: Runner[None], counted: list[int]) -> Run:
    def run() -> Outcome:
        try:
            anyio.run(runner.run, None, "go")
        except CapReachedError:
            return Outcome(counted[0], {"capped": True})
        return Outcome(counted[0])

    return run


def _counter() -> tuple[list[int], Any]:
    counted = [0]

    def count(before: Phase[None], after: Phase[None]) -> None:
        counted[0] += 1

    return counted, count


def ours(calls: int, db: str | None, cap: Cap) -> Run:
    counted, count = _counter()
    runner = Runner(
        _agent(), model=CappedModel(calls, cap), gate=AutoDenyGate(), on_transition=count
    )
    return _run_ours(runner, counted)


def ours_kept(calls: int, db: str | None, cap: Cap) -> Run:
    counted, count = _counter()
    runner = Runner(
        _agent(),
        model=CappedModel(calls, cap),
        gate=AutoDenyGate(),
        on_transition=count,
        keep_states=True,
    )
    return _run_ours(runner, counted)


# The windows a long run's start and end are measured over: WINDOW transitions after the
# first SKIP (the run settling in), and the last WINDOW. Each window is cut into BLOCKS
# and its cost is the median block's, so that a burst of another process's work on this
# shared machine (which stalls a few blocks) does not pass for the run's own cost.
SKIP, WINDOW, BLOCKS = 300, 3000, 10


def _clocked() -> tuple[list[float], Any]:
    times: list[float] = []
    clock = time.perf_counter

    def stamp(before: Phase[None], after: Phase[None]) -> None:
        times.append(clock())

    return times, stamp


def _window_us(times: list[float], start: int) -> float:
    """Microseconds per transition over ``WINDOW`` transitions from ``start`` (median block)."""
    size = WINDOW // BLOCKS
    blocks = [
        (times[at + size] - times[at]) / size * 1e6
        for at in range(start, start + WINDOW - size + 1, size)
    ]
    return statistics.median(blocks)


def _start_and_end(times: list[float]) -> dict[str, Any]:
    """Microseconds per transition over the first and the last window of a long run."""
    if len(times) < SKIP + 2 * WINDOW + 1:
        return {}
    start = _window_us(times, SKIP)
    end = _window_us(times, len(times) - 1 - WINDOW)
    return {"start_us": start, "end_us": end, "end_over_start": end / start}


def ours_long(calls: int, db: str | None, cap: Cap) -> Run:
    times, stamp = _clocked()
    runner = Runner(
        _agent(long=True), model=CappedModel(calls, cap), gate=AutoDenyGate(), on_transition=stamp
    )

    def run() -> Outcome:
        capped = False
        try:
            anyio.run(runner.run, None, "go")
        except CapReachedError:
            capped = True
        return Outcome(len(times), {"capped": capped, **_start_and_end(times)})

    return run


def ours_sqlite_long(calls: int, db: str | None, cap: Cap) -> Run:
    assert db is not None, "run with --store"
    times, stamp = _clocked()
    model = CappedModel(calls, cap)

    async def go() -> Outcome:
        async with SQLiteCheckpointer(db) as checkpointer:
            runner = Runner(
                _agent(long=True),
                model=model,
                gate=AutoDenyGate(),
                on_transition=stamp,
                checkpointer=checkpointer,
            )
            capped = False
            try:
                await runner.run(None, "go", run_id="bench")
            except CapReachedError:
                capped = True
        return Outcome(len(times), {"capped": capped, **_start_and_end(times)})

    return lambda: anyio.run(go)


def ours_otel(calls: int, db: str | None, cap: Cap) -> Run:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    counted, count = _counter()
    runner = Runner(
        _agent(),
        model=CappedModel(calls, cap),
        gate=AutoDenyGate(),
        on_transition=count,
        tracer=provider.get_tracer("bench"),
    )
    run = _run_ours(runner, counted)

    def traced() -> Outcome:
        try:
            return run()
        finally:
            provider.shutdown()

    return traced


def ours_sqlite(calls: int, db: str | None, cap: Cap) -> Run:
    assert db is not None, "run with --store"
    counted, count = _counter()
    model = CappedModel(calls, cap)

    async def go() -> Outcome:
        async with SQLiteCheckpointer(db) as checkpointer:
            runner = Runner(
                _agent(),
                model=model,
                gate=AutoDenyGate(),
                on_transition=count,
                checkpointer=checkpointer,
            )
            capped = False
            try:
                await runner.run(None, "go", run_id="bench")
            except CapReachedError:
                capped = True
            history = await checkpointer.history("bench")
        snapshots = [entry.size for entry in history if entry.snapshot]
        deltas = [entry.size for entry in history if not entry.snapshot]
        return Outcome(
            counted[0],
            {
                "capped": capped,
                "checkpoints": len(history),
                "snapshot_bytes": sum(snapshots),
                "snapshots": len(snapshots),
                "delta_bytes": sum(deltas),
                "deltas": len(deltas),
                "last_snapshot_bytes": snapshots[-1] if snapshots else 0,
                "last_delta_bytes": deltas[-1] if deltas else 0,
            },
        )

    return lambda: anyio.run(go)


# --- floors -------------------------------------------------------------------------------


@attrs.frozen
class FloorPlanning:
    n: int

    def call(self) -> FloorCalling:
        return FloorCalling(self.n)


@attrs.frozen
class FloorCalling:
    n: int

    def done(self) -> FloorObserving:
        return FloorObserving(self.n)


@attrs.frozen
class FloorObserving:
    n: int

    def observe(self) -> FloorPlanning:
        return FloorPlanning(self.n + 1)


def floor_attrs(calls: int, db: str | None, cap: Cap) -> Run:
    def run() -> Outcome:
        state = FloorPlanning(0)
        for _ in range(calls):
            state = state.call().done().observe()
        return Outcome(3 * calls)

    return run


@attrs.frozen(kw_only=True)
class WidePlanning:
    """The floor with the fields our phases carry (and no single-use cell)."""

    agent: object
    ctx: object
    transcript: tuple[object, ...]
    spent: object
    step: int
    loop: object

    def call(self, call: object, call_id: str) -> WideCalling:
        return WideCalling(
            agent=self.agent,
            ctx=self.ctx,
            transcript=self.transcript,
            spent=self.spent,
            step=self.step + 1,
            loop=self.loop,
            call=call,
            call_id=call_id,
        )


@attrs.frozen(kw_only=True)
class WideCalling:
    agent: object
    ctx: object
    transcript: tuple[object, ...]
    spent: object
    step: int
    loop: object
    call: object
    call_id: str

    def done(self, output: object) -> WideObserving:
        return WideObserving(
            agent=self.agent,
            ctx=self.ctx,
            transcript=self.transcript,
            spent=self.spent,
            step=self.step + 1,
            loop=self.loop,
            call=self.call,
            call_id=self.call_id,
            output=output,
        )


@attrs.frozen(kw_only=True)
class WideObserving:
    agent: object
    ctx: object
    transcript: tuple[object, ...]
    spent: object
    step: int
    loop: object
    call: object
    call_id: str
    output: object

    def observe(self) -> WidePlanning:
        return WidePlanning(
            agent=self.agent,
            ctx=self.ctx,
            transcript=self.transcript,
            spent=self.spent,
            step=self.step + 1,
            loop=self.loop,
        )


def floor_attrs_wide(calls: int, db: str | None, cap: Cap) -> Run:
    output = small_dict("k0")

    def run() -> Outcome:
        state = WidePlanning(agent=None, ctx=None, transcript=(), spent=None, step=0, loop=None)
        for _ in range(calls):
            state = state.call("lookup", "call-1").done(output).observe()
        return Outcome(3 * calls)

    return run


def _floor_sqlite(calls: int, db: str | None, cap: Cap, *, whole: bool) -> Run:
    assert db is not None, "run with --store"
    return lambda: _floor_sqlite_run(calls, db, cap, whole=whole)


def _floor_sqlite_run(calls: int, db: str, cap: Cap, *, whole: bool) -> Outcome:
    connection = sqlite3.connect(db, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")
    connection.execute(
        "CREATE TABLE checkpoints (run_id TEXT, seq INTEGER, state TEXT, PRIMARY KEY (run_id, seq))"
    )
    state: dict[str, Any] = {"phase": "Planning", "messages": [], "output": None}
    seq = 0

    def save(change: dict[str, Any]) -> None:
        nonlocal seq
        seq += 1
        document = json.dumps(state if whole else change)
        connection.execute("INSERT INTO checkpoints VALUES (?, ?, ?)", ("bench", seq, document))

    transitions = 0
    try:
        for turn in script(calls):
            cap.check()
            if turn is None:
                state["phase"] = "Done"
                save({"phase": "Done"})
                transitions += 1
                break
            asked = {"role": "assistant", "tool": turn.name, "arguments": turn.arguments}
            state["phase"] = "ToolCalling"
            state["messages"].append(asked)
            save({"phase": "ToolCalling", "append": [asked]})
            output = small_dict(turn.key)
            state["phase"] = "Observing"
            state["output"] = output
            save({"phase": "Observing", "output": output})
            told = {"role": "tool", "content": json.dumps(output)}
            state["phase"] = "Planning"
            state["messages"].append(told)
            state["output"] = None
            save({"phase": "Planning", "append": [told], "output": None})
            transitions += 3
    except CapReachedError:
        return Outcome(transitions, {"capped": True})
    finally:
        connection.close()
    return Outcome(transitions)


def floor_sqlite_full(calls: int, db: str | None, cap: Cap) -> Run:
    return _floor_sqlite(calls, db, cap, whole=True)


def floor_sqlite_delta(calls: int, db: str | None, cap: Cap) -> Run:
    return _floor_sqlite(calls, db, cap, whole=False)


WORKLOADS: dict[str, Workload] = {
    "floor-attrs": floor_attrs,
    "floor-attrs-wide": floor_attrs_wide,
    "ours-bare": ours_bare,
    "ours-phases": ours_phases,
    "ours": ours,
    "ours-kept": ours_kept,
    "ours-long": ours_long,
    "ours-sqlite-long": ours_sqlite_long,
    "ours-otel": ours_otel,
    "ours-sqlite": ours_sqlite,
    "floor-sqlite-full": floor_sqlite_full,
    "floor-sqlite-delta": floor_sqlite_delta,
}

if __name__ == "__main__":
    main(WORKLOADS)
