"""What the runner checks between two transitions: phase subclasses are not trusted.

The runner calls ``advance`` on phases that users subclass, and a subclass's ``advance``
may return anything that type-checks. :class:`Watch` holds, for one ``drive``, what the
runner knows independently of the phases: the runtime it built, the agent's terms, and
the counters of the phase it accepted last. It goes on with a phase only when

- the library minted it from the phase advanced, by exactly one transition (and any
  copies), so no phase built by hand, copied, evolved or unpickled is ever run;
- its kind is one the advanced class's ``advance`` annotation names (the graph);
- its step is one more, and nothing it counts (spend, actions, tool iterations, the
  attempt of the same call) is less than the accepted phase's, read when it was accepted,
  so an in-place change of a phase (``object.__setattr__``) cannot lower them;
- a write reaches ``ToolCalling`` only from ``AwaitApproval`` (approve) or ``Retrying``
  of the same call, one attempt on; a retry never goes past the agent's retry cap for
  the tool (a ``Retrying`` subclass may override ``policy``, not the agent's cap);
- a model call's retry goes ``Planning -> ModelRetrying`` keeping the attempt, and
  back to ``Planning`` one attempt on (1 after a resume), within ``Agent.model_retry``;
- the runtime and the agent are the ones the run started with (no gate, ledger, approval
  book or budget swapped in from inside a phase);
- the model's pending calls are taken in order, each answered or run once, and only
  ``Planning`` queues new ones (``_queue_problem``): a queue holds the model's
  requests, never a typed call, so every write in it still goes through ``AwaitApproval``;
  and each id of the model's last reply is answered, held by the phase, or pending.

Anything else raises :class:`IllegalTransitionError` before the phase is saved or run.

A transition between two of the library's own classes (exactly those types) is judged
first the short way (``Watch._quick``'s checks, written out in a function generated for
each pair of classes and made per ``Watch`` at the pair's first transition, ``_pair_code``:
what those classes are written in as constants, the run's terms as the objects kept),
which only accepts what the whole check accepts; whatever it cannot show
acceptable, the whole check judges (``Watch._checked``), and it alone refuses
(tests/test_watch_quick.py, tests/test_fast_runner4.py).
"""

from __future__ import annotations

import functools
import operator
import sys
import textwrap
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any, final

import attrs

from ._actions import CHUNK, ActionLog
from ._approval import ApprovedCall
from ._budget import Budget
from ._errors import IllegalTransitionError, PhaseForgedError, SetupError
from ._model import _CHUNK, Message, ToolRequest, Transcript
from ._model_retry import _restored
from ._phases import (
    Active,
    Agent,
    AwaitApproval,
    Done,
    Failed,
    Idle,
    ModelRetrying,
    Observing,
    Phase,
    Planning,
    Responding,
    Retrying,
    Runtime,
    ToolCalling,
)
from ._seal import _own_ticket, _Ticket

__all__ = ["Watch", "check_start"]

# How far back the runner looks for the phase an advance started from: the copies one
# advance makes (the validation loop's retries) and its one transition.
_MAX_LINKS = 64
# How the library's tickets name a transition (``_seal``); an identifier-like literal, so
# the very same str object there (any other object takes the loop that compares).
_VIA_TRANSITION = "transition"

# The counters of a phase: step, the four spend totals, actions, tool iterations, and
# the call id and attempt of the call it holds ("" and -1 for none).
_Counters = tuple[int, int, Any, int, int, int, int, str, int]


def _counters(phase: Phase[Any]) -> _Counters:
    spent, loop = phase.spent, phase.loop
    call_id = getattr(phase, "call_id", "")
    attempt = getattr(phase, "attempt", -1)
    actions: Any = loop.actions
    return (
        phase.step,
        spent.tokens,
        spent.cost,
        spent.tool_calls,
        spent.model_calls,
        # ActionLog.__len__, by its code, without its frame (tests/test_watch_fast.py).
        len(actions._chunks) * CHUNK + len(actions._tail)
        if type(actions) is ActionLog
        else len(actions),
        loop.tool_iterations,
        call_id if isinstance(call_id, str) else "",
        attempt if isinstance(attempt, int) else -1,
    )


def _claimed(phase: object) -> str | None:
    """Why ``phase`` claims a class it is not, or ``None``: its ``__class__`` (what
    ``isinstance`` asks when the type itself does not answer) must be its type, so that
    every check judging it by ``isinstance`` judges what it is. A subclass that answers
    ``__class__`` itself (a property, a ``__getattribute__``) could otherwise pass as
    ``Failed`` and skip the checks a ``Failed`` is exempt from."""
    try:
        claimed: object = phase.__class__
    except Exception as exc:  # untrusted code: any error is a refusal
        return f"asking its __class__ raised {type(exc).__name__}"
    if claimed is type(phase):
        return None
    name = getattr(claimed, "__name__", None)
    return (
        f"its __class__ answers {name if isinstance(name, str) else 'another object'}, "
        f"not its own class {type(phase).__name__}: a phase may not claim another class"
    )


def _walked(before: Active[Any], after: Phase[Any], link: Any) -> None:
    """Judge ``after``'s ticket chain from ``link`` (its own ticket) back to ``before``'s:
    exactly one transition (copies aside) between them, or ``IllegalTransitionError``;
    then cut the chain behind ``after`` (nothing before the phase advanced is needed
    again: the chain stays one step long)."""
    origin = before._ticket
    transitions = 0
    for _ in range(_MAX_LINKS):
        if link is origin:
            break
        if link is None or link.via not in ("transition", "copy"):
            link = None
            break
        transitions += link.via == "transition"
        link = link.parent
    else:
        link = None
    if link is None:
        raise IllegalTransitionError(
            before.kind, after.kind, "no transition of the phase it advanced made it"
        )
    if transitions != 1:
        raise IllegalTransitionError(
            before.kind, after.kind, f"it is {transitions} transitions away, not one"
        )
    after._ticket.parent = None


def check_start(state: object, agent: Agent[Any]) -> None:
    """Refuse to drive a phase that no transition (or ``Agent.start``, or a restore) made."""
    if not isinstance(state, Phase):
        raise SetupError(f"drive takes a phase, got {type(state).__name__}")
    claimed = _claimed(state)  # isinstance may have asked a __class__ the phase answers
    if claimed is not None:
        raise PhaseForgedError(type(state).__name__, claimed)
    ticket = _own_ticket(state, "drive")
    if ticket.origin == "hand":
        raise PhaseForgedError(
            state.kind, "a Runner does not drive a phase built with statemachine.testing"
        )
    if ticket.left_by is not None:
        raise PhaseForgedError(state.kind, f"driving a phase already left by {ticket.left_by}()")
    if state.agent is not agent:
        same = " (another Agent object of the same name)" if state.agent.name == agent.name else ""
        raise SetupError(
            f"the {state.kind} phase belongs to agent {state.agent.name!r}{same}, and this "
            f"runner runs agent {agent.name!r}; drive a phase of this runner's agent "
            "(restore one for it with load_phase(document, agents={name: agent}))"
        )


# Every field of the runtime and of the agent, read as one tuple (in C).
_runtime_parts = operator.attrgetter(*(field.name for field in attrs.fields(Runtime)))
_agent_parts = operator.attrgetter(*(field.name for field in attrs.fields(Agent)))


def _same_fields(*classes: type[Any]) -> Callable[..., bool]:
    """A function telling whether objects' fields (each class's, in ``attrs.fields``
    order) are the very objects of tuples of them (identity, not ``==``: no object's
    ``__eq__`` is asked), given ``(obj, kept)`` for each class in turn:
    ``all(map(operator.is_, parts(obj), kept))`` for each, written out as
    ``len(kept) == 2 and obj.a is kept[0] and obj.b is kept[1] and ...``. The
    interpreter reads each slot and compares in a few instructions; ``attrgetter``
    looks each name up in the class and ``map`` calls ``operator.is_`` once per field
    (about ten times the work for the runtime's 14 fields and the agent's 16). The
    names are the classes' own fields, made by the library, never a phase's."""
    params: list[str] = []
    checks: list[str] = []
    for at, cls in enumerate(classes):
        names = [field.name for field in attrs.fields(cls)]
        if not all(name.isidentifier() for name in names):  # pragma: no cover - attrs's rule
            raise TypeError(f"{cls.__name__}'s fields are not all names: {names}")
        params += [f"obj{at}", f"kept{at}"]
        checks.append(f"len(kept{at}) == {len(names)}")
        checks += [f"obj{at}.{name} is kept{at}[{index}]" for index, name in enumerate(names)]
    source = f"def same({', '.join(params)}):\n    return {' and '.join(checks)}\n"
    namespace: dict[str, Any] = {}
    named = " ".join(cls.__qualname__ for cls in classes)
    exec(compile(source, f"<statemachine same fields {named}>", "exec"), namespace)
    same: Callable[..., bool] = namespace["same"]
    return same


