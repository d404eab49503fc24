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
  ``retry``, ``advance``, ...) and ``x`` is a plain variable that holds a phase.
- A variable *holds a phase* when it is annotated with a phase class (a parameter or
  ``x: T = ...``; ``T`` is one of the nine phases, ``Phase``, ``Active``, a subscript
  or union of them, or a class in the same file that subclasses one); when it is
  assigned the result of a transition, of a phase class's constructor or of
  ``agent.start(ctx, text)`` (a ``.start`` call with two arguments); when it is
  checked with ``isinstance(x, <phase class>)`` or matched against a phase class
  pattern; and ``self`` in a method of a class in the same file that subclasses a
  phase.
- After a transition on ``x`` the variable is *left*; reading it again is a finding,
  until ``x`` is bound anew (``state = await state.advance(rt)`` rebinds it, which
  is the normal pattern). The arguments of the transition itself are read before the
  phase is left, so ``planning.call_tool(planning.agent.tools.call(...))`` is fine.
- Branches: a variable left in one branch of an ``if``/``match``/``try`` that falls
  through is left after it; a branch that ends in ``return``, ``raise``, ``break``
  or ``continue`` does not fall through. Loops are read twice, the second time with
  what the first left, so a transition in a loop body on a variable the loop does
  not rebind is found on its second pass (``for c in calls: planning.call_tool(c)``).
  A transition inside a comprehension on a variable the comprehension does not bind
  runs once per item, and is a finding too.

