"""A static check for a phase used after a transition left it: ``python -m statemachine.lint``.

Python has no move semantics, so the runtime refuses a second transition from the same
phase object (:class:`PhaseReusedError`). This checker finds the same mistake before
the code runs, and more of it: any use of the old variable after a transition, also a
read such as ``x.ctx`` after ``await x.execute(rt)`` (the run has moved on; the new
phase holds the new conversation, spend and step)::

    python -m statemachine.lint agents/ my_agent.py

prints one ``file:line:col: message`` line per finding and exits 1 if there is any,
0 if there is none, and 2 (with a message on stderr) for a path that does not exist
or a file that does not parse.

The rule, within one function (or the module's top level), read top to bottom:

- A *transition* is a call ``x.m(...)`` where ``m`` is the name of a public method of
  a non-terminal phase that returns a phase (:data:`TRANSITIONS`, read from the
  annotations in ``statemachine._phases``: ``receive``, ``call_tool``, ``execute``,
  ``retry``, ``advance``, ...) and ``x`` is a plain variable, or an attribute of
  ``self`` (``self.state``), that holds a phase.
- A variable *holds a phase* when it is annotated with a phase class (a parameter or
  ``x: T = ...``; ``T`` is one of the nine phases, ``Phase``, ``Active``, a subscript
  or union of them, or a class in the same file that subclasses one); when it is
  assigned the result of a transition, of a phase class's constructor, of
  ``agent.start(ctx, text)`` (a ``.start`` call with two arguments) or a variable
  that holds a phase; when it is checked with ``isinstance(x, <phase class>)`` or
  matched against a phase class pattern; and ``self`` in a method of a class in the
  same file that subclasses a phase. ``self.a`` holds a phase, unleft, at the start
  of every method of a class that annotates ``a`` with a phase class (in its body or
  as ``self.a: T``) or assigns it a phase in one of its methods.
- Aliases: after ``b = a`` (or ``b := a``, ``self.a = a``) both names hold the same
  phase object: a transition through either leaves both. Binding one anew ends it.
- Calls of the file's own functions, by name: a module-level function, a method of
  the same class (``self.m(...)``) and a nested ``def`` or a ``lambda`` assigned to a
  name are summarised first (to a fixed point: a helper that calls one counts). A
  call transitions the argument passed (by position or keyword, a variable or
  ``self.a``) for each parameter the function transitions, and each captured
  variable (for a method: ``self`` and ``self.a``) it transitions. A call of one that
  reads or transitions a captured phase already left is a finding at the call, so a
  closure that transitions ``p`` is reported at its second call. A captured name it
  reassigns (``nonlocal``, ``self.a = ...``) holds a new phase after the call.
- After a transition on ``x`` the variable is *left*; reading it again is a finding,
  until ``x`` is bound anew (``state = await state.advance(rt)`` rebinds it, which
  is the normal pattern). The arguments of the transition itself are read before the
  phase is left, so ``planning.call_tool(planning.agent.tools.call(...))`` is fine.
- Branches: a variable left in one branch of an ``if``/``match``/``try`` that falls
  through is left after it; a branch that ends in ``return``, ``raise``, ``break``
  or ``continue`` does not fall through. Loops are read twice, the second time with
  what the first left, so a transition in a loop body on a variable the loop does
  not rebind is found on its second pass (``for c in calls: planning.call_tool(c)``);
  only such a finding says "in an earlier pass of the loop". A transition inside a
  comprehension on a variable the comprehension does not bind runs once per item,
  and is a finding too.

Limits (what the checker does not see): it has no types, so a phase reached through
another object's attribute, a container, a function's return value or another
module's subclass is not tracked unless annotated; a function passed as a value (a
callback), another object's method or another module's function is not followed; a
function that transitions a parameter on some paths counts as doing it at every
call. The runtime's single-use check still catches every second transition that
gets past it. A deliberate read of a left phase (the runner logs the phase it came
from) is accepted with ``# statemachine: allow-reuse`` on its line.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import itertools
import sys
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import _phases

__all__ = ["PHASE_CLASSES", "TRANSITIONS", "Finding", "check_paths", "check_source", "main"]


def _is_phase_type(hint: object) -> bool:
    args = typing.get_args(hint)
    if args and typing.get_origin(hint) is not None and not isinstance(hint, type):
        origin = typing.get_origin(hint)
        if isinstance(origin, type) and issubclass(origin, _phases.Phase):
            return True
        return any(_is_phase_type(arg) for arg in args)
    return isinstance(hint, type) and issubclass(hint, _phases.Phase)


_PHASES: tuple[type[_phases.Phase[typing.Any]], ...] = (
    _phases.Phase,
    _phases.Active,
    _phases.Idle,
    _phases.Planning,
    _phases.AwaitApproval,
    _phases.ToolCalling,
    _phases.Observing,
    _phases.Retrying,
    _phases.Responding,
    _phases.Failed,
    _phases.Done,
)

#: The names of the phase classes (and their bases) the checker recognises.
PHASE_CLASSES: frozenset[str] = frozenset(cls.__name__ for cls in _PHASES)


def _transitions() -> frozenset[str]:
    names: set[str] = set()
    for cls in _PHASES:
        for name, member in vars(cls).items():
            if name.startswith("_") or not callable(member):
                continue
            hints = typing.get_type_hints(member)
            if _is_phase_type(hints.get("return")):
                names.add(name)
    return frozenset(names)


#: A comment that accepts the findings on its line (a deliberate read of a left phase).
_ALLOW = "# statemachine: allow-reuse"

#: The transition methods: public methods of the phases that return a phase.
TRANSITIONS: frozenset[str] = _transitions()

#: At most this many rounds to learn what the file's functions do (usually two).
_ROUNDS = 8

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_Scope = _Function | ast.Lambda
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


def _names_in_annotation(node: ast.expr | None) -> Iterator[str]:
    if node is None:
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            yield child.id
        elif isinstance(child, ast.Attribute):
            yield child.attr


def _annotated_phase(annotation: ast.expr | None, classes: frozenset[str]) -> bool:
    return any(name in classes for name in _names_in_annotation(annotation))


def _class_name(node: ast.expr) -> str | None:
    """``Planning`` for ``Planning``, ``Planning[C]``, ``sm.Planning`` or ``sm.Planning[C]``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _key(node: ast.expr | None) -> str | None:
    """The tracked name ``node`` stands for: ``x`` for a variable, ``self.a`` for an attribute."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"self.{node.attr}" if node.value.id == "self" else None
    return None


def _parameters(node: _Scope) -> tuple[list[str], int]:
    """The parameter names (positional first, then keyword-only) and how many are positional."""
    arguments = node.args
    positional = [argument.arg for argument in [*arguments.posonlyargs, *arguments.args]]
    return [*positional, *(argument.arg for argument in arguments.kwonlyargs)], len(positional)


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


class _FunctionChecker:
    """Reads one function body (or a module's top level) in order."""

    def __init__(self, module: _Module, owner: ast.ClassDef | None, *, real: bool = False) -> None:
        self._module = module
        self._classes = module.classes
        self._real = real  # the run that reports (the others learn what functions do)
        self._findings: _Findings = module.findings if real else {}
        self._owner = owner
        self._loop_exits: list[tuple[list[_State], list[_State]]] = []
        # For each enclosing try body: the state after each of its statements.
        self._try_points: list[list[_State]] = []
        # The loops (and comprehensions) around the code being read: (loop, pass).
        self._passes: list[tuple[int, int]] = []
        # When summarising a function: the objects it was passed or captured (by name),
        # and which of them it read and left (with the transition and the call).
        self.markers: dict[int, str] = {}
        self.reads: set[str] = set()
        self.leaves: dict[str, tuple[str, str]] = {}
        # The ``self.a`` names this body assigns a phase.
        self.attrs: set[str] = set()

    # -- what holds a phase --------------------------------------------------------

    def _is_phase_class(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Tuple):
            return any(self._is_phase_class(item) for item in node.elts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._is_phase_class(node.left) or self._is_phase_class(node.right)
        return _class_name(node) in self._classes

    def _objects(self, node: ast.expr, state: _State) -> _Objects:
        """The phase objects ``node`` (already read) may yield; ``None`` if not a phase."""
        if isinstance(node, ast.Await):
            return self._objects(node.value, state)
        if isinstance(node, ast.NamedExpr):
            return state.holds.get(node.target.id)
        key = _key(node)
        if key is not None:
            return state.holds.get(key)
        if isinstance(node, ast.IfExp):
            body, orelse = self._objects(node.body, state), self._objects(node.orelse, state)
            if body is None and orelse is None:
                return None
            return (body or frozenset()) | (orelse or frozenset())
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in TRANSITIONS and self._objects(func.value, state) is not None:
                return self._module.fresh()
            if func.attr == "start" and len(node.args) + len(node.keywords) == 2:
                return self._module.fresh()
        return self._module.fresh() if self._is_phase_class(func) else None

    def _mark_phase(self, node: ast.expr, state: _State) -> None:
        """``node`` is checked to be a phase (``isinstance`` or a class pattern)."""
        key = _key(node)
        if key is not None and key not in state.holds:
            state.holds[key] = self._module.fresh()

    # -- findings ------------------------------------------------------------------

    def _use(self, key: str, node: ast.expr, state: _State, by: str = "") -> None:
        for obj in state.holds.get(key, ()):
            if obj in self.markers:
                self.reads.add(self.markers[obj])
        where = state.left.get(key)
        if where is None:
            return
        at = (node.lineno, node.col_offset + 1)
        again = any((loop, 0) in where.passes for loop, now in self._passes if now)
        if at not in self._findings:
            self._findings[at] = Finding(self._module.path, *at, _message(key, where, by, again))

    def _leave(self, state: _State, key: str, where: _Left) -> None:
        """A transition through ``key``: every name that may hold its phase is left."""
        objects = state.holds[key]
        where = dataclasses.replace(where, passes=tuple(self._passes))
        for name, held in state.holds.items():
            if held & objects:
                state.left[name] = where if name == key else dataclasses.replace(where, alias=key)
        for obj in objects:
            if obj in self.markers:
                self.leaves.setdefault(self.markers[obj], (where.method, where.via))

    def _bind(
        self, target: ast.expr, state: _State, objects: _Objects, closure: _Summary | None = None
    ) -> None:
        key = _key(target)
        if isinstance(target, ast.Attribute):
            self._expr(target.value, state)  # an attribute target reads its base
        if key is not None:
            state.left.pop(key, None)
            if objects:
                state.holds[key] = objects
                if key.startswith("self."):
                    self.attrs.add(key)
            else:
                state.holds.pop(key, None)
            if closure is not None or key in state.calls or key in self._module.helpers:
                state.calls[key] = closure
        elif isinstance(target, ast.Tuple | ast.List):
            for item in target.elts:
                self._bind(item, state, None)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, state, None)
        elif not isinstance(target, ast.Attribute):
            self._expr(target, state)  # a subscript target reads its base

    def _forget(self, key: str, state: _State) -> None:
        state.left.pop(key, None)
        state.holds.pop(key, None)
        if key in state.calls or key in self._module.helpers:
            state.calls[key] = None

    # -- expressions, in evaluation order ------------------------------------------

    def _expr(self, node: ast.AST | None, state: _State) -> None:
        if node is None:
            return
        match node:
            case ast.Name(ctx=ast.Load()):
                self._use(node.id, node, state)
            case ast.Attribute(value=ast.Name(id="self"), ctx=ast.Load()):
                self._expr(node.value, state)
                self._use(f"self.{node.attr}", node, state)
            case ast.Call():
                self._call(node, state)
            case ast.IfExp():
                self._expr(node.test, state)
                body, orelse = state.copy(), state.copy()
                self._expr(node.body, body)
                self._expr(node.orelse, orelse)
                self._replace(state, [body, orelse])
            case ast.NamedExpr():
                self._expr(node.value, state)
                self._bind(node.target, state, self._objects(node.value, state))
            case ast.Lambda():
                pass  # a nested scope: followed where it is called by name
            case ast.ListComp() | ast.SetComp() | ast.GeneratorExp() | ast.DictComp():
                self._comprehension(node, state)
            case _:
                for child in ast.iter_child_nodes(node):
                    self._expr(child, state)

    def _call(self, node: ast.Call, state: _State) -> None:
        func = node.func
        self._expr(func, state)
        for arg in [*node.args, *node.keywords]:
            self._expr(arg, state)
        receiver = _key(func.value) if isinstance(func, ast.Attribute) else None
        if isinstance(func, ast.Attribute) and func.attr in TRANSITIONS and receiver in state.holds:
            assert receiver is not None
            self._leave(state, receiver, _Left(func.attr, node.lineno, f"{receiver}.{func.attr}()"))
        else:
            summary = self._callee(func, state)
            if summary is not None:
                self._apply(summary, node, state)
        if (
            isinstance(func, ast.Name)
            and func.id == "isinstance"
            and len(node.args) == 2
            and self._is_phase_class(node.args[1])
        ):
            self._mark_phase(node.args[0], state)

    def _callee(self, func: ast.expr, state: _State) -> _Summary | None:
        """The summary of the file's function that ``func`` names, if it names one."""
        if isinstance(func, ast.Name):
            if func.id in state.calls:
                return state.calls[func.id]
            return self._module.helpers.get(func.id)
        key = _key(func)
        if key is not None and key.startswith("self.") and self._owner is not None:
            return self._module.methods.get((self._owner, key.removeprefix("self.")))
        return None

    def _apply(self, summary: _Summary, node: ast.Call, state: _State) -> None:
        """What a call of one of the file's functions does, at the call."""
        shown = f"{summary.name}()"
        for key in sorted(summary.reads):
            self._use(key, node.func, state, by=shown)
        passed: dict[str, str | None] = {}
        for name, arg in zip(summary.params[: summary.positional], node.args, strict=False):
            if isinstance(arg, ast.Starred):
                break
            passed[name] = _key(arg)
        for keyword in node.keywords:
            if keyword.arg in summary.params:
                passed[keyword.arg] = _key(keyword.value)
        for name, method, how in summary.leaves:
            parameter = name in summary.params
            target = passed.get(name) if parameter else name
            if target is not None and target in state.holds:
                what = f"its parameter '{name}'" if parameter else f"'{name}'"
                done = f"{shown} transitions {what} by {how}"
                self._leave(state, target, _Left(method, node.lineno, shown, done))
        for key in summary.rebinds:
            if key in state.holds:
                state.left.pop(key, None)
                state.holds[key] = self._module.fresh()

    def _comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, state: _State
    ) -> None:
        inner = state.copy()
        bound: set[str] = set()
        for generator in node.generators:
            self._expr(generator.iter, inner)
            for target in ast.walk(generator.target):
                if isinstance(target, ast.Name):
                    bound.add(target.id)
                    inner.left.pop(target.id, None)
                    inner.holds.pop(target.id, None)
            for condition in generator.ifs:
                self._expr(condition, inner)
        elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        # Read the element twice: its second pass is the comprehension's second item.
        loop = next(self._module.objects)
        for again in (0, 1):
            self._passes.append((loop, again))
            for element in elements:
                self._expr(element, inner)
            self._passes.pop()
        for name, where in inner.left.items():
            if name not in bound and name not in state.left:
                state.left[name] = where

    @staticmethod
    def _replace(state: _State, branches: Sequence[_State]) -> None:
        merged = _State.union(branches)
        if merged is not None:
            state.holds, state.left, state.calls = merged.holds, merged.left, merged.calls

    # -- nested functions ----------------------------------------------------------

    def _closure(self, node: _Scope, name: str, state: _State) -> _Summary:
        """The summary of a nested function, seeing the phases it can capture here."""
        params, _ = _parameters(node)
        captured = [key for key in state.holds if key.split(".")[0] not in params]
        if self._real and not isinstance(node, ast.Lambda):
            self._module.captured.setdefault(node, set()).update(captured)
        return _summarize(self._module, node, name, captured, self._owner)

    # -- statements ----------------------------------------------------------------

    def block(self, body: Sequence[ast.stmt], state: _State) -> None:
        """Read ``body`` into ``state``; raises :class:`_Exit` if it never falls through."""
        for statement in body:
            try:
                self._stmt(statement, state)
            finally:
                if self._try_points:
                    self._try_points[-1].append(state.copy())

    def _branch(self, body: Sequence[ast.stmt], state: _State) -> _State | None:
        """``state`` after ``body``, or ``None`` if ``body`` never falls through."""
        branch = state.copy()
        try:
            self.block(body, branch)
        except _Exit:
            return None
        return branch

    def _join(self, state: _State, outcomes: Sequence[_State | None]) -> None:
        live = [outcome for outcome in outcomes if outcome is not None]
        if not live:
            raise _Exit
        self._replace(state, live)

    def _stmt(self, node: ast.stmt, state: _State) -> None:
        match node:
            case ast.Return():
                self._expr(node.value, state)
                raise _Exit
            case ast.Raise():
                self._expr(node.exc, state)
                self._expr(node.cause, state)
                raise _Exit
            case ast.Break():
                if self._loop_exits:
                    self._loop_exits[-1][0].append(state.copy())
                raise _Exit
            case ast.Continue():
                if self._loop_exits:
                    self._loop_exits[-1][1].append(state.copy())
                raise _Exit
            case ast.If():
                self._expr(node.test, state)
                self._join(
                    state, [self._branch(node.body, state), self._branch(node.orelse, state)]
                )
            case ast.While() | ast.For() | ast.AsyncFor():
                self._loop(node, state)
            case ast.With() | ast.AsyncWith():
                for item in node.items:
                    self._expr(item.context_expr, state)
                    if item.optional_vars is not None:
                        self._bind(item.optional_vars, state, None)
                self.block(node.body, state)
            case ast.Match():
                self._match(node, state)
            case ast.Try() | ast.TryStar():
                self._try(node, state)
            case _:
                self._simple(node, state)

    def _simple(self, node: ast.stmt, state: _State) -> None:
        """A statement that falls through: a definition, an assignment, an expression, ..."""
        match node:
            case ast.FunctionDef() | ast.AsyncFunctionDef() | ast.ClassDef():
                for decorator in node.decorator_list:
                    self._expr(decorator, state)
                self._forget(node.name, state)
                if not isinstance(node, ast.ClassDef):
                    state.calls[node.name] = self._closure(node, node.name, state)
            case ast.Assign():
                self._expr(node.value, state)
                objects = self._objects(node.value, state)
                closure = None
                if isinstance(node.value, ast.Lambda) and isinstance(node.targets[0], ast.Name):
                    closure = self._closure(node.value, node.targets[0].id, state)
                for target in node.targets:
                    self._bind(target, state, objects, closure)
            case ast.AnnAssign():
                self._expr(node.value, state)
                objects = None if node.value is None else self._objects(node.value, state)
                if objects is None and _annotated_phase(node.annotation, self._classes):
                    objects = self._module.fresh()
                if node.value is not None or (_key(node.target) is not None and objects):
                    self._bind(node.target, state, objects)
            case ast.AugAssign():
                self._expr(node.value, state)
                key = _key(node.target)
                if key is not None:
                    self._use(key, node.target, state)
                self._bind(node.target, state, None)
            case ast.Delete():
                for target in node.targets:
                    key = _key(target)
                    if key is None:
                        self._expr(target, state)
                    else:
                        self._forget(key, state)
            case ast.Import() | ast.ImportFrom():
                for alias in node.names:
                    self._forget((alias.asname or alias.name).split(".")[0], state)
            case ast.Global() | ast.Nonlocal() | ast.Pass():
                pass
            case _:
                for child in ast.iter_child_nodes(node):
                    self._expr(child, state)

    def _loop(self, node: ast.While | ast.For | ast.AsyncFor, state: _State) -> None:
        test, target = (node.test, None) if isinstance(node, ast.While) else (None, node.target)
        if not isinstance(node, ast.While):
            self._expr(node.iter, state)
        head = state.copy()
        breaks: list[_State] = []
        loop = next(self._module.objects)
        for again in (0, 1):  # the second pass starts with what the first left
            self._passes.append((loop, again))
            if test is not None:
                self._expr(test, head)
            entry = head.copy()
            if target is not None:
                self._bind(target, entry, None)
            continues: list[_State] = []
            self._loop_exits.append((breaks, continues))
            try:
                end = self._branch(node.body, entry)
            finally:
                self._loop_exits.pop()
                self._passes.pop()
            merged = _State.union([head, *([end] if end is not None else []), *continues])
            assert merged is not None
            head = merged
        after = self._branch(node.orelse, head)
        self._join(state, [after, *breaks])

    def _match(self, node: ast.Match, state: _State) -> None:
        self._expr(node.subject, state)
        outcomes: list[_State | None] = []
        exhaustive = False
        for case in node.cases:
            branch = state.copy()
            for pattern in ast.walk(case.pattern):
                if isinstance(pattern, ast.MatchClass) and self._is_phase_class(pattern.cls):
                    self._mark_phase(node.subject, branch)
                if isinstance(pattern, ast.MatchAs | ast.MatchStar) and pattern.name:
                    branch.left.pop(pattern.name, None)
                    if pattern.name in branch.holds:
                        branch.holds[pattern.name] = self._module.fresh()
            self._expr(case.guard, branch)
            outcomes.append(self._branch(case.body, branch))
            if isinstance(case.pattern, ast.MatchAs) and case.pattern.pattern is None:
                exhaustive = case.guard is None
        if not exhaustive:
            outcomes.append(state.copy())
        self._join(state, outcomes)

    def _try(self, node: ast.Try | ast.TryStar, state: _State) -> None:
        start = state.copy()
        points: list[_State] = []
        self._try_points.append(points)
        try:
            body = self._branch(node.body, start)
        finally:
            self._try_points.pop()
        # An exception may come from anywhere in the body (a transition leaves its
        # phase before it can raise): a handler starts from the union of what was
        # known before the body and after each of its statements.
        raised = _State.union([start, *points])
        assert raised is not None
        outcomes: list[_State | None] = []
        for handler in node.handlers:
            branch = raised.copy()
            self._expr(handler.type, branch)
            if handler.name:
                branch.left.pop(handler.name, None)
                branch.holds.pop(handler.name, None)
            outcomes.append(self._branch(handler.body, branch))
        outcomes.append(None if body is None else self._branch(node.orelse, body))
        live = [outcome for outcome in outcomes if outcome is not None]
        if node.finalbody:
            final = _State.union(live) or raised.copy()
            self.block(node.finalbody, final)
            if not live:
                raise _Exit
            self._replace(state, [final])
            return
        self._join(state, outcomes)