_same_runtime = _same_fields(Runtime)
_same_terms = _same_fields(Agent)
# Both at once: _same_runtime(rt, kept) and _same_terms(agent, terms), in one call.
_same_run = _same_fields(Runtime, Agent)


@functools.cache
def _same_values(keys: tuple[str, ...]) -> Callable[[object, tuple[Any, ...]], bool]:
    """A function telling whether ``now`` (the budget's ``__dict__``) is a dict with
    exactly ``keys``, each holding the very object at its place in ``kept``: identity,
    not ``==``, since a value put in place from inside a phase (``object.__setattr__``
    on the frozen budget) may answer ``==`` as it likes and then compare as a larger
    limit. Exactly a ``dict``: a subclass may answer its lookups otherwise than what
    attribute access reads. Written out as ``now["tokens"] is kept[0] and ...`` (made
    once per set of keys; keys that are not all ``str`` take the loop)."""
    if not all(type(key) is str for key in keys):
        return functools.partial(_same_values_plain, keys)
    compared = "".join(f" and now[{key!r}] is kept[{at}]" for at, key in enumerate(keys))
    source = (
        "def same(now, kept):\n    try:\n"
        f"        return type(now) is dict and len(now) == {len(keys)}{compared}\n"
        "    except KeyError:\n        return False\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "<statemachine same budget>", "exec"), namespace)
    same: Callable[[object, tuple[Any, ...]], bool] = namespace["same"]
    return same


# The names standing for the kept objects in _same_all_code's source: str constants
# (no field or budget key starts with NUL), each replaced by its object in the code.
_KEPT = "\x00kept "


_Placed = Callable[[tuple[Any, ...]], tuple[Any, ...]]
# _placer's functions, by the id of their code (kept with it, so the id is its own).
_PLACERS: dict[int, tuple[types.CodeType, _Placed]] = {}


def _placer(code: types.CodeType) -> _Placed:
    """``_placer_of(code)``, made once per code: found by the code's identity (a code
    object's hash reads its instructions, names and constants: ~6 k instructions for a
    pair's code, at each pair's first transition in each run)."""
    found = _PLACERS.get(id(code))
    if found is not None and found[0] is code:
        return found[1]
    placed = _placer_of(code)
    _PLACERS[id(code)] = (code, placed)
    return placed


def _placer_of(code: types.CodeType) -> _Placed:
    """A function making ``code``'s constants with each placeholder (``_KEPT`` and an
    index) replaced by the kept object at that index: ``placed(kept)`` is the tuple
    ``kept[index] if placeholder else const`` over ``code.co_consts``, made by one
    ``itemgetter`` over ``kept`` followed by the other constants (in C; the same tuple).
    Made once per code (``_placer``): the codes it is given are each made once
    (``_same_all_code``, ``_pair_code``, themselves cached)."""
    consts = code.co_consts
    fixed = tuple(const for const in consts if not _placeholder(const))
    order: list[int] = []
    at = 0
    for const in consts:
        if _placeholder(const):
            order.append(int(const[len(_KEPT) :]))
        else:
            order.append(-len(fixed) + at)
            at += 1
    # Negative indexes count from the end: the other constants, after the kept ones. A
    # second, unused index makes itemgetter answer a tuple even for a single constant.
    pick = operator.itemgetter(*order, 0)

    def placed(kept: tuple[Any, ...]) -> tuple[Any, ...]:
        made: tuple[Any, ...] = pick(kept + fixed)[:-1]
        return made

    return placed


def _placeholder(const: object) -> bool:
    return type(const) is str and const.startswith(_KEPT)


@functools.cache
def _same_all_code(keys: tuple[str, ...]) -> types.CodeType:
    """The code of ``accept``'s whole terms check in one function, for a budget whose
    ``__dict__`` has ``keys`` (all ``str``): ``same(rt, agent, before, after)`` answers
    ``_same_run(rt, kept, agent, terms) and _same_values(keys)(vars(agent.budget),
    values) and before.agent is agent and after.agent is agent``, the same checks in the
    same order. Made once per set of keys; each ``Watch`` makes its function from it with
    its own kept objects (``Watch._same_all``, by ``_same_all_of``), each the constant
    its placeholder stands for.

    Each check is a statement of its own, ``if kept is not obj.field: return False``,
    the kept object a constant read first: the interpreter reads it and the object in one
    instruction, and jumps a short way past the return, where one expression of ``and``
    with the kept objects as defaults needed six instructions a field and a frame holding
    them all at every call."""
    lines, at = _terms_lines(keys, "False")
    lines.append("return before.agent is agent and after.agent is agent")
    body = "".join(f"        {line}\n" for line in lines)
    source = (
        f"def same(rt, agent, before, after):\n    try:\n{body}"
        "    except KeyError:\n        return False\n"
    )
    return _placed_code(source, "<statemachine same terms>", at)


def _terms_lines(
    keys: tuple[str, ...], refused: str, guard: str = "", guarded: bool = False
) -> tuple[list[str], int]:
    """The lines of a generated terms check (``_same_all_code``'s, ``_pair_code``'s),
    for a budget whose ``__dict__`` has ``keys`` (all ``str``), each answering
    ``return {refused}`` when its check fails: each field of the runtime (``rt``), then of
    the agent (``agent``), in ``attrs.fields`` order, then each of the budget's values,
    the very object its placeholder (``_KEPT`` and its index) stands for, after the
    budget's ``__dict__`` is shown an exact dict of ``len(keys)`` keys; and how many
    placeholders they name (the kept objects: ``(*runtime, *agent, *budget values)``).
    ``guard``: a condition under which alone the fields are checked one at a time (the
    budget's values are checked in any case, or with ``guarded`` under it too)."""
    lines: list[str] = []
    at = 0
    if guard:
        lines.append(f"if {guard}:")
    for obj, cls in (("rt", Runtime), ("agent", Agent)):
        for field in attrs.fields(cls):
            lines.append(
                f"{'    ' if guard else ''}"
                f"if {_KEPT + str(at)!r} is not {obj}.{field.name}: return {refused}"
            )
            at += 1
    indent = "    " if guard and guarded else ""
    lines.append(f"{indent}budget = agent.budget.__dict__")
    lines.append(
        f"{indent}if type(budget) is not dict or len(budget) != {len(keys)}: return {refused}"
    )
    for key in keys:
        lines.append(f"{indent}if {_KEPT + str(at)!r} is not budget[{key!r}]: return {refused}")
        at += 1
    return lines, at


# The condition under which a pair's function checks the runtime's and the agent's fields
# one at a time (_pair_code), the words of the Watch's ``_raw`` (``_raw_terms``) placed in
# its code as constants (the placeholders from ``at`` on, in ``_raw``'s order): the Watch
# has no raw check (``_raw``: None), or its runtime or agent is not the very object it was
# made with, or either one's words from its type through its fields are not the bytes
# they were (read in C from a view of them); and with ``budget``, the budget's values too:
# its ``__dict__`` is not the very dict kept, or that dict's words from its type through
# its values' pointer (``_dict_laid_out``: its version among them) are not the bytes they
# were.
def _not_raw(at: int, budget: bool) -> str:
    kept = [repr(_KEPT + str(at + index)) for index in range(9 if budget else 6)]
    guard = (
        f"watch._raw is None or {kept[0]} is not rt or {kept[1]} is not agent "
        f"or {kept[2]}.raw != {kept[3]} or {kept[4]}.raw != {kept[5]}"
    )
    if budget:
        guard += f" or agent.budget.__dict__ is not {kept[6]} or {kept[7]}.raw != {kept[8]}"
    return guard


def _placed_code(source: str, filename: str, placeholders: int) -> types.CodeType:
    """The code of the one function ``source`` defines, whose constants include exactly
    ``placeholders`` placeholders (``_KEPT`` and an index), each a constant of its own."""
    with warnings.catch_warnings():  # "is not" with a literal: the placeholders
        warnings.simplefilter("ignore", SyntaxWarning)
        module = compile(source, filename, "exec")
    (code,) = (const for const in module.co_consts if isinstance(const, types.CodeType))
    found = sum(map(_placeholder, code.co_consts))
    if found != placeholders:  # pragma: no cover - each placeholder is a constant of its own
        raise TypeError(f"{found} placeholders in {filename}, not {placeholders}")
    return code


# The size of a pointer (the words of an object's memory), on CPython.
_WORD = 8 if sys.maxsize > 2**32 else 4


@functools.cache
def _laid_out(cls: type[Any]) -> int:
    """How many bytes of an instance of ``cls`` (an attrs class of the library's: the
    runtime, the agent) run from its type word through its fields' slots, when those are
    exactly the words right after the type word, one a field (CPython's object layout,
    found on a probe instance holding a new object in each field); 0 otherwise (another
    interpreter or layout: the fields are checked one at a time). Equal bytes there then
    mean the same class and each field the very same object (its address, while the
    objects live)."""
    if sys.implementation.name != "cpython":  # pragma: no cover - CPython's layout
        return 0
    import ctypes  # only where the layout is CPython's (an import there)

    names = [field.name for field in attrs.fields(cls)]
    size = _WORD * (len(names) + 1)
    if ctypes.sizeof(ctypes.c_void_p) != _WORD or cls.__basicsize__ < _WORD + size:
        return 0  # pragma: no cover - CPython's layout
    probe = object.__new__(cls)
    marks = [object() for _ in names]
    for name, mark in zip(names, marks, strict=True):
        object.__setattr__(probe, name, mark)
    words = (ctypes.c_size_t * (len(names) + 1)).from_address(id(probe) + _WORD)
    if words[0] != id(cls) or sorted(words[1:]) != sorted(map(id, marks)):
        return 0  # pragma: no cover - CPython's layout
    return size


@functools.cache
def _dict_laid_out() -> int:
    """How many bytes of a ``dict`` run from its type word through its values' pointer
    (CPython's ``PyDictObject``: type, size, version, keys, values), when those words
    change at each change of the dict, a value put back included (PEP 509's version,
    which CPython changes at every change of a dict's contents), found on a probe dict;
    0 otherwise (another interpreter or layout, or a version no longer kept: the budget's
    values are checked one at a time)."""
    if sys.implementation.name != "cpython":  # pragma: no cover - CPython's layout
        return 0
    import ctypes  # only where the layout is CPython's (an import there)

    size = _WORD * 5
    first, second = object(), object()
    probe = {"a": first, "b": first}
    words = (ctypes.c_size_t * 5).from_address(id(probe) + _WORD)
    if words[0] != id(dict) or words[1] != 2:  # pragma: no cover - CPython's layout
        return 0
    seen = {bytes(words)}
    changes: tuple[Callable[[], object], ...] = (
        lambda: probe.__setitem__("a", second),
        lambda: probe.__setitem__("a", first),  # put back: another version all the same
        lambda: probe.update(b=second),
        lambda: probe.setdefault("c", first),
        lambda: probe.pop("c"),
        lambda: probe.update(b=first),
    )
    for change in changes:
        change()
        now = bytes(words)
        if now in seen:  # pragma: no cover - a version not changed (or not kept)
            return 0
        seen.add(now)
    return size


def _raw_terms(rt: object, agent: object) -> tuple[Any, ...] | None:
    """What a Watch's pair functions check ``rt`` and ``agent`` by at once (``_not_raw``),
    for the library's exact classes laid out as ``_laid_out`` finds: ``(rt, agent, rt's
    view, its bytes now, agent's view, its bytes now)``, each view a ``ctypes`` array
    over the object's words from its type through its fields (its ``raw``: the bytes
    there then); ``None`` for anything else (the fields are checked one at a time). The
    tuple holds ``rt`` and ``agent`` (the views' memory is theirs while it lives), and
    the Watch and its pair functions the fields' objects (their addresses are theirs
    while they live): equal bytes are the very class and field objects, no other.

    For a budget that is a ``Budget`` itself whose ``__dict__`` is exactly a ``dict``, on
    CPython (``_dict_laid_out``), three more: ``(that dict, its view, its bytes now)``,
    the view over its words from its type through its values' pointer: its size, its
    keys and values' tables and its version, which CPython changes at every change of
    its contents (a value put back included). The very dict with equal bytes is one not
    changed since: each key holds the very value it held (the Watch and its pair
    functions hold them)."""
    if type(rt) is not Runtime or type(agent) is not Agent:
        return None
    rt_size, agent_size = _laid_out(Runtime), _laid_out(Agent)
    if not (rt_size and agent_size):  # pragma: no cover - CPython's layout
        return None
    import ctypes  # only where the layout is CPython's (an import there)

    rt_view = (ctypes.c_char * rt_size).from_address(id(rt) + _WORD)
    agent_view = (ctypes.c_char * agent_size).from_address(id(agent) + _WORD)
    words = (rt, agent, rt_view, rt_view.raw, agent_view, agent_view.raw)
    budget: Any = agent.budget
    values = vars(budget) if type(budget) is Budget else None
    dict_size = _dict_laid_out()
    if type(values) is not dict or not dict_size:
        return words
    dict_view = (ctypes.c_char * dict_size).from_address(id(values) + _WORD)
    return (*words, values, dict_view, dict_view.raw)


def _same_all_of(
    keys: tuple[str, ...], kept: tuple[Any, ...]
) -> Callable[[Runtime, Agent[Any], Any, Any], bool]:
    """``_same_all_code(keys)``'s function holding ``kept`` (the runtime's fields, the
    agent's, the budget's values) as its constants."""
    code = _same_all_code(keys)
    same: Callable[[Runtime, Agent[Any], Any, Any], bool] = types.FunctionType(
        code.replace(co_consts=_placer(code)(kept)),
        {"type": type, "len": len, "KeyError": KeyError},
        "same",
    )
    return same


def _same_values_plain(keys: tuple[object, ...], now: object, kept: tuple[Any, ...]) -> bool:
    """``_same_values(keys)(now, kept)``, one key at a time."""
    if type(now) is not dict or len(now) != len(keys):
        return False
    for key, value in zip(keys, kept, strict=True):
        if key not in now or now[key] is not value:
            return False
    return True


# The phases that run a call, and those that hold one, as tuples (``A | B`` in an
# isinstance check builds the union at every call).
_RUNS_A_CALL: tuple[type[ToolCalling[Any]], type[Retrying[Any]]] = (ToolCalling, Retrying)
_HOLDS_A_CALL: tuple[
    type[ToolCalling[Any]], type[AwaitApproval[Any]], type[Observing[Any]], type[Retrying[Any]]
] = (ToolCalling, AwaitApproval, Observing, Retrying)


# What a Watch's _same_made holds until its terms check is made.
_NOT_MADE: Any = object()


@final
class Watch:
    """The runner's own record of one drive, against which each advance is checked."""

    __slots__ = (
        "_agent",
        "_budget",
        "_counters",
        "_keys",
        "_pairs",
        "_pending",
        "_raw",
        "_rt",
        "_runtime",
        "_same_budget",
        "_same_made",
        "_terms",
    )

    def __init__(self, rt: Runtime, agent: Agent[Any], start: Phase[Any]) -> None:
        self._rt = rt
        self._runtime = _runtime_parts(rt)
        self._agent = agent
        self._terms = _agent_parts(agent)
        budget = vars(agent.budget)
        self._budget = tuple(budget.values())
        self._keys = tuple(budget)
        self._same_budget = _same_values(tuple(budget))
        # _same_all (the terms check _quick calls) is made when first asked for: accept
        # calls _pairs' functions, which hold the same objects.
        self._same_made: Any = _NOT_MADE
        if not _FAST:
            _fast_pairs()
        # What _pairs' functions check the runtime, the agent (and the budget's values) by
        # at once (_not_raw): read with them, as they read the fields they hold.
        self._raw = _raw_terms(rt, agent) if _str_keys(budget) else None
        self._pairs = _pairs_for(rt, agent, self._raw)
        self._counters = _counters(start)
        self._pending: tuple[Any, ...] = getattr(start, "pending", ())

    @property
    def _same_all(self) -> Callable[[Runtime, Agent[Any], Any, Any], bool] | None:
        """The terms check (``_same_all_code``'s function) of what the runtime, the agent
        and the budget were when the Watch was made (the very objects ``_pairs``' functions
        hold); ``None`` for a budget whose ``__dict__`` is not a dict of ``str`` keys."""
        made = self._same_made
        if made is _NOT_MADE:
            made = self._same_made = (
                None
                if not self._pairs  # that budget's dict: _pairs_for's nothing
                else _same_all_of(self._keys, (*self._runtime, *self._terms, *self._budget))
            )
        same: Callable[[Runtime, Agent[Any], Any, Any], bool] | None = made
        return same

    def accept(
        self,
        before: Active[Any],
        after: object,
        kinds: tuple[type[Phase[Any]], ...] | None = None,
    ) -> Phase[Any]:
        """``after``, once it is shown to be what one transition of ``before`` made.

        ``kinds``: the classes it may be, when not those ``before.advance`` names (a
        phase that refuses its input goes to ``Failed``).

        A transition between two of the library's own classes (exactly those types,
        ``_FAST``) is judged first the short way, :meth:`_quick`'s checks written out in
        the pair's function (``_pair_code``, this Watch's own, in ``_pairs``; with
        ``_all_accounted``'s for a reply read from the transcript's last messages, given
        as exact tuples): it only ever accepts what :meth:`_checked` accepts, and anything
        it does not show acceptable is judged again by :meth:`_checked`, which says why it
        refuses (tests/test_fast_runner4.py, tests/test_watch_fast16.py).
        """
        if kinds is None:
            cls = type(before)
            pair = self._pairs.get(cls)
            # The classes themselves, by identity: a dict may match a class by its
            # metaclass's __eq__.
            if pair is not None and pair[0] is cls:
                kind = type(after)
                entry = pair[1].get(kind)
                if entry is not None and entry[0] is kind and entry[1](self, before, after):
                    return after  # type: ignore[return-value]  # pyright: ignore[reportReturnType]
        return self._checked(before, after, kinds)

    def pairs_from(
        self, cls: type[Any]
    ) -> dict[type[Any], tuple[type[Any], Callable[..., Any]]] | None:
        """``accept``'s pairs from ``cls`` (its entry in ``_pairs``, by identity): the
        dict ``{after class: (it, function)}`` that ``accept`` reads for a ``before`` of
        exactly ``cls``, or ``None`` when it has none (a class not the library's, a budget
        ``_pairs_for`` makes nothing for). The same dict at every call (a pair's function,
        made at its first call, is put in its place in it), so that the runner, reading
        it once a drive for each of the library's classes, calls a pair's function as
        ``accept`` calls it, without ``accept``'s frame and its look-up by ``before``'s
        class: for ``after`` exactly the entry's class, the function's true answer
        accepts ``after``, anything else is judged by ``_checked(before, after, None)``
        (``accept``'s answers, tests/test_watch_fast21h.py)."""
        pair = self._pairs.get(cls)
        return pair[1] if pair is not None and pair[0] is cls else None

    def _quick(self, before: Active[Any], after: Any, flags: _Flags) -> Phase[Any] | None:
        """Whether ``after`` is accepted, judged as :meth:`_checked` judges it, for
        ``before`` and ``after`` of the library's own classes (``_FAST``: the caller
        checked their exact types), with what those classes are known to be worked out
        once per pair (``flags``): the graph's edge, which of them hold or run a call or
        have pending calls. ``True``: accepted, recorded as ``_checked`` records it.
        ``False``: not shown acceptable here (nothing changed); ``_checked`` judges.
        Writes (an ``ApprovedCall`` to run), ``Failed``, model retries and retries of a
        call (``Retrying -> ToolCalling``) always go to ``_checked``.

        ``accept``'s pair functions (``_pair_code``) do these checks (the same reads and
        operators in the same order); this is their plain form, against which they are
        tested."""
        holds, runs, queued, counted = flags
        try:
            link = after._ticket
            holder = link.holder
            origin = before._ticket
        except AttributeError:
            return None
        # _one_transition's usual chain (the cut comes once all else is shown).
        if not (
            holder is not None
            and type(link) is _Ticket
            and holder() is after
            and link is not origin
            and link.via is _VIA_TRANSITION
            and link.parent is origin
        ):
            return None
        now = counted(after, self._counters)
        if now is None:
            return None
        same = self._same_all
        if same is None or not same(self._rt, self._agent, before, after):
            return None
        if runs and type(after.call) is ApprovedCall:
            return None
        pending: Any = after.pending if queued else ()
        if type(pending) is not tuple:
            return None
        kept = self._pending
        if (pending or kept) and (
            pending is not kept and _order_problem(before, after, pending, kept) is not None
        ):
            return None
        # _asked_problem, with _reply's reading of a Transcript's last messages, for a
        # reply exactly a Message whose tool_calls is exactly a tuple (reading it runs no
        # code); any other reply goes to _checked untouched (it reads tool_calls once).
        transcript = after.transcript
        if type(transcript) is not Transcript:
            return None
        last: Any = transcript._tail
        if type(last) is not tuple:
            return None
        start = len(last)
        while start and last[start - 1].role == "tool":
            start -= 1
        if start:
            asking: Any = last[start - 1]
            if asking.role != "assistant":
                found: Any = (None, (), ())
            # A reply made otherwise (its tool_calls not asked its truth): the plain way.
            elif type(asking) is not Message or type(asking.tool_calls) is not tuple:
                return None
            else:
                found = (asking, asking.tool_calls, last[start:])
        else:  # the reply is further back (or none)
            found = _exact_reply(transcript)
            if found is None:
                return None
        asking, asked, answered = found
        if (
            asking is not None
            and asked
            and not _all_accounted(asked, answered, after if holds else None, pending)
        ):
            return None
        after._ticket.parent = None
        self._counters = now
        self._pending = pending
        phase: Phase[Any] = after
        return phase

    def _checked(
        self,
        before: Active[Any],
        after: object,
        kinds: tuple[type[Phase[Any]], ...] | None,
    ) -> Phase[Any]:
        """``accept``'s whole check: ``after``, or ``IllegalTransitionError`` saying why."""
        if not isinstance(after, Phase):
            raise IllegalTransitionError(before.kind, type(after).__name__, "it is not a phase")
        try:  # isinstance may have asked a __class__ it answers: _claimed's check
            own = after.__class__ is type(after)
        except Exception:  # untrusted code: any error is a refusal (_claimed says which)
            own = False
        if not own:
            claimed = _claimed(after) or "its __class__ answers otherwise each time"
            raise IllegalTransitionError(before.kind, type(after).__name__, claimed)
        self._one_transition(before, after)
        now = _counters(after)
        # Read once: the queue checked is the one recorded for the next transition.
        pending: Any = getattr(after, "pending", ())
        agent = self._agent
        problem = (
            # _unchanged's checks in one expression while all is as kept; else it says
            # which is not (and a refusal stands even if it then finds nothing).
            None
            if _same_run(self._rt, self._runtime, agent, self._terms)
            and self._same_budget(vars(agent.budget), self._budget)
            and before.agent is agent
            else self._unchanged(before) or "the run's terms changed while they were checked"
        ) or (
            self._rules(before, after, now, kinds)
            or _queue_problem(before, after, pending, self._pending)
        )
        if problem is not None:
            raise IllegalTransitionError(before.kind, after.kind, problem)
        self._counters = now
        self._pending = pending
        return after

    @staticmethod
    def _one_transition(before: Active[Any], after: Phase[Any]) -> None:
        # The usual chain, read in _own_ticket's order and judged as _walked judges it:
        # the library's ticket, held by this very object, one transition from the phase
        # advanced (tests/test_watch_fast.py). Anything else takes _walked.
        link: Any = None
        try:
            link = after._ticket
            holder = after._ticket.holder
        except AttributeError:
            holder = None
        if holder is not None and type(link) is _Ticket and holder() is after:
            origin = before._ticket
            if link is not origin and link.via is _VIA_TRANSITION and link.parent is origin:
                after._ticket.parent = None
                return
        _walked(before, after, _own_ticket(after, "advance"))

    def _unchanged(self, before: Active[Any]) -> str | None:
        if not _same_runtime(self._rt, self._runtime):
            return "the run's runtime (its gate, ledger, clock or approvals) was changed"
        if not _same_terms(self._agent, self._terms):
            return "the agent's terms (budget, limits, tools, phases) were changed"
        if not self._same_budget(vars(self._agent.budget), self._budget):
            return "the agent's budget was changed"
        if before.agent is not self._agent:
            return "the phase advanced belongs to another agent"
        return None

    def _rules(
        self,
        before: Active[Any],
        after: Phase[Any],
        now: _Counters,
        kinds: tuple[type[Phase[Any]], ...] | None,
    ) -> str | None:
        was = self._counters
        if after.agent is not self._agent:
            return "it belongs to another agent"
        if kinds is None:  # _successors(before), without its frame for a library class
            kinds = _LIBRARY_SUCCESSORS.get(id(type(before))) or _successors(before)
        if not isinstance(after, kinds):
            return f"{type(before).__name__}.advance's annotation does not name it"
        if now[0] != was[0] + 1:
            return f"its step is {now[0]}, not {was[0] + 1}"
        if not (
            now[1] >= was[1]
            and now[2] >= was[2]
            and now[3] >= was[3]
            and now[4] >= was[4]
            and now[5] >= was[5]
            and now[6] >= was[6]
        ):
            return "it counts less spend, actions or tool iterations than the phase before it"
        if now[7] and now[7] == was[7] and -1 < now[8] < was[8]:
            return f"its attempt is {now[8]}, below {was[8]}"
        if isinstance(after, ToolCalling) and isinstance(before, Retrying):
            if now[8] != was[8] + 1:
                return f"a retry is attempt {was[8] + 1}, not {now[8]}"
            # The cap is the agent's (a Retrying subclass may not widen its own policy).
            cap = self._agent.retry_for(after.call.tool).max_attempts
            if now[8] > cap:
                return f"attempt {now[8]} is past the retry cap of {cap}"
        if isinstance(after, _RUNS_A_CALL) and type(after.call) is ApprovedCall:
            return _write_problem(before, after, was)
        if isinstance(after, ModelRetrying) or isinstance(before, ModelRetrying):
            return _model_retry_problem(before, after, len(self._rt.fallback_models))
        return None


# The library's own active phase classes, whose ``successors`` (read once per class from
# the annotation, by Active.successors) the Watch keeps: a dict look-up instead of the
# classmethod's call at each transition. A subclass, which may answer otherwise (it may
# override ``successors``), is asked each time, as before. Both are keyed by the classes'
# ids (the library's classes live as long as the process): a class as a key would be
# matched by another class whose metaclass hashes and compares as it.
_LIBRARY_ACTIVE: frozenset[type[Any]] = frozenset(
    (Idle, Planning, AwaitApproval, ToolCalling, Observing, Retrying, Responding, ModelRetrying)
)
_LIBRARY_ACTIVE_IDS: frozenset[int] = frozenset(map(id, _LIBRARY_ACTIVE))
_LIBRARY_SUCCESSORS: dict[int, tuple[type[Phase[Any]], ...]] = {}


def _successors(before: Active[Any]) -> tuple[type[Phase[Any]], ...]:
    """``type(before).successors()``; kept for the library's own classes."""
    cls = type(before)
    kept = _LIBRARY_SUCCESSORS.get(id(cls))
    if kept is not None:
        return kept
    answer = cls.successors()
    if id(cls) in _LIBRARY_ACTIVE_IDS:
        _LIBRARY_SUCCESSORS[id(cls)] = answer
    return answer


# What _quick knows of a pair of the library's classes: whether the later one holds a call
# (_HOLDS_A_CALL), runs one (_RUNS_A_CALL), has pending calls; and its _counted function.
_Flags = tuple[bool, bool, bool, Callable[[Any, _Counters], _Counters | None]]


@functools.cache
def _counted(call_id: bool, attempt: bool) -> Callable[[Any, _Counters], _Counters | None]:
    """A function ``counted(phase, was)`` for a library class with a ``call_id`` field
    or none, an ``attempt`` field or none (and no such attribute otherwise): the phase's
    counters, ``_counters(phase)`` (read in its order, from the slots themselves), when
    ``_rules`` finds nothing wrong with them after ``was`` (its step is one more, nothing
    it counts is less, the attempt of the same call is not lower); ``None`` otherwise.
    A field's value is checked as ``_counters`` checks it; the ``""`` and ``-1`` a class
    without the field gives need no check, and get none."""
    body = _counters_body(
        call_id, attempt, '  # the very operators _rules uses (!= is not "not ==")'
    )
    source = f"def counted(phase, was):\n{body}    return {_counters_made(call_id, attempt)}\n"
    namespace: dict[str, Any] = {"CHUNK": CHUNK, "ActionLog": ActionLog}
    exec(compile(source, "<statemachine counted>", "exec"), namespace)
    counted: Callable[[Any, _Counters], _Counters | None] = namespace["counted"]
    return counted


def _counters_made(call_id: bool, attempt: bool) -> str:
    """The expression of a generated counters check's counters, ``_counters``'s tuple:
    the ``""`` and ``-1`` of a class without the field written in as constants."""
    return (
        "(step, tokens, cost, tool_calls, model_calls, count, iterations, "
        f"{'call_id' if call_id else repr('')}, {'attempt' if attempt else '-1'})"
    )


def _counters_body(call_id: bool, attempt: bool, note: str = "") -> str:
    """The lines of a generated counters check (``_counted``'s, ``_pair_code``'s) for a
    class with a ``call_id`` field or none and an ``attempt`` field or none, before its
    return: the phase's counters read in ``_counters``'s order, each field's value
    checked as ``_counters`` checks it (a class without the field gives ``""`` or ``-1``,
    which need no check), then ``_rules``'s comparisons with ``was``, each failing one
    answering ``return None``; ``note`` ends the step's line (a comment)."""
    checks = ('    if not isinstance(call_id, str):\n        call_id = ""\n' if call_id else "") + (
        "    if not isinstance(attempt, int):\n        attempt = -1\n" if attempt else ""
    )
    # A class without the field: its ``""`` or ``-1`` is a constant (no local); with no
    # call_id, the last check (``"" and ...``) is never true and reads nothing: left out.
    reads = ("    call_id = phase.call_id\n" if call_id else "") + (
        "    attempt = phase.attempt\n" if attempt else ""
    )
    last = (
        "    if call_id and call_id == was_call_id and "
        f"-1 < {'attempt' if attempt else '-1'} < was_attempt:\n        return None\n"
        if call_id
        else ""
    )
    # ``was`` (a Watch's counters: always _counters's 9-tuple) is unpacked once, after
    # every read of the phase: each comparison then reads two locals.
    return f"""\
    spent = phase.spent
    loop = phase.loop
{reads}    actions = loop.actions
    step = phase.step
    tokens = spent.tokens
    cost = spent.cost
    tool_calls = spent.tool_calls
    model_calls = spent.model_calls
    count = (
        len(actions._chunks) * {CHUNK} + len(actions._tail)
        if type(actions) is ActionLog
        else len(actions)
    )
    iterations = loop.tool_iterations
{checks}    (
        was_step, was_tokens, was_cost, was_tool_calls, was_model_calls, was_count,
        was_iterations, was_call_id, was_attempt,
    ) = was
    if step != was_step + 1:{note}
        return None
    if not (
        tokens >= was_tokens
        and cost >= was_cost
        and tool_calls >= was_tool_calls
        and model_calls >= was_model_calls
        and count >= was_count
        and iterations >= was_iterations
    ):
        return None
{last}"""


# What the counters and terms checks of the functions _pair_code makes read as globals.
_CHECK_NAMES: dict[str, Any] = {
    "CHUNK": CHUNK,
    "ActionLog": ActionLog,
    "type": type,
    "len": len,
    "isinstance": isinstance,
    "KeyError": KeyError,
}


# The usual reply first (_pair_code), for a class that holds a call (True: the reply
# last, its one call the one held) or not (False: the reply, then one tool message
# answering its one call); ``general``: the loop that reads any other reply, indented
# as the ``else`` branch.
_USUAL_REPLY = {
    True: """\
    if (
        not pending
        and last
        and type(asking := last[-1]) is Message
        and asking.role is "assistant"
        and type(asked := asking.tool_calls) is tuple
        and len(asked) == 1
    ):
        mine, theirs = phase.call_id, asked[0].id
        if not (mine is theirs or mine == theirs):
            return None
    else:
{general}""",
    False: """\
    if (
        not pending
        and len(last) > 1
        and type(told := last[-1]) is Message
        and told.role is "tool"
        and type(asking := last[-2]) is Message
        and asking.role is "assistant"
        and type(asked := asking.tool_calls) is tuple
        and len(asked) == 1
    ):
        mine, theirs = told.tool_call_id, asked[0].id
        if not (mine is theirs or mine == theirs):
            return None
    else:
{general}""",
}


@functools.cache
def _pair_code(
    call_id: bool,
    attempt: bool,
    holds: bool,
    runs: bool,
    queued: bool,
    keys: tuple[str, ...],
    raw: int = 2,
) -> types.CodeType:
    """The code of ``accept``'s short way for one pair of the library's classes, whose
    later class has a ``call_id`` field or none and an ``attempt`` field or none, holds a
    call or not (``_HOLDS_A_CALL``), runs one or not (``_RUNS_A_CALL``), has pending
    calls or not (the pair's flags), for a budget whose ``__dict__`` has ``keys`` (all
    ``str``): ``fast(watch, before, phase)`` answers ``True`` when
    ``accept``'s own frame accepted ``phase`` (having cut its ticket's chain and recorded
    its counters and queue, as ``accept`` did), else ``None`` (nothing changed:
    ``_checked`` judges). The same checks and operators in the same order as
    ``Watch._quick`` (its ``_counted`` and ``_same_all`` calls written out in its frame):
    the ticket chain, the counters, the run's terms (in their ``try``; the runtime's and
    the agent's 30 fields are compared one at a time only when the Watch's ``_raw``
    check does not show them all the very objects kept, ``_not_raw``: the same verdict,
    tests/test_watch_fast19.py; with ``raw`` 2, the budget's values too, whose raw check
    is its dict's version, tests/test_watch_fast21e.py; ``raw`` 1: the runtime and the
    agent only, 0: no raw check), the write, the queue, the last reply; each flag, which
    ``accept`` read from the pair's entry at each call, written in as what it is. Each
    ``Watch`` makes a function of it for each pair (``_pairs_for``): its own code object, so that
    each attribute read in it sees one class (the interpreter keeps what it found a read
    to be; ``accept``'s reads of the phases, each on several classes, took the slow way).

    The last reply is read, as ``_quick`` reads it, only when it is exactly a ``Message``
    (a slotted class: a read runs no code) whose ``tool_calls`` is exactly a tuple (its
    truth runs none): any other reply is left to ``_checked`` (``None``) before its
    ``tool_calls`` is asked anything, so that ``_checked``, reading it once, judges it as
    it would alone (tests/test_watch_fast18.py). Its answers are compared in place in
    the transcript's last messages, without a slice of them; each message of the
    transcript's end is read once in the loop finding the reply (the same reads as
    ``_quick``'s).

    The usual reply of a run is read first without that loop (``_USUAL_REPLY``): no
    pending calls, the tail ending with the reply itself (a class that holds a call) or
    with the reply then one tool message (one that does not), each exactly a ``Message``
    whose role is the very ``str`` the library's literal is (``"assistant"``, ``"tool"``:
    interned, compared by identity, so no ``__eq__`` runs), its ``tool_calls`` exactly a
    tuple of one call. The loop would find that same reply and compare that same call's
    id with the same id (the held call's, or the tool message's) as its only code-running
    reads, in the same order: the same verdict (tests/test_watch_fast24e.py). Anything
    else takes the loop, as before."""
    counted = _counters_body(call_id, attempt)
    at = len(attrs.fields(Runtime)) + len(attrs.fields(Agent)) + len(keys)
    guard = _not_raw(at, raw == 2) if raw else ""
    lines, placed = _terms_lines(keys, "None", guard, raw == 2)
    at = placed + (0, 6, 9)[raw]
    lines.append("if not (before.agent is agent and phase.agent is agent): return None")
    terms = "".join(f"        {line}\n" for line in lines)
    write = "    if type(phase.call) is ApprovedCall:\n        return None\n" if runs else ""
    pending = "phase.pending" if queued else "()"
    held = (
        "                    mine, theirs = phase.call_id, asked[at].id\n"
        "                    if not (mine is theirs or mine == theirs):\n"
        "                        return None\n"
        if holds
        else ""
    )
    held_by = "phase" if holds else "None"
    made = _counters_made(call_id, attempt)
    general = f"""\
    end = start = len(last)
    while start:
        asking = last[start - 1]
        if not asking.role == "tool":
            break
        start -= 1
    if (
        not start
        and type(chunks := transcript._chunks) is tuple
        and chunks
        and type(chunk := chunks[-1]) is tuple
        and len(chunk) == MESSAGES_CHUNK
    ):
        start = MESSAGES_CHUNK
        last = chunk + last
        end = len(last)
        while start:
            asking = last[start - 1]
            if not asking.role == "tool":
                break
            start -= 1
    if start:
        if not asking.role != "assistant":
            if type(asking) is not Message or type(asked := asking.tool_calls) is not tuple:
                return None
            if asked:
                if not pending and len(asked) == end - start{" + 1" if holds else ""}:
                    at = 0
                    while start < end:
                        mine, theirs = last[start].tool_call_id, asked[at].id
                        if not (mine is theirs or mine == theirs):
                            return None
                        start += 1
                        at += 1
{held}                elif not _all_accounted(asked, last[start:], {held_by}, pending):
                    return None
    else:
        found = _exact_reply(transcript)
        if found is None:
            return None
        asking, asked, answered = found
        if asking is not None and not _all_accounted(asked, answered, {held_by}, pending):
            return None
"""
    reply = _USUAL_REPLY[holds].format(general=textwrap.indent(general, "    "))
    source = f"""\
def fast(watch, before, phase):
    try:
        link = phase._ticket
        holder = link.holder
        origin = before._ticket
    except AttributeError:
        return None
    if not (
        holder is not None
        and type(link) is _Ticket
        and holder() is phase
        and link is not origin
        and link.via is _VIA_TRANSITION
        and link.parent is origin
    ):
        return None
    was = watch._counters
{counted}    rt = watch._rt
    agent = watch._agent
    try:
{terms}    except KeyError:
        return None
{write}    pending = {pending}
    kept = watch._pending
    transcript = phase.transcript
    if not (
        type(pending) is tuple
        and (
            not (pending or kept)
            or pending is kept
            or _order_problem(before, phase, pending, kept) is None
        )
        and type(transcript) is Transcript
        and type(last := transcript._tail) is tuple
    ):
        return None
{reply}    phase._ticket.parent = None
    watch._counters = {made}
    watch._pending = pending
    return True
"""
    return _placed_code(source, "<statemachine accept>", at)


_Pairs = dict[type[Any], tuple[type[Any], dict[type[Any], tuple[type[Any], Callable[..., Any]]]]]


def _str_keys(budget: object) -> bool:
    """Whether a budget's ``__dict__`` is exactly a ``dict`` of ``str`` keys."""
    return type(budget) is dict and all(type(key) is str for key in budget)


def _pairs_for(rt: Runtime, agent: Agent[Any], raw: tuple[Any, ...] | None = None) -> _Pairs:
    """``_pair_code``'s functions for each pair of ``_FAST``, as ``_FAST`` holds its
    entries: ``{before class: (it, {after class: (it, function)})}``, for this run's
    runtime and agent, holding what they are now as their constants; empty for a budget
    whose ``__dict__`` is not a dict of ``str`` keys (``accept``'s whole check judges
    those runs). Each pair's function is made at its first call (``_made_at_first``:
    a run takes a few of the pairs, and a function costs ~26 k instructions to make).
    ``raw``: the Watch's ``_raw`` (``_raw_terms``), whose objects the functions hold too,
    after the others (their raw check, ``_not_raw``); ``None``: none."""
    budget = vars(agent.budget)
    if not _str_keys(budget):
        return {}
    keys = tuple(budget)
    kept = (*_runtime_parts(rt), *_agent_parts(agent), *budget.values(), *(raw or ()))
    made: _Pairs = {}
    first = _made_at_first(made, keys, kept, _RAW_KINDS[len(raw or ())])
    for before_cls, (_, pairs) in _FAST.items():
        made[before_cls] = (before_cls, {after_cls: (after_cls, first) for after_cls in pairs})
    return made


# What a raw check covers, by the length of the Watch's _raw: nothing, the runtime and the
# agent, or the budget's values too.
_RAW_KINDS = {0: 0, 6: 1, 9: 2}


def _made_at_first(
    made: _Pairs, keys: tuple[str, ...], kept: tuple[Any, ...], raw: int
) -> Callable[..., Any]:
    """A function that, called as a pair's function in ``made`` (for ``before`` and
    ``phase`` of exactly the pair's classes: ``accept`` checked them), makes it
    (``_pair_code`` of the pair's flags, ``keys``, holding ``kept``, the objects kept
    when the Watch was made), puts it in its place in ``made`` and answers as it does."""

    def first(watch: Watch, before: Any, phase: Any) -> Any:
        before_cls, after_cls = type(before), type(phase)
        _, (holds, runs, queued, _counted_fn), index = _FAST[before_cls][1][after_cls]
        code = _pair_code(index >= 2, index % 2 == 1, holds, runs, queued, keys, raw)
        fast: Callable[..., Any] = types.FunctionType(
            code.replace(co_consts=_placer(code)(kept)), _PAIR_NAMES, "fast"
        )
        made[before_cls][1][after_cls] = (after_cls, fast)
        return fast(watch, before, phase)

    return first


# The pairs _quick judges: for each library active class, the class itself and, for each
# library class that its advance may return (by its annotation), that class and its flags.
_FAST: dict[type[Any], tuple[type[Any], dict[type[Any], tuple[type[Any], _Flags, int]]]] = {}


def _fast_pairs() -> None:
    """Fill ``_FAST`` (once: the classes' annotations are read then, as ``successors``
    reads them). Left out: ``Failed`` (exempt from some checks), ``ModelRetrying`` on
    either side and ``Retrying -> ToolCalling`` (rules of their own), which ``_checked``
    judges. A class whose fields are not as ``_quick`` reads them is left out too."""
    if _FAST:
        return
    after_classes = (Planning, AwaitApproval, ToolCalling, Observing, Retrying, Responding, Done)
    for before_cls in (Idle, Planning, AwaitApproval, ToolCalling, Observing, Retrying, Responding):
        kinds = _successors_of(before_cls)
        pairs: dict[type[Any], tuple[type[Any], _Flags, int]] = {}
        for after_cls in after_classes:
            if not issubclass(after_cls, kinds):
                continue
            if before_cls is Retrying and after_cls is ToolCalling:
                continue
            names = {field.name for field in attrs.fields(after_cls)}
            holds = issubclass(after_cls, _HOLDS_A_CALL)
            runs = issubclass(after_cls, _RUNS_A_CALL)
            if not {"agent", "transcript", "_ticket"} <= names or (
                (holds or runs) and "call" not in names
            ):  # pragma: no cover - the library's classes have these
                continue
            call_id, attempt = "call_id" in names, "attempt" in names
            if after_cls.__dictoffset__ or any(
                hasattr(after_cls, name)
                for name, has in (("call_id", call_id), ("attempt", attempt))
                if not has
            ):  # pragma: no cover - the library's classes are slotted, without these
                continue
            counted = _counted(call_id, attempt)
            flags = (holds, runs, "pending" in names, counted)
            pairs[after_cls] = (after_cls, flags, 2 * call_id + attempt)
        _FAST[before_cls] = (before_cls, pairs)


def _successors_of(cls: type[Any]) -> tuple[type[Phase[Any]], ...]:
    kept = _LIBRARY_SUCCESSORS.get(id(cls))
    if kept is None:
        kept = _LIBRARY_SUCCESSORS[id(cls)] = cls.successors()
    return kept


def _model_retry_problem(before: Active[Any], after: Phase[Any], fallbacks: int) -> str | None:
    """Why ``after`` may not follow ``before`` where a model retry is involved; else ``None``.

    ``Planning -> ModelRetrying`` keeps the attempt and the model that failed it;
    ``ModelRetrying -> Planning`` asks the next of the ``fallbacks`` models as the same
    attempt, or the runner's model as the next attempt within the agent's cap (attempt
    1 after a resume).
    """
    if isinstance(after, ModelRetrying):
        if not isinstance(before, Planning):
            return "only Planning's model call is retried by ModelRetrying"
        if (after.attempt, after.model_choice) != (before.model_attempt, before.model_choice):
            return "a model retry keeps the attempt and the model that failed"
        return None
    if isinstance(before, ModelRetrying) and isinstance(after, Planning):
        cap = before.agent.model_retry.max_attempts
        choice, attempt = after.model_choice, after.model_attempt
        if choice and (choice, attempt) != (before.model_choice + 1, before.attempt):
            return "a fallback model is the next one, asked as the same attempt"
        if choice > fallbacks:
            return f"model choice {choice} is past the {fallbacks} fallback model(s)"
        expected = 1 if _restored(before) else before.attempt + 1
        if not choice and attempt != expected:
            return f"the model's next attempt is {expected}, not {attempt}"
        if attempt > cap:
            return f"model attempt {attempt} is past the retry cap of {cap}"
    return None


def _write_problem(
    before: Active[Any], after: ToolCalling[Any] | Retrying[Any], was: _Counters
) -> str | None:
    """Why ``after``, holding an approved write, may not follow ``before``; else ``None``."""
    if isinstance(after, Retrying):
        if isinstance(before, ToolCalling) and before.call is after.call:
            return None if after.attempt == was[8] else "a retry keeps the attempt"
        return "a write is retried only from the ToolCalling that ran it"
    approved = after.call
    if isinstance(before, AwaitApproval) and isinstance(approved, ApprovedCall):
        if before.call_id != after.call_id or before.call is not approved.call:
            return "it holds another call than the one approved"
        return None if after.attempt == 1 else "a first attempt is attempt 1"
    if isinstance(before, Retrying):
        if before.call is not after.call or after.call_id != was[7]:
            return "a retry runs the same approved call"
        return None
    return "a write reaches ToolCalling only through AwaitApproval"


def _queue_problem(
    before: Phase[Any], after: Phase[Any], now: object, was: tuple[ToolRequest, ...]
) -> str | None:
    """Why ``after``'s pending calls (``now``, read once) may not follow ``before``'s
    (``was``, as recorded when ``before`` was accepted); ``None`` when they may.

    A queue is carried as it is, or loses its first call to a transition of ``Planning``
    about that call (a ``ToolCalling`` or ``AwaitApproval`` holds that call's id), or is
    answered whole by ``Planning`` (``skip_pending``) or dropped by ``Failed``. Only a
    ``Planning`` with nothing pending starts a queue (a new reply), of the model's
    requests as ``ToolRequest`` objects, never of anything that could hold a typed call.
    """
    if type(now) is not tuple:
        return "its pending calls are not a tuple"
    return _order_problem(before, after, now, was) or _asked_problem(after, now)


def _order_problem(
    before: Phase[Any], after: Phase[Any], now: tuple[object, ...], was: tuple[ToolRequest, ...]
) -> str | None:
    """Why ``after``'s queue, ``now``, is not ``was`` carried, less its first call, or
    answered."""
    planning = isinstance(before, Planning)
    if not was:
        if not now:
            return None
        if not planning:
            return "only Planning queues the calls of a reply"
        if any(type(request) is not ToolRequest for request in now):
            return "a pending call is not a ToolRequest"
        return None
    if _same_calls(now, was):
        return None
    if _same_calls(now, was[1:]):
        if not planning:
            return "only Planning takes a pending call"
        call_id = getattr(after, "call_id", None)
        if call_id is not None and call_id != was[0].id:
            return f"it holds call {call_id!r}, and the first pending call is {was[0].id!r}"
        if isinstance(after, Planning) and not _answers(after.transcript, was[:1]):
            return f"it does not answer the first pending call, {was[0].id!r}"
        return None
    if not now and isinstance(after, Failed):
        return None
    if not now and planning and isinstance(after, Planning):
        return None if _answers(after.transcript, was) else "it drops pending calls unanswered"
    return "its pending calls are not those of the phase before, in order"


def _asked_problem(after: Phase[Any], pending: tuple[Any, ...]) -> str | None:
    """Why the calls of the reply that ``after``'s transcript ends with are not all
    accounted for: each id the model's last message asked for is answered (a tool message
    after it), held (the call ``after`` runs, waits on or observes) or pending, in the
    model's order, once. ``Failed`` is exempt: the model is not asked again.

    ``pending``: ``after``'s pending calls, read once by the caller (a tuple). The ids
    are read in C and compared as tuples (as lists, one call at a time, they compare the
    same: each pair by identity, then ``==``).
    """
    if isinstance(after, Failed):
        return None
    asking, asked, answered = _reply(after.transcript)
    if asking is None:
        return None
    holder = after if isinstance(after, _HOLDS_A_CALL) else None
    if _all_accounted(asked, answered, holder, pending):
        return None
    accounted = tuple(map(_TOOL_CALL_ID, answered))
    if holder is not None:
        accounted += (holder.call_id,)
    if pending:
        accounted += tuple(map(_ID, pending))
    asked_ids = tuple(map(_ID, asked))
    if accounted != asked_ids:
        return (
            f"the model asked for calls {list(asked_ids)}, and {list(accounted)} are "
            "answered, held or pending"
        )
    return None


def _all_accounted(
    asked: object, answered: Sequence[Message], holder: Any, pending: tuple[Any, ...]
) -> bool:
    """Whether the ids of ``answered``, then ``holder``'s call id (``None``: none held),
    then those of ``pending`` are those of ``asked`` (the reply's ``tool_calls``, as its
    caller read it, once), in order: each pair the same object or equal, as the tuples
    compare. Read in place, one id at a time, without the tuples, for the tuples the
    model's messages and the queue are; ``False`` for anything else (the caller then
    builds the tuples and compares them as before)."""
    if type(asked) is not tuple or type(answered) is not tuple:
        return False
    if len(asked) != len(answered) + (holder is not None) + len(pending):
        return False
    at = 0
    for message in answered:
        mine, theirs = message.tool_call_id, asked[at].id
        if not (mine is theirs or mine == theirs):
            return False
        at += 1
    if holder is not None:
        mine, theirs = holder.call_id, asked[at].id
        if not (mine is theirs or mine == theirs):
            return False
        at += 1
    for request in pending:
        mine, theirs = request.id, asked[at].id
        if not (mine is theirs or mine == theirs):
            return False
        at += 1
    return True


_TOOL_CALL_ID = operator.attrgetter("tool_call_id")
_ID = operator.attrgetter("id")

# How many messages at the end of a transcript given as a tuple _last_reply reads in one
# slice (a ``Transcript``'s own last messages, its ``_tail``, are read as they are).
_TAIL = 8


def _last_reply(  # pyright: ignore[reportUnusedFunction]
    transcript: Sequence[Message],
) -> tuple[Message | None, Sequence[Message]]:
    """``_reply``'s reply and answers (what tests/test_watch_fast.py and
    tests/test_fast_paths.py compare with ``_last_reply_plain``)."""
    asking, _, answered = _reply(transcript)
    return asking, answered


def _reply(transcript: Sequence[Message]) -> tuple[Message | None, Any, Sequence[Message]]:
    """The model's last message, when it asked for tool calls, its ``tool_calls`` (read
    once: the object whose truth was asked is the one its ids are read from, whatever
    asking its truth did), and the tool messages after it (``(None, (), ())`` when the
    transcript does not end with such a reply and its answers): what ``_reply_plain``
    finds, read from the transcript's last messages when the reply is among them. Those
    are a ``Transcript``'s ``_tail`` (the very tuple its negative indexes and its
    iteration end with: no call of its own), or one slice of a tuple."""
    kind = type(transcript)
    tail: object = None
    if kind is Transcript:
        tail = transcript._tail  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
    elif kind is tuple:
        tail = transcript[-_TAIL:]
    if type(tail) is tuple:
        last: tuple[Message, ...] = tail
        start = len(last)
        while start and last[start - 1].role == "tool":
            start -= 1
        if start:
            asking = last[start - 1]
            if asking.role != "assistant":
                return None, (), ()
            asked = asking.tool_calls
            if not asked:
                return None, (), ()
            return asking, asked, last[start:]
    return _reply_plain(transcript)


def _last_reply_plain(  # pyright: ignore[reportUnusedFunction]
    transcript: Sequence[Message],
) -> tuple[Message | None, Sequence[Message]]:
    """``_reply_plain``'s reply and answers."""
    asking, _, answered = _reply_plain(transcript)
    return asking, answered


def _reply_plain(transcript: Sequence[Message]) -> tuple[Message | None, Any, Sequence[Message]]:
    """``_reply``, one index at a time from the end."""
    start = _reply_at(transcript)
    asking = transcript[start - 1] if start else None
    if asking is None or asking.role != "assistant":
        return None, (), ()
    asked = asking.tool_calls
    if not asked:
        return None, (), ()
    return asking, asked, transcript[start:]


def _exact_reply(
    transcript: Sequence[Message],
) -> tuple[Message | None, Any, Sequence[Message]] | None:
    """``_reply_plain(transcript)`` for a reply that is exactly a ``Message`` whose
    ``tool_calls`` is exactly a tuple (or no reply); ``None``, with its ``tool_calls``
    not asked its truth, for any other reply (the plain way judges it)."""
    start = _reply_at(transcript)
    asking = transcript[start - 1] if start else None
    if asking is None or asking.role != "assistant":
        return None, (), ()
    if type(asking) is not Message:
        return None
    asked = asking.tool_calls
    if type(asked) is not tuple:
        return None
    if not asked:
        return None, (), ()
    return asking, asked, transcript[start:]


def _reply_at(transcript: Sequence[Message]) -> int:
    """Where the tool messages ``transcript`` ends with start, one index at a time."""
    start = len(transcript)
    while start and transcript[start - 1].role == "tool":
        start -= 1
    return start


def _answers(transcript: Sequence[Message], calls: tuple[ToolRequest, ...]) -> bool:
    """Whether ``transcript`` ends with one tool message for each of ``calls``, in order."""
    told = transcript[len(transcript) - len(calls) :] if calls else ()
    return len(told) == len(calls) and all(
        message.role == "tool" and message.tool_call_id == call.id
        for message, call in zip(told, calls, strict=True)
    )


def _same_calls(now: tuple[object, ...], was: tuple[ToolRequest, ...]) -> bool:
    """Whether ``now`` holds the very same request objects as ``was``, in order."""
    return len(now) == len(was) and all(a is b for a, b in zip(now, was, strict=True))


# What the functions _pair_code makes read as globals.
_PAIR_NAMES: dict[str, Any] = {
    **_CHECK_NAMES,
    "AttributeError": AttributeError,
    "_Ticket": _Ticket,
    "_VIA_TRANSITION": _VIA_TRANSITION,
    "ApprovedCall": ApprovedCall,
    "Transcript": Transcript,
    "Message": Message,
    "_order_problem": _order_problem,
    "_exact_reply": _exact_reply,
    "_all_accounted": _all_accounted,
    "MESSAGES_CHUNK": _CHUNK,
}
