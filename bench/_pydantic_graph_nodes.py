# mypy: ignore-errors
# Runs only in the peers' virtual env, like peer_loops.py (see there).
"""The agent loop as pydantic-graph 1.x nodes: each node's ``run`` returns the next node.

In a module of their own: pydantic-graph reads the edges from the return annotations,
resolved in the module's namespace, so the node classes must be defined at the top level.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from _common import Cap, small_dict
from pydantic_graph import BaseNode, End, GraphRunContext


@dataclass
class GraphState:
    turns: list
    cap: Cap
    turn: int = 0
    count: int = 0
    messages: list = field(default_factory=list)


@dataclass
class PlanningNode(BaseNode[GraphState, None, str]):
    async def run(self, ctx: GraphRunContext[GraphState]) -> ToolCallingNode | End[str]:
        state = ctx.state
        state.cap.check()
        turn = state.turns[state.turn]
        state.turn += 1
        state.count += 1
        if turn is None:
            return End("done")
        state.messages.append({"role": "assistant", "tool": turn.name, "arguments": turn.arguments})
        return ToolCallingNode(turn.key)


@dataclass
class ToolCallingNode(BaseNode[GraphState, None, str]):
    key: str

    async def run(self, ctx: GraphRunContext[GraphState]) -> ObservingNode:
        ctx.state.count += 1
        return ObservingNode(small_dict(self.key))


@dataclass
class ObservingNode(BaseNode[GraphState, None, str]):
    output: dict

    async def run(self, ctx: GraphRunContext[GraphState]) -> PlanningNode:
        ctx.state.count += 1
        ctx.state.messages.append({"role": "tool", "content": self.output})
        return PlanningNode()
