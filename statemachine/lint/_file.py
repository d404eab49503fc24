"""One whole file: its phase classes, what its functions do (a fixed point), its findings."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator, Sequence

from ._checker import _FunctionChecker, _summarize
from ._facts import Finding, _Exit, _Module, _State
from ._syntax import _annotated_phase, _class_name, _Function, _key, _parameters
from ._vocabulary import PHASE_CLASSES

__all__ = ["check_source"]

#: A comment that accepts the findings on its line (a deliberate read of a left phase).
_ALLOW = "# statemachine: allow-reuse"

#: At most this many rounds to learn what the file's functions do (usually two).
_ROUNDS = 8


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
