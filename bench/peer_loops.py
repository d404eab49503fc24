# mypy: ignore-errors
# This file runs only in the peers' virtual env (bench/.peers-venv, made by bench/peers.py),
# where `statemachine` is python-statemachine and langgraph, burr, pydantic_graph and
# transitions are installed; in the project's venv none of that resolves, so mypy is told to
# report nothing here. The harness that runs it (run.py) is checked strictly.
"""The same agent loop in each peer framework (run in bench/.peers-venv).

``python bench/peer_loops.py WORKLOAD --calls N`` prints one JSON object (see
``_common.main``). Each workload does the same work: Planning reads the model's next
scripted turn (a tool call, or the answer), ToolCalling runs the read-only tool,
Observing appends the request and the result to the conversation, back to Planning.

- ``transitions``: a ``transitions.Machine``; the loop is driven by the caller, each
  step a trigger.
- ``python-statemachine``: a ``StateMachine`` subclass, each step an event.
- ``pydantic-graph``: 1.x ``BaseNode`` classes whose ``run`` returns the next node.
- ``langgraph`` / ``langgraph-sqlite``: a ``StateGraph`` (a list channel with an
  ``operator.add`` reducer), in memory, or compiled with ``SqliteSaver`` and invoked
  with ``durability="sync"`` (each checkpoint written before the next step).
- ``burr`` / ``burr-sqlite``: function actions and ``when`` conditions, in memory, or
  with ``SQLitePersister`` saving after every step (the persister's own defaults).
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import warnings
from typing import Annotated, Any, TypedDict

from _common import CapReachedError, Outcome, main, script, small_dict

# --- transitions ------------------------------------------------------------------------


def transitions_loop(calls, db, cap):
    from transitions import Machine

    turns = script(calls)

    class Loop:
        pass

    def run():
        model = Loop()
        Machine(
            model=model,
            states=["planning", "tool_calling", "observing", "done"],
            transitions=[
                ["call", "planning", "tool_calling"],
                ["result", "tool_calling", "observing"],
                ["observe", "observing", "planning"],
                ["answer", "planning", "done"],
            ],
            initial="planning",
            auto_transitions=False,
        )
        messages = []
        count = 0
        try:
            for turn in turns:
                cap.check()
                if turn is None:
                    model.answer()
                    count += 1
                    break
                model.call()
                messages.append(
                    {"role": "assistant", "tool": turn.name, "arguments": turn.arguments}
                )
                output = small_dict(turn.key)
                model.result()
                messages.append({"role": "tool", "content": output})
                model.observe()
                count += 3
        except CapReachedError:
            return Outcome(count, {"capped": True})
        return Outcome(count)

    return run


# --- python-statemachine ------------------------------------------------------------------


def python_statemachine_loop(calls, db, cap):
    from statemachine import State, StateMachine

    class Loop(StateMachine):
        planning = State(initial=True)
        tool_calling = State()
        observing = State()
        done = State(final=True)

        call = planning.to(tool_calling)
        result = tool_calling.to(observing)
        observe = observing.to(planning)
        answer = planning.to(done)

    turns = script(calls)

    def run():
        machine = Loop()
        messages = []
        count = 0
        try:
            for turn in turns:
                cap.check()
                if turn is None:
                    machine.answer()
                    count += 1
                    break
                machine.call()
                messages.append(
                    {"role": "assistant", "tool": turn.name, "arguments": turn.arguments}
                )
                output = small_dict(turn.key)
                machine.result()
                messages.append({"role": "tool", "content": output})
                machine.observe()
                count += 3
        except CapReachedError:
            return Outcome(count, {"capped": True})
        return Outcome(count)

    return run


# --- pydantic-graph (1.x) -------------------------------------------------------------------


def pydantic_graph_loop(calls, db, cap):
    with warnings.catch_warnings():
        # 1.x deprecates the BaseNode runner in favour of its builder API (2.x); measured
        # here as the 1.x API it is.
        warnings.simplefilter("ignore")
        from _pydantic_graph_nodes import GraphState, ObservingNode, PlanningNode, ToolCallingNode
        from pydantic_graph import Graph

        graph = Graph(nodes=(PlanningNode, ToolCallingNode, ObservingNode))
    turns = script(calls)

    def run():
        state = GraphState(turns=turns, cap=cap)
        try:
            asyncio.run(graph.run(PlanningNode(), state=state))
        except CapReachedError:
            return Outcome(state.count, {"capped": True})
        return Outcome(state.count)

    return run


# --- LangGraph ------------------------------------------------------------------------------


class LangGraphState(TypedDict):
    messages: Annotated[list, operator.add]
    turn: int
    pending: Any
    output: Any


def _langgraph(calls, db, cap):
    from langgraph.graph import END, START, StateGraph

    turns = script(calls)
    counted = [0]

    def planning(state):
        cap.check()
        counted[0] += 1
        turn = turns[state["turn"]]
        if turn is None:
            return {"turn": state["turn"] + 1, "pending": None}
        asked = {"role": "assistant", "tool": turn.name, "arguments": turn.arguments}
        return {"turn": state["turn"] + 1, "pending": turn.key, "messages": [asked]}

    def tool_calling(state):
        counted[0] += 1
        return {"output": small_dict(state["pending"]), "pending": None}

    def observing(state):
        counted[0] += 1
        return {"messages": [{"role": "tool", "content": state["output"]}], "output": None}

    def route(state):
        return "tool_calling" if state["pending"] is not None else END

    builder = StateGraph(LangGraphState)
    builder.add_node("planning", planning)
    builder.add_node("tool_calling", tool_calling)
    builder.add_node("observing", observing)
    builder.add_edge(START, "planning")
    builder.add_conditional_edges("planning", route, ["tool_calling", END])
    builder.add_edge("tool_calling", "observing")
    builder.add_edge("observing", "planning")
    config = {"recursion_limit": 10 * calls + 100, "configurable": {"thread_id": "bench"}}
    start = {"messages": [], "turn": 0, "pending": None, "output": None}
    return builder, config, start, counted


def langgraph_loop(calls, db, cap):
    builder, config, start, counted = _langgraph(calls, db, cap)
    graph = builder.compile()

    def run():
        try:
            graph.invoke(start, config)
        except CapReachedError:
            return Outcome(counted[0], {"capped": True})
        return Outcome(counted[0])

    return run


def langgraph_sqlite_loop(calls, db, cap):
    from langgraph.checkpoint.sqlite import SqliteSaver

    builder, config, start, counted = _langgraph(calls, db, cap)
    connection = sqlite3.connect(db, check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(connection))

    def run():
        try:
            graph.invoke(start, config, durability="sync")
        except CapReachedError:
            return Outcome(counted[0], {"capped": True})
        finally:
            connection.close()
        return Outcome(counted[0])

    return run


# --- Burr -----------------------------------------------------------------------------------


def _burr(calls, db, cap):
    from burr.core import ApplicationBuilder, State, action, default, when

    turns = script(calls)
    counted = [0]

    @action(reads=["turn"], writes=["turn", "pending", "messages"])
    def planning(state: State) -> tuple[dict, State]:
        cap.check()
        counted[0] += 1
        turn = turns[state["turn"]]
        if turn is None:
            return {}, state.update(turn=state["turn"] + 1, pending=None)
        asked = {"role": "assistant", "tool": turn.name, "arguments": turn.arguments}
        updated = state.update(turn=state["turn"] + 1, pending=turn.key)
        return {}, updated.append(messages=asked)

    @action(reads=["pending"], writes=["output", "pending"])
    def tool_calling(state: State) -> tuple[dict, State]:
        counted[0] += 1
        return {}, state.update(output=small_dict(state["pending"]), pending=None)

    @action(reads=["output"], writes=["messages", "output"])
    def observing(state: State) -> tuple[dict, State]:
        counted[0] += 1
        told = {"role": "tool", "content": state["output"]}
        return {}, state.append(messages=told).update(output=None)

    @action(reads=[], writes=[])
    def answered(state: State) -> tuple[dict, State]:
        counted[0] += 1
        return {}, state

    builder = (
        ApplicationBuilder()
        .with_actions(
            planning=planning, tool_calling=tool_calling, observing=observing, answered=answered
        )
        .with_transitions(
            ("planning", "answered", when(pending=None)),
            ("planning", "tool_calling", default),
            ("tool_calling", "observing"),
            ("observing", "planning"),
        )
        .with_state(turn=0, pending=None, output=None, messages=[])
        .with_entrypoint("planning")
    )
    return builder, counted


def _burr_run(app, counted):
    def run():
        try:
            app.run(halt_after=["answered"])
        except CapReachedError:
            return Outcome(counted[0], {"capped": True})
        return Outcome(counted[0])

    return run


def burr_loop(calls, db, cap):
    builder, counted = _burr(calls, db, cap)
    return _burr_run(builder.build(), counted)


def burr_sqlite_loop(calls, db, cap):
    from burr.core.persistence import SQLitePersister

    builder, counted = _burr(calls, db, cap)
    persister = SQLitePersister(db_path=db, table_name="burr_state")
    persister.initialize()
    app = builder.with_identifiers(app_id="bench").with_state_persister(persister).build()
    return _burr_run(app, counted)


WORKLOADS = {
    "transitions": transitions_loop,
    "python-statemachine": python_statemachine_loop,
    "pydantic-graph": pydantic_graph_loop,
    "langgraph": langgraph_loop,
    "langgraph-sqlite": langgraph_sqlite_loop,
    "burr": burr_loop,
    "burr-sqlite": burr_sqlite_loop,
}

if __name__ == "__main__":
    main(WORKLOADS)