Limits (what the checker does not see): it has no types, so a phase reached only
through an attribute (``self.state``), a container, a function's return value or
another module's subclass is not tracked unless annotated; a variable captured by
a nested function or lambda is not followed into it; aliasing (``b = a``) copies
nothing; and it follows no calls (a helper that transitions its argument leaves the
caller's variable unmarked). The runtime's single-use check still catches every
second transition that gets past it. A deliberate read of a left phase (the runner
logs the phase it came from) is accepted with ``# statemachine: allow-reuse`` on
its line.
"""

from __future__ import annotations

import ast
import contextlib
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
    """Where a variable's phase was left: the transition and its line."""

    method: str
    line: int


# What is known at one point of a function: the variables that hold a phase, and the
# ones a transition has left (with where).
@dataclass
class _State:
    phases: set[str] = field(default_factory=set[str])
    left: dict[str, _Left] = field(default_factory=dict[str, _Left])

    def copy(self) -> _State:
        return _State(set(self.phases), dict(self.left))

    def merge(self, other: _State) -> None:
        self.phases |= other.phases
        for name, where in other.left.items():
            self.left.setdefault(name, where)

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


def _class_name(node: ast.expr) -> str | None:
    """``Planning`` for ``Planning``, ``Planning[C]``, ``sm.Planning`` or ``sm.Planning[C]``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _FunctionChecker:
    """Reads one function body (or a module's top level) in order."""

    def __init__(
        self, path: str, phase_classes: frozenset[str], findings: dict[tuple[int, int], Finding]
    ) -> None:
        self._path = path
        self._classes = phase_classes
        self._findings = findings
        self._loop_exits: list[tuple[list[_State], list[_State]]] = []
        # For each enclosing try body: the state after each of its statements.
        self._try_points: list[list[_State]] = []

    # -- what holds a phase --------------------------------------------------------

    def annotated_phase(self, annotation: ast.expr | None) -> bool:
        return any(name in self._classes for name in _names_in_annotation(annotation))

    def _is_phase_class(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Tuple):
            return any(self._is_phase_class(item) for item in node.elts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._is_phase_class(node.left) or self._is_phase_class(node.right)
        return _class_name(node) in self._classes

    def _makes_phase(self, node: ast.expr, state: _State) -> bool:
        """Whether evaluating ``node`` yields a phase (as far as the checker can tell)."""
        if isinstance(node, ast.Await):
            return self._makes_phase(node.value, state)
        if isinstance(node, ast.NamedExpr):
            return self._makes_phase(node.value, state)
        if isinstance(node, ast.Name):
            return node.id in state.phases
        if isinstance(node, ast.IfExp):
            return self._makes_phase(node.body, state) or self._makes_phase(node.orelse, state)
        if not isinstance(node, ast.Call):
            return False
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in TRANSITIONS and self._makes_phase(func.value, state):
                return True
            if func.attr == "start" and len(node.args) + len(node.keywords) == 2:
                return True
        return self._is_phase_class(func)

    # -- findings ------------------------------------------------------------------

    def _use(self, node: ast.Name, state: _State) -> None:
        where = state.left.get(node.id)
        if where is None:
            return
        at = (node.lineno, node.col_offset + 1)
        if at in self._findings:
            return
        again = " (in an earlier pass of the loop)" if where.line >= node.lineno else ""
        self._findings[at] = Finding(
            self._path,
            node.lineno,
            node.col_offset + 1,
            f"'{node.id}' is used after {node.id}.{where.method}() on line {where.line}"
            f"{again} left its phase; a phase is single-use: use the phase that "
            f"{where.method}() returned",
        )

    def _bind(self, target: ast.expr, state: _State, *, phase: bool) -> None:
        if isinstance(target, ast.Name):
            state.left.pop(target.id, None)
            if phase:
                state.phases.add(target.id)
            else:
                state.phases.discard(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for item in target.elts:
                self._bind(item, state, phase=False)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, state, phase=False)
        else:
            # An attribute or subscript target reads its base.
            self._expr(target, state)

    # -- expressions, in evaluation order ------------------------------------------

    def _expr(self, node: ast.AST | None, state: _State) -> None:
        if node is None:
            return
        match node:
            case ast.Name(ctx=ast.Load()):
                self._use(node, state)
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
                self._bind(node.target, state, phase=self._makes_phase(node.value, state))
            case ast.Lambda():
                pass  # a nested scope, not followed
            case ast.ListComp() | ast.SetComp() | ast.GeneratorExp() | ast.DictComp():
                self._comprehension(node, state)
            case _:
                for child in ast.iter_child_nodes(node):
                    self._expr(child, state)

    def _call(self, node: ast.Call, state: _State) -> None:
        func = node.func
        receiver = func.value if isinstance(func, ast.Attribute) else None
        self._expr(func, state)
        for arg in [*node.args, *node.keywords]:
            self._expr(arg, state)
        if (
            isinstance(func, ast.Attribute)
            and func.attr in TRANSITIONS
            and isinstance(receiver, ast.Name)
            and receiver.id in state.phases
        ):
            state.left[receiver.id] = _Left(func.attr, node.lineno)
        if (
            isinstance(func, ast.Name)
            and func.id == "isinstance"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Name)
            and self._is_phase_class(node.args[1])
        ):
            state.phases.add(node.args[0].id)

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
                    inner.phases.discard(target.id)
            for condition in generator.ifs:
                self._expr(condition, inner)
        elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        # Read the element twice: its second pass is the comprehension's second item.
        for _ in range(2):
            for element in elements:
                self._expr(element, inner)
        for name, where in inner.left.items():
            if name not in bound and name not in state.left:
                state.left[name] = where

    @staticmethod
    def _replace(state: _State, branches: Sequence[_State]) -> None:
        merged = _State.union(branches)
        if merged is not None:
            state.phases, state.left = merged.phases, merged.left

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
            case ast.FunctionDef() | ast.AsyncFunctionDef() | ast.ClassDef():
                for decorator in node.decorator_list:
                    self._expr(decorator, state)
                state.left.pop(node.name, None)
                state.phases.discard(node.name)
            case ast.Assign():
                self._expr(node.value, state)
                phase = self._makes_phase(node.value, state)
                for target in node.targets:
                    self._bind(target, state, phase=phase)
            case ast.AnnAssign():
                self._expr(node.value, state)
                phase = self.annotated_phase(node.annotation) or (
                    node.value is not None and self._makes_phase(node.value, state)
                )
                if node.value is not None or (isinstance(node.target, ast.Name) and phase):
                    self._bind(node.target, state, phase=phase)
            case ast.AugAssign():
                self._expr(node.value, state)
                if isinstance(node.target, ast.Name):
                    self._use(node.target, state)
                self._bind(node.target, state, phase=False)
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
            case ast.While():
                self._loop(node.test, None, node.body, node.orelse, state)
            case ast.For() | ast.AsyncFor():
                self._expr(node.iter, state)
                self._loop(None, node.target, node.body, node.orelse, state)
            case ast.With() | ast.AsyncWith():
                for item in node.items:
                    self._expr(item.context_expr, state)
                    if item.optional_vars is not None:
                        self._bind(item.optional_vars, state, phase=False)
                self.block(node.body, state)
            case ast.Match():
                self._match(node, state)
            case ast.Try() | ast.TryStar():
                self._try(node, state)
            case ast.Delete():
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        state.left.pop(target.id, None)
                        state.phases.discard(target.id)
                    else:
                        self._expr(target, state)
            case ast.Import() | ast.ImportFrom():
                for alias in node.names:
                    name = (alias.asname or alias.name).split(".")[0]
                    state.left.pop(name, None)
                    state.phases.discard(name)
            case ast.Global() | ast.Nonlocal() | ast.Pass():
                pass
            case _:
                for child in ast.iter_child_nodes(node):
                    self._expr(child, state)

    def _loop(
        self,
        test: ast.expr | None,
        target: ast.expr | None,
        body: Sequence[ast.stmt],
        orelse: Sequence[ast.stmt],
        state: _State,
    ) -> None:
        head = state.copy()
        breaks: list[_State] = []
        for _ in range(2):  # the second pass starts with what the first pass left
            if test is not None:
                self._expr(test, head)
            entry = head.copy()
            if target is not None:
                self._bind(target, entry, phase=False)
            continues: list[_State] = []
            self._loop_exits.append((breaks, continues))
            try:
                end = self._branch(body, entry)
            finally:
                self._loop_exits.pop()
            merged = _State.union([head, *([end] if end is not None else []), *continues])
            assert merged is not None
            head = merged
        after = self._branch(orelse, head)
        self._join(state, [after, *breaks])

    def _match(self, node: ast.Match, state: _State) -> None:
        self._expr(node.subject, state)
        subject = node.subject.id if isinstance(node.subject, ast.Name) else None
        outcomes: list[_State | None] = []
        exhaustive = False
        for case in node.cases:
            branch = state.copy()
            for pattern in ast.walk(case.pattern):
                if (
                    isinstance(pattern, ast.MatchClass)
                    and subject is not None
                    and self._is_phase_class(pattern.cls)
                ):
                    branch.phases.add(subject)
                if isinstance(pattern, ast.MatchAs | ast.MatchStar) and pattern.name:
                    branch.left.pop(pattern.name, None)
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


def _functions(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """Every function in the file, and whether it is a method of a phase subclass."""
    phase_classes = _phase_classes(tree)

    def visit(
        node: ast.AST, in_phase: bool
    ) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield child, in_phase
                yield from visit(child, False)
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, child.name in phase_classes)
            else:
                yield from visit(child, False)

    yield from visit(tree, False)


def check_source(source: str, path: str = "<string>") -> list[Finding]:
    """The findings in one file's source, sorted by position.

    Raises :class:`SyntaxError` if ``source`` does not parse.
    """
    tree = ast.parse(source, filename=path)
    classes = _phase_classes(tree)
    findings: dict[tuple[int, int], Finding] = {}
    checker = _FunctionChecker(path, classes, findings)
    with contextlib.suppress(_Exit):
        checker.block(tree.body, _State())
    for function, is_method in _functions(tree):
        state = _State()
        arguments = function.args
        positional = [*arguments.posonlyargs, *arguments.args]
        for index, argument in enumerate([*positional, *arguments.kwonlyargs]):
            is_self = is_method and index == 0 and argument.arg == "self"
            if is_self or checker.annotated_phase(argument.annotation):
                state.phases.add(argument.arg)
        with contextlib.suppress(_Exit):
            checker.block(function.body, state)
    lines = source.splitlines()
    return sorted(finding for finding in findings.values() if _ALLOW not in lines[finding.line - 1])


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
