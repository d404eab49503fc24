"""The graph of an agent, read from its phases' ``advance`` annotations, drawn as Mermaid.

Each active phase's ``advance`` is annotated with the union of the phases it may go
to, and mypy checks every body against it; the graph is read from those same
annotations, so it cannot drift from the code. :func:`agent_graph` reads it when an
agent's :class:`Phases` is built (the agent is defined), so a name there that is not
one of the agent's phases is a :class:`SetupError` before anything runs. The
annotations of each class are read once and kept for as long as the class exists.

``python -m statemachine diagram TARGET`` prints the graph as Mermaid;
``--check [README.md]`` regenerates every diagram block of a Markdown file::

    <!-- diagram: agents.travel -->
    ```mermaid
    ...
    ```
    <!-- /diagram -->

and exits 1 when one no longer matches the code; ``--write [README.md]`` rewrites them.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard, final

import attrs

from ._errors import SetupError
from ._phases import _ROLES, _TERMINAL, Active, Agent, Phases, _graph_edges

__all__ = ["AgentGraph", "agent_graph"]


@final
@attrs.frozen
class AgentGraph:
    """The phases of an agent and the transitions between them, as ``advance`` declares.

    ``phases`` pairs each active phase's name (its ``kind``, as in a run's trace) with
    the class the agent runs for it; ``edges`` are ``(from, to)`` names, ordered as
    the phases are (Idle, Planning, AwaitApproval, ToolCalling, Observing, Retrying,
    Responding, Failed, Done). ``Failed`` and ``Done`` are terminal: no edge leaves them.
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


# --- the command line ---------------------------------------------------------------

_START = re.compile(r"<!-- diagram: (\S+) -->")
_END = "<!-- /diagram -->"


class _TargetError(Exception):
    """A target that names no agent; the message is the one line the command prints."""


def _load(target: str) -> list[tuple[str, Agent[Any] | Phases[Any]]]:
    """The agents ``target`` names: ``module`` or ``module:attribute``, with labels."""
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise _TargetError(f"cannot import {module_name}: {error}") from error
    if attribute:
        return [(target, _named(module, target, attribute))]
    return _found_in(module)


def _is_agent(value: object) -> TypeGuard[Agent[Any]]:
    return isinstance(value, Agent)


def _is_phases(value: object) -> TypeGuard[Phases[Any]]:
    return isinstance(value, Phases)


def _named(module: types.ModuleType, target: str, attribute: str) -> Agent[Any] | Phases[Any]:
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise _TargetError(f"{target}: {module.__name__} has no attribute {attribute}")
        value = getattr(value, part)
    if _is_agent(value) or _is_phases(value):
        return value
    if callable(value):
        needed = [
            name
            for name, parameter in inspect.signature(value).parameters.items()
            if parameter.default is inspect.Parameter.empty
            and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        ]
        if needed:
            raise _TargetError(
                f"{target} needs arguments ({', '.join(needed)}); name an Agent, a Phases, "
                "or a function that takes no arguments and returns an Agent"
            )
        made = value()
        if _is_agent(made):
            return made
        raise _TargetError(f"{target}() returned {type(made).__name__}, not an Agent")
    raise _TargetError(
        f"{target} is a {type(value).__name__}; name an Agent, a Phases, or a function "
        "that takes no arguments and returns an Agent"
    )


def _found_in(module: types.ModuleType) -> list[tuple[str, Agent[Any] | Phases[Any]]]:
    """A module's agents: its Agent values, else its Phases values, else its phase classes.

    A package that builds its agent in a function (it needs a provider, a desk) has
    no Agent value; its diagram is then of the phase subclasses it exports, one per
    phase, run with the library's own class for every other phase.
    """
    exported = getattr(module, "__all__", None)
    names = sorted(
        exported if exported is not None else (n for n in vars(module) if not n.startswith("_"))
    )
    values = [(name, getattr(module, name)) for name in names if hasattr(module, name)]
    label = module.__name__
    agents: list[tuple[str, Agent[Any] | Phases[Any]]] = [
        (f"{label}:{name}", value) for name, value in values if _is_agent(value)
    ]
    if agents:
        return agents
    phases: list[tuple[str, Agent[Any] | Phases[Any]]] = [
        (f"{label}:{name}", value) for name, value in values if _is_phases(value)
    ]
    if phases:
        return phases
    chosen: dict[str, Any] = {}  # Phases checks each class against its field
    for name, value in values:
        if not isinstance(value, type) or any(value is base for _, base in _ROLES):
            continue
        for role, base in _ROLES:
            if issubclass(value, base):
                if role in chosen:
                    raise _TargetError(
                        f"{label} exports two {base.__name__} phases ({chosen[role].__name__} "
                        f"and {name}); name one agent as {label}:ATTRIBUTE"
                    )
                chosen[role] = value
    if not chosen:
        raise _TargetError(
            f"{label} defines no agent (no Agent, Phases or phase subclass at module "
            f"level); name one as {label}:ATTRIBUTE"
        )
    try:
        return [(label, Phases(**chosen))]
    except SetupError as error:
        raise _TargetError(f"{label}: {error}") from error