def _rebinds(node: _Scope, keys: Sequence[str]) -> frozenset[str]:
    """The captured names among ``keys`` that ``node`` assigns: ``self.a``, or ``nonlocal``."""
    nodes = list(ast.walk(node)) if keys else []
    declared = {name for n in nodes if isinstance(n, ast.Nonlocal | ast.Global) for name in n.names}
    stored = {
        _key(n)
        for n in nodes
        if isinstance(n, ast.Name | ast.Attribute) and isinstance(n.ctx, ast.Store | ast.Del)
    }
    return frozenset(k for k in keys if k in stored and (k.startswith("self.") or k in declared))


def _summarize(
    module: _Module, node: _Scope, name: str, captured: Sequence[str], owner: ast.ClassDef | None
) -> _Summary:
    """What a call of ``node`` does to what it is passed and to the ``captured`` names.

    Every parameter is read as holding a phase (the call decides whether it does); a
    method's ``self`` is one of the captured names.
    """
    params, positional = _parameters(node)
    if owner is not None and node in owner.body:
        params, positional = params[1:], positional - 1
    checker = _FunctionChecker(module, owner)
    state = _State()
    for key in [*params, *captured]:
        (obj,) = state.holds[key] = module.fresh()
        checker.markers[obj] = key
    state.calls = dict.fromkeys(set(params) & module.helpers.keys())
    with contextlib.suppress(_Exit):
        if isinstance(node, ast.Lambda):
            checker._expr(node.body, state)
        else:
            checker.block(node.body, state)
    leaves = tuple(sorted((key, *checker.leaves[key]) for key in checker.leaves))
    reads = frozenset(checker.reads & set(captured))
    return _Summary(name, tuple(params), positional, leaves, reads, _rebinds(node, captured))


