"""The graph of an agent, read from its phases' ``advance`` annotations, drawn as Mermaid.

Each active phase's ``advance`` is annotated with the union of the phases it may go
to, and mypy checks every body against it; the graph is read from those same
annotations, so it cannot drift from the code. :func:`agent_graph` reads it when an
agent's :class:`Phases` is built (the agent is defined), so a name there that is not
one of the agent's phases is a :class:`SetupError` before anything runs. The
annotations of each class are read once and kept for as long as the class exists.

``python -m statemachine diagram`` (``statemachine/cli/_diagram.py``) prints the graph
and keeps the README's diagram blocks up to date.
"""

from __future__ import annotations

from typing import Any, final

import attrs

from ._phases import _TERMINAL, Active, Agent, Phases, _graph_edges

__all__ = ["AgentGraph", "agent_graph"]


@final
@attrs.frozen
class AgentGraph:
    """The phases of an agent and the transitions between them, as ``advance`` declares.

    ``phases`` pairs each active phase's name (its ``kind``, as in a run's trace) with
    the class the agent runs for it; ``edges`` are ``(from, to)`` names, ordered as
    the phases are (Idle, Planning, AwaitApproval, ToolCalling, Observing, Retrying,
    ModelRetrying, Responding, Failed, Done). ``Failed`` and ``Done`` are terminal: no
    edge leaves them.
    """

    phases: tuple[tuple[str, type[Active[Any]]], ...]
    edges: tuple[tuple[str, str], ...]

    def successors(self, name: str) -> tuple[str, ...]:
        """The phases that ``name``'s ``advance`` may go to (none for a terminal phase)."""
        return tuple(to for from_, to in self.edges if from_ == name)

    def mermaid(self) -> str:
        """The graph as a Mermaid ``stateDiagram-v2``, ending with a newline.

        A phase the agent runs as a subclass carries the subclass's name. The same
        graph always gives the same text, so it can be compared with a saved copy.
        """
        lines = ["stateDiagram-v2"]
        lines += [
            f"    {name} : {cls.__name__}" for name, cls in self.phases if cls.__name__ != name
        ]
        lines.append(f"    [*] --> {self.phases[0][0]}")
        lines += [f"    {from_} --> {to}" for from_, to in self.edges]
        reached = {to for _, to in self.edges}
        lines += [f"    {end.kind} --> [*]" for end in _TERMINAL if end.kind in reached]
        return "\n".join(lines) + "\n"


def agent_graph(agent: Agent[Any] | Phases[Any]) -> AgentGraph:
    """The graph of ``agent`` (or of an agent running with these ``phases``).

    Raises :class:`SetupError`, naming the phase class and what to change, when an
    ``advance`` has no return annotation, names something that cannot be resolved
    in its module, may return something that is not a phase, or names a phase
    subclass that this agent does not run (its ``Phases`` names another class).
    (The graph itself is read by the phases, ``Active.successors``; this draws it.)
    """
    phases = agent.phases if isinstance(agent, Agent) else agent
    named, edges = _graph_edges(phases)
    return AgentGraph(phases=named, edges=edges)