def _draw(target: str) -> str:
    """The Mermaid text for ``target``; several agents are each introduced by a comment."""
    found = _load(target)
    try:
        drawn = [(label, agent_graph(agent).mermaid()) for label, agent in found]
    except SetupError as error:
        raise _TargetError(f"{target}: {error}") from error
    if len(drawn) == 1:
        return drawn[0][1]
    return "\n".join(f"%% {label}\n{text}" for label, text in drawn)


def _block(target: str) -> list[str]:
    return ["```mermaid\n", *_draw(target).splitlines(keepends=True), "```\n"]


def _regenerate(path: Path) -> tuple[str, list[str], list[str], int]:
    """The file's text with every diagram block regenerated.

    Also: one line per block that no longer matches the code, one line per block
    that cannot be regenerated (an unclosed block, a target that names no agent),
    and the number of blocks.
    """
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    out: list[str] = []
    stale: list[str] = []
    broken: list[str] = []
    blocks = 0
    index = 0
    while index < len(lines):
        line = lines[index]
        out.append(line)
        index += 1
        start = _START.fullmatch(line.strip())
        if start is None:
            continue
        blocks += 1
        first = index
        while index < len(lines) and lines[index].strip() != _END:
            if _START.fullmatch(lines[index].strip()):
                break
            index += 1
        if index == len(lines) or lines[index].strip() != _END:
            broken.append(f"{path}:{first}: the diagram block has no {_END} line to close it")
            out.extend(lines[first:])
            break
        target = start.group(1)
        try:
            fresh = _block(target)
        except _TargetError as error:
            broken.append(f"{path}:{first}: {error}")
            fresh = lines[first:index]
        if fresh != lines[first:index]:
            stale.append(
                f"{path}:{first}: the diagram of {target} does not match the code; "
                f"run: python -m statemachine diagram --write {path}"
            )
        out.extend(fresh)
    return "".join(out), stale, broken, blocks


def _check(path: Path, *, write: bool) -> int:
    if not path.is_file():
        print(f"diagram: {path} is not a file", file=sys.stderr)
        return 2
    text, stale, broken, blocks = _regenerate(path)
    if blocks == 0:
        print(
            f"diagram: {path} has no diagram block (<!-- diagram: MODULE --> ... {_END})",
            file=sys.stderr,
        )
        return 1
    if broken or (stale and not write):
        print("\n".join([*broken, *([] if write else stale)]), file=sys.stderr)
        return 1
    if write:
        if stale:
            path.write_text(text, encoding="utf-8")
        print(f"{path}: {len(stale)} of {blocks} diagram(s) rewritten")
        return 0
    print(f"{path}: {blocks} diagram(s) match the code")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m statemachine diagram",
        description=(
            "Print an agent's graph, read from its phases' advance annotations, as Mermaid. "
            "TARGET is a module (its Agent values, else the phase classes it exports) or "
            "MODULE:ATTRIBUTE (an Agent, a Phases, or a function that takes no arguments)."
        ),
    )
    parser.add_argument("target", nargs="?", metavar="TARGET")
    files = parser.add_mutually_exclusive_group()
    files.add_argument(
        "--check",
        nargs="?",
        const="README.md",
        metavar="FILE",
        help="exit 1 when a diagram block of FILE (default README.md) does not match the code",
    )
    files.add_argument(
        "--write",
        nargs="?",
        const="README.md",
        metavar="FILE",
        help="regenerate the diagram blocks of FILE (default README.md)",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    """``python -m statemachine diagram``; ``argv[0]`` is the command name."""
    parser = _parser()
    try:
        args = parser.parse_args(list(argv[1:]))
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    path: str | None = args.check or args.write
    if (path is None) == (args.target is None):
        parser.print_usage(sys.stderr)
        print("diagram: give a TARGET, or --check / --write (not both)", file=sys.stderr)
        return 2
    if path is not None:
        return _check(Path(path), write=args.write is not None)
    try:
        print(_draw(args.target), end="")
    except _TargetError as error:
        print(f"diagram: {error}", file=sys.stderr)
        return 2
    return 0
