"""Reading one function body (or a module's top level) in order, and summarising a function."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
from collections.abc import Sequence

from ._facts import Finding, _Exit, _Findings, _Left, _message, _Module, _Objects, _State, _Summary
from ._syntax import _annotated_phase, _class_name, _key, _parameters, _Scope
from ._vocabulary import TRANSITIONS

__all__ = ["_FunctionChecker", "_summarize"]


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
