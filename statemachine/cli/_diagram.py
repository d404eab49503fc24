"""``statemachine diagram``: an agent's graph as Mermaid, and the README's diagram blocks.

``diagram TARGET`` prints the graph (:func:`statemachine.agent_graph`) of the agents
TARGET names: ``MODULE`` (its Agent values, else its Phases values, else the phase
classes it exports) or ``MODULE:ATTRIBUTE`` (an Agent, a Phases, or a function that
takes no arguments and returns an Agent). ``--check [README.md]`` regenerates every
diagram block of a Markdown file::

    <!-- diagram: agents.travel -->
    ```mermaid
    ...
    ```
    <!-- /diagram -->

and exits 1 when one no longer matches the code; ``--write [README.md]`` rewrites them.
A target that names no agent is refused with exit code 2.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import types
from pathlib import Path
from typing import Any, Final, TypeGuard

from .. import Agent, Phases, SetupError, agent_graph
from .._phases import _ROLES
from ._options import Refusal, resolve

__all__ = ["run"]

_START: Final = re.compile(r"<!-- diagram: (\S+) -->")
_END: Final = "<!-- /diagram -->"


def run(args: argparse.Namespace) -> int:
    """Print TARGET's graph, or check (``--check``) or rewrite (``--write``) a file's blocks."""
    path: str | None = args.check or args.write
    if (path is None) == (args.target is None):
        raise Refusal("give a TARGET, or --check / --write (not both)", code=2)
    if path is not None:
        return _check(Path(path), write=args.write is not None)
    print(_draw(args.target), end="")
    return 0


# --- what a target names -------------------------------------------------------------------


def _load(target: str) -> list[tuple[str, Agent[Any] | Phases[Any]]]:
    """The agents ``target`` names: ``module`` or ``module:attribute``, with labels."""
    module_name, _, attribute = target.partition(":")
    found = resolve(target, code=2)
    if not attribute:
        assert isinstance(found, types.ModuleType)  # no attribute: resolve gives the module
        return _found_in(found)
    if found is None:
        raise Refusal(f"{target}: {module_name} has no attribute {attribute}", code=2)
    return [(target, _named(target, found))]


def _is_agent(value: object) -> TypeGuard[Agent[Any]]:
    return isinstance(value, Agent)


def _is_phases(value: object) -> TypeGuard[Phases[Any]]:
    return isinstance(value, Phases)


def _named(target: str, value: object) -> Agent[Any] | Phases[Any]:
    """The agent ``value`` is, or that ``value()`` (a function without arguments) builds."""
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
            raise Refusal(
                f"{target} needs arguments ({', '.join(needed)}); name an Agent, a Phases, "
                "or a function that takes no arguments and returns an Agent",
                code=2,
            )
        made = value()
        if _is_agent(made):
            return made
        raise Refusal(f"{target}() returned {type(made).__name__}, not an Agent", code=2)
    raise Refusal(
        f"{target} is a {type(value).__name__}; name an Agent, a Phases, or a function "
        "that takes no arguments and returns an Agent",
        code=2,
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
    return [(label, _exported_phases(label, values))]


def _exported_phases(label: str, values: list[tuple[str, Any]]) -> Phases[Any]:
    """The Phases of a module's phase subclasses (at most one for each phase)."""
    chosen: dict[str, Any] = {}  # Phases checks each class against its field
    for name, value in values:
        if not isinstance(value, type) or any(value is base for _, base in _ROLES):
            continue
        for role, base in _ROLES:
            if issubclass(value, base):
                if role in chosen:
                    raise Refusal(
                        f"{label} exports two {base.__name__} phases ({chosen[role].__name__} "
                        f"and {name}); name one agent as {label}:ATTRIBUTE",
                        code=2,
                    )
                chosen[role] = value
    if not chosen:
        raise Refusal(
            f"{label} defines no agent (no Agent, Phases or phase subclass at module "
            f"level); name one as {label}:ATTRIBUTE",
            code=2,
        )
    try:
        return Phases(**chosen)
    except SetupError as error:
        raise Refusal(f"{label}: {error}", code=2) from error


def _draw(target: str) -> str:
    """The Mermaid text for ``target``; several agents are each introduced by a comment."""
    found = _load(target)
    try:
        drawn = [(label, agent_graph(agent).mermaid()) for label, agent in found]
    except SetupError as error:
        raise Refusal(f"{target}: {error}", code=2) from error
    if len(drawn) == 1:
        return drawn[0][1]
    return "\n".join(f"%% {label}\n{text}" for label, text in drawn)


# --- the diagram blocks of a file --------------------------------------------------------


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
        except Refusal as error:
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
    """Check (or, with ``write``, rewrite) the diagram blocks of ``path``; the exit code.

    A block that does not match, or cannot be drawn, is one line each on stderr and
    exit code 1.
    """
    if not path.is_file():
        raise Refusal(f"{path} is not a file", code=2)
    text, stale, broken, blocks = _regenerate(path)
    if blocks == 0:
        raise Refusal(f"{path} has no diagram block (<!-- diagram: MODULE --> ... {_END})")
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
