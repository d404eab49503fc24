"""What is known while a file is read: findings, left phases, summaries, the state at a point."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "Finding",
    "_Exit",
    "_Findings",
    "_Left",
    "_Module",
    "_Objects",
    "_State",
    "_Summary",
    "_message",
]

_Objects = frozenset[int] | None  # the phase objects a name may hold; None: not a phase


@dataclass(frozen=True, order=True)
class Finding:
    """A use of a variable after a transition left the phase it held."""

    path: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.message}"


@dataclass(frozen=True)
class _Left:
    """Where a variable's phase was left: the transition, its line, and the call that made it."""

    method: str  # the transition method that left the phase
    line: int  # the line of the call, in the function being read
    via: str  # that call as shown: ``x.fail()``, ``b.fail()``, ``bail()``
    how: str = ""  # what a called function did: ``bail() transitions its parameter 'p' by ...``
    alias: str = ""  # the variable the call went through, when another name is used
    passes: tuple[tuple[int, int], ...] = ()  # the loops around the call, and their passes


def _message(name: str, where: _Left, by: str, again: bool) -> str:
    used = f" by {by}" if by else ""
    again_text = " (in an earlier pass of the loop)" if again else ""
    notes = [where.how, f"{where.alias} was the same phase" if where.alias else ""]
    detail = "; ".join(note for note in notes if note)
    return (
        f"'{name}' is used{used} after {where.via} on line {where.line}{again_text} left its phase"
        f"{f' ({detail})' if detail else ''}; a phase is single-use: use the phase that "
        f"{where.method}() returned"
    )


@dataclass(frozen=True)
class _Summary:
    """What calling one of the file's functions does to the phases it is passed or captures."""

    name: str  # as called: ``bail``, ``close``, ``self.finish``
    params: tuple[str, ...]  # its parameters (without ``self``), the positional ones first
    positional: int  # how many of them can be passed by position
    leaves: tuple[tuple[str, str, str], ...]  # (parameter or captured name, transition, how)
    reads: frozenset[str]  # captured names it reads while they hold the caller's phase
    rebinds: frozenset[str]  # captured names it assigns (``nonlocal``, ``self.a = ...``)


# What is known at one point of a function: the names that hold a phase (each with the
# phase objects it may hold: names that share one are aliases), the names a transition
# has left (with where), and the local functions that can be called by name.
@dataclass
class _State:
    holds: dict[str, frozenset[int]] = field(default_factory=dict[str, frozenset[int]])
    left: dict[str, _Left] = field(default_factory=dict[str, _Left])
    calls: dict[str, _Summary | None] = field(default_factory=dict[str, _Summary | None])

    def copy(self) -> _State:
        return _State(dict(self.holds), dict(self.left), dict(self.calls))

    def merge(self, other: _State) -> None:
        for name, objects in other.holds.items():
            self.holds[name] = self.holds.get(name, frozenset()) | objects
        for name, where in other.left.items():
            self.left.setdefault(name, where)
        for name, summary in other.calls.items():
            self.calls.setdefault(name, summary)

    @staticmethod
    def union(states: Iterable[_State]) -> _State | None:
        merged: _State | None = None
        for state in states:
            if merged is None:
                merged = state.copy()
            else:
                merged.merge(state)
        return merged


class _Exit(Exception):
    """Control left the block (return, raise, break or continue)."""


_Findings = dict[tuple[int, int], Finding]


@dataclass
class _Module:
    """What the whole file tells: its phase classes, and what its functions do."""

    path: str
    classes: frozenset[str]
    findings: _Findings = field(default_factory=dict[tuple[int, int], Finding])
    helpers: dict[str, _Summary] = field(default_factory=dict[str, _Summary])
    methods: dict[tuple[ast.ClassDef, str], _Summary] = field(default_factory=dict)
    # Each class's ``self.a`` names that hold a phase.
    attrs: dict[ast.ClassDef, set[str]] = field(default_factory=dict[ast.ClassDef, set[str]])
    # The phase names a nested function can see where it is defined.
    captured: dict[ast.AST, set[str]] = field(default_factory=dict[ast.AST, set[str]])
    objects: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def fresh(self) -> frozenset[int]:
        """A new phase object."""
        return frozenset({next(self.objects)})