def _phase_classes(tree: ast.Module) -> frozenset[str]:
    """The phase classes, with the classes in this file that subclass one (transitively)."""
    known = set(PHASE_CLASSES)
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    grew = True
    while grew:
        grew = False
        for node in classes:
            if node.name not in known and any(_class_name(base) in known for base in node.bases):
                known.add(node.name)
                grew = True
    return frozenset(known)


# A function of the file, the class whose methods ``self.m()`` calls in it, and whether
# it is one of those methods (a function in the class body whose first parameter is self).
_Located = tuple[_Function, ast.ClassDef | None, bool]


def _functions(tree: ast.Module) -> Iterator[_Located]:
    """Every function in the file, outer ones first."""

    def visit(node: ast.AST, owner: ast.ClassDef | None, in_class: bool) -> Iterator[_Located]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                params, _ = _parameters(child)
                yield child, owner, in_class and params[:1] == ["self"]
                yield from visit(child, owner, False)
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, child, True)
            else:
                yield from visit(child, owner, False)

    yield from visit(tree, None, False)


def _self_names(module: _Module, owner: ast.ClassDef) -> list[str]:
    """What a method of ``owner`` reaches through ``self`` that holds a phase."""
    return [*(["self"] if owner.name in module.classes else []), *sorted(module.attrs[owner])]


