"""The tests' reference for ``PhaseDumper.dump``'s whole function per pair of phase
classes (``_delta._whole_source``): the same logic written plainly, calling the pair's
function (``_PAIRS``' third entry) and ``_fields_change`` as ``PhaseDumper._change`` does."""

from __future__ import annotations

from typing import Any

from statemachine._phases import Agent, Phase
from statemachine.persist._codec import DOCUMENT_VERSION
from statemachine.persist._delta import FiniteOps, _fields_change, _Known, _moved


def library_change(
    known: _Known,
    old: Phase[Any],
    before: dict[str, Any],
    phase: Phase[Any],
    calls: list[tuple[Any, ...] | None],
) -> tuple[dict[str, Any], list[list[Any]]] | None:
    """``PhaseDumper._change`` for a phase after another of the library's own classes
    (``known``: the two classes, by identity, their pair's function and the new class's
    path as it was read), when ``PhaseDumper.dump`` would take it: the document's
    version is the int 3 and it has ``phases``, the agent's phases are the very ones of
    the phase before. The header's entries are compared as ``_change``'s loop compares
    them, one by one; the class's path is the one read before while its module and
    qualified name are the very same objects. ``None`` (nothing done) for anything else.

    The plain form of what ``_delta._whole_source`` generates for each pair (there the
    pair's function is written in, with no frame of its own): the tests' reference."""
    version = before.get("version")
    if type(version) is not int or version != DOCUMENT_VERSION or "phases" not in before:
        return None
    agent: Any = phase.agent  # an Agent, as typed: exactly one is looked for
    if type(agent) is not Agent or agent.phases is not old.agent.phases:
        return None
    cls, (module, qualname, path) = known[1], known[3]
    if cls.__module__ is not module or cls.__qualname__ is not qualname:
        return None
    kind, name = phase.kind, agent.name
    ops: list[list[Any]] = FiniteOps() if type(kind) is str and type(name) is str else []
    moved = False
    previous = before.get("kind")
    if previous is not kind:
        if previous == kind:
            kind = previous
        else:
            moved = True
    previous = before.get("class")
    if previous is not path:
        if previous == path:
            path = previous
        else:
            moved = True
    previous = before.get("agent")
    if previous is not name:
        if previous == name:
            name = previous
        else:
            ops.append(["set", ["agent"], name])
    fields_before: dict[str, Any] = before["fields"]
    made = known[2](old, fields_before, phase, ops, calls)
    if made is None:
        made = _fields_change(cls, old, fields_before, phase, ops, calls)
    fields, merged = made
    table = before["phases"]
    document = {
        "version": version,
        "kind": kind,
        "class": path,
        "agent": name,
        "phases": table,
        "fields": fields,
    }
    if moved:
        entry = table.get(kind)
        if not (entry is not None and entry[0] == path and entry[1] == list(fields)):
            return _moved(document, ops, fields_before, fields, merged, moved)
    elif list(fields) != list(fields_before):
        return _moved(document, ops, fields_before, fields, merged, moved)
    if len(merged) == 1:  # _merge's ops, in place
        ((key, value),) = merged.items()
        ops.append(["set", ["fields", key], value])
    elif merged:
        ops.append(["merge", ["fields"], merged])
    if moved:
        ops.append(["phase", kind])
    return document, ops