def _entry(
    module: _Module, function: _Function, owner: ast.ClassDef | None, method: bool
) -> _State:
    """What is known when ``function`` starts."""
    state = _State()
    params, _ = _parameters(function)
    arguments = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
    for argument in arguments:
        if _annotated_phase(argument.annotation, module.classes):
            state.holds[argument.arg] = module.fresh()
    state.calls = dict.fromkeys(set(params) & module.helpers.keys())
    seen = set(module.captured.get(function, ()))
    if method and owner is not None:
        seen |= set(_self_names(module, owner))
        params = params[1:]
    for key in sorted(seen - state.holds.keys()):
        if key.split(".")[0] not in params:
            state.holds[key] = module.fresh()
    return state


def _learn(module: _Module, functions: Sequence[_Located], tree: ast.Module) -> None:
    """Summarise the file's functions and find its classes' phase attributes (a fixed point).

    Only the functions the file calls by name (``f(...)``, ``self.m(...)``) are summarised;
    only the methods that assign an attribute of ``self`` are read for phase attributes.
    """
    nodes = list(ast.walk(tree))
    called = {_key(node.func) for node in nodes if isinstance(node, ast.Call)}
    methods = [(f, owner) for f, owner, method in functions if method and owner is not None]
    for owner in {owner for _, owner in methods}:  # the attributes annotated with a phase
        module.attrs[owner] = {
            key if key.startswith("self.") else f"self.{key}"
            for node in ast.walk(owner)
            if isinstance(node, ast.AnnAssign) and _annotated_phase(node.annotation, module.classes)
            for key in [_key(node.target)]
            if key is not None and (key.startswith("self.") or node in owner.body)
        }
    assigning = [
        (function, owner)
        for function, owner in methods
        if any(
            isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and _key(n)
            for n in ast.walk(function)
        )
    ]
    for _ in range(_ROUNDS):
        known = (module.helpers, module.methods, {c: set(a) for c, a in module.attrs.items()})
        module.helpers = {
            node.name: _summarize(module, node, node.name, (), None)
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in called
        }
        module.methods = {}
        for function, owner in methods:
            if f"self.{function.name}" in called:
                summary = _summarize(
                    module, function, f"self.{function.name}", _self_names(module, owner), owner
                )
                module.methods[owner, function.name] = summary
        for function, owner in assigning:
            checker = _FunctionChecker(module, owner)
            with contextlib.suppress(_Exit):
                checker.block(function.body, _entry(module, function, owner, True))
            module.attrs[owner] |= checker.attrs
        if known == (module.helpers, module.methods, module.attrs):
            return


def check_source(source: str, path: str = "<string>") -> list[Finding]:
    """The findings in one file's source, sorted by position.

    Raises :class:`SyntaxError` if ``source`` does not parse.
    """
    tree = ast.parse(source, filename=path)
    if "start" not in source and not any(name in source for name in PHASE_CLASSES):
        return []  # nothing here can hold a phase
    module = _Module(path, _phase_classes(tree))
    functions = list(_functions(tree))
    _learn(module, functions, tree)
    with contextlib.suppress(_Exit):
        _FunctionChecker(module, None, real=True).block(tree.body, _State())
    for function, owner, method in functions:
        state = _entry(module, function, owner, method)
        with contextlib.suppress(_Exit):
            _FunctionChecker(module, owner, real=True).block(function.body, state)
    lines = source.splitlines()
    findings = module.findings.values()
    return sorted(finding for finding in findings if _ALLOW not in lines[finding.line - 1])


def _python_files(paths: Iterable[str]) -> Iterator[Path]:
    for name in paths:
        path = Path(name)
        if path.is_dir():
            for found in sorted(path.rglob("*.py")):
                parts = found.relative_to(path).parts
                if not any(part.startswith(".") or part == "__pycache__" for part in parts):
                    yield found
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"statemachine.lint: {name}: no such file or directory")


def check_paths(paths: Iterable[str]) -> list[Finding]:
    """The findings in every ``.py`` file under ``paths`` (files or directories).

    Raises :class:`FileNotFoundError` for a path that does not exist and
    :class:`SyntaxError` for a file that does not parse.
    """
    findings: list[Finding] = []
    for path in _python_files(paths):
        findings.extend(check_source(path.read_text(encoding="utf-8"), str(path)))
    return findings


def main(argv: Sequence[str] | None = None) -> int:
    """Check ``argv``'s paths; print the findings; 1 if any, 0 if none, 2 on bad input."""
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print("usage: python -m statemachine.lint PATH [PATH ...]", file=sys.stderr)
        return 2
    try:
        findings = check_paths(paths)
    except FileNotFoundError as error:
        print(f"{error}; pass existing files or directories", file=sys.stderr)
        return 2
    except SyntaxError as error:
        print(
            f"statemachine.lint: {error.filename}:{error.lineno}:{error.offset}: "
            f"cannot parse: {error.msg}; fix the syntax error first",
            file=sys.stderr,
        )
        return 2
    for finding in findings:
        print(finding)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
