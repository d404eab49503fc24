"""The loop governor: the one authority every check of a run's loop goes through.

It answers each hook with a :class:`Decision` carrying a :class:`Verdict`:

- ``begin_step`` (may the run take another planning step?): pending finalize,
  step caps, budgets and the deadline, and the agent's own checks;
- ``before_action`` (run this tool call, or suppress it?): the budget for the
  call, then duplicates in four tiers, cheapest first: exact (the same bytes),
  canonical (the same call once spelled one way), semantic (nearly the same as a
  call that failed or was refused, with the same identifiers and amounts) and cycle
  (a block of calls repeating while it adds nothing new);
- ``after_action`` (what did the result add?): convergence (a result that repeats
  the evidence gains nothing; three such steps in a row is a plateau) and the
  agent's own completion signal, either of which finalizes the run.

The governor is configuration and holds no memory: everything it remembers is in
:class:`LoopState`, a slotted frozen class carried by every phase, so a checkpoint of
the phase carries it too. No check walks the run's actions, so each costs the same
at any length of the run: the index of a line of states (``_Line``) is kept up as
actions are recorded and settled; exact and canonical checks are look-ups in it; the
semantic tier looks up the failed calls of the same tool and anchors and compares
their signatures (made once per call); the cycle check reads the last
``cycle_window`` actions and the convergence check compares the new result's
trigram mask with the masks the evidence window's results keep. The actions are an
:class:`ActionLog`, which records and settles by sharing all but one chunk.
"""

from __future__ import annotations

import bisect
import copy
import math
import numbers
import warnings
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from functools import lru_cache
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, Self, final

import attrs
from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic_core import core_schema

from . import _json
from ._actions import CHUNK, EMPTY_LOG, ActionLog, ActionRecord, _MakingRecord, _record
from ._budget import Budget, Spend, admits_call
from ._errors import SetupError
from ._fast._making import making_class
from ._grams import GramMasks
from ._similarity import (
    LEXICAL,
    MaskSigned,
    SignedSimilarity,
    Similarity,
    call_anchors,
    configured_similarity,
    lexical_similarity,
    signer_of,
    trigram_similarity,
)
from ._tools import ReadCall, ReadTool, WriteCall, WriteTool, _sha256

__all__ = [
    "ActionRecord",
    "Check",
    "Decision",
    "LoopGovernor",
    "LoopState",
    "SignedSimilarity",
    "Similarity",
    "Verdict",
    "VerdictRecord",
    "_hold_free",
    "lexical_similarity",
    "trigram_similarity",
]

Hook = Literal["begin_step", "before_action", "after_action"]

# How much of a result the loop state keeps: enough to tell the model what it got.
_RESULT_CHARS = 2_000


class Verdict(StrEnum):
    """What the governor says about a step or an action."""

    CONTINUE = "continue"
    SUPPRESS = "suppress"  # skip this action, keep going, tell the model why
    FINALIZE = "finalize"  # answer now from what the run has
    ABORT = "abort"  # stop without an answer
    PAUSE = "pause"  # wait for a person


@final
@attrs.frozen
class Decision:
    """A verdict with its reason (for people and logs) and words for the model.

    ``check`` names what decided: ``exact``, ``canonical``, ``semantic``,
    ``cycle``, ``plateau``, ``complete``, ``step_cap``, ``tool_iterations``,
    ``budget`` or a custom check's name.
    """

    verdict: Verdict
    reason: str = ""
    message: str = ""
    check: str = ""


CONTINUE = Decision(Verdict.CONTINUE)


# A Decision being made by _suppress: see making_class.
_MakingDecision = making_class(Decision)


def _suppress(reason: str, message: str, check: str) -> Decision:
    """``Decision(Verdict.SUPPRESS, reason, message, check)``, made without its frame
    (no converter, no validator: its slots stored as object stores them, then its class)."""
    making: Any = object.__new__(_MakingDecision)
    making.verdict = Verdict.SUPPRESS
    making.reason = reason
    making.message = message
    making.check = check
    making.__class__ = Decision
    made: Decision = making
    return made


_SETTLED = frozenset({"ok", "failed", "refused"})
_OUTCOME = attrgetter("outcome")
_TOOL = attrgetter("tool")
_NOT_PENDING = "pending".__ne__


# The positions of one key or call id, ascending: one int, or a list when there are more.
_Positions = int | list[int]


def _insert(index: dict[str, _Positions], name: str, position: int) -> None:
    """Add ``position`` to ``name``'s positions (kept ascending, each once)."""
    found = index.get(name)
    if found is None:
        index[name] = position
    elif isinstance(found, int):
        if found != position:
            index[name] = [found, position] if found < position else [position, found]
    elif found[-1] < position:
        found.append(position)  # in order: nearly always
    else:
        at = bisect.bisect_left(found, position)
        if found[at] != position:
            found.insert(at, position)


def _below(found: _Positions, size: int) -> Sequence[int]:
    """The positions in ``found`` below ``size``, ascending."""
    if isinstance(found, int):
        return (found,) if found < size else ()
    if found[-1] < size:
        return found
    return found[: bisect.bisect_left(found, size)]


# How many overlays a line may stand on (see _Line.branch): past this, a branch indexes
# its own actions once, flat, so that a look-up reads at most this many lines' dicts.
_DEPTH = 8


@final
class _Line:
    """Where each key (exact and canonical) and each call id sits in a line of states.

    A line is a state, the state it recorded an action into, the one that one recorded
    into, and so on, with their settled and otherwise evolved copies: at a position
    they all share, they hold the same key and call id. The index covers the first
    ``size`` actions of the line's latest state; an older state reads only the
    positions below its own length. A state that records while the index covers more
    than its own actions starts a line of its own (a branch), so positions ascend.

    A branch is an overlay (:meth:`branch`): it holds only what is recorded, settled and
    failed in it from the branch point on, and reads the rest from the line it branched
    from (``parent``), capped at the branch point: the first ``base`` positions and the
    first ``base_rank`` failures, which the branch shares with every state of that line.
    So a branch costs the same at any length of the run: nothing is walked or made again.

    ``keys`` holds the positions of settled actions only (settled in some state of the
    line), so that a look-up from the end stops at the latest settled action after
    passing over the pending ones alone, never over a run's suppressed calls. A position
    below ``base`` settled in a branch is noted in the parent's (settled in some state of
    that line too): each line's own keys and calls are at ``base`` and above.

    ``tool`` and ``run`` are the cycle check's: every action of the line at ``run`` and
    after it is a call of ``tool`` (an exact ``str``; ``None``: not known), kept up as
    actions are added, so that a read of the same tool whose window starts at ``run`` or
    after it is answered without reading the window (one tool only is no cycle).

    ``alike`` is the semantic tier's index: the failed and refused calls by tool and
    anchors (:func:`call_anchors`), each as its rank among the failures and its position.
    The line's states' failures are each a prefix of the line's ``failures`` (a state that
    fails a call with fewer failures than the line has starts a line of its own), so a
    state's own are those of rank below its count. ``signed`` keeps each failed call's
    signature, by the similarity that made it, made when it is first compared; the
    lexical similarity signs with the trigram vocabulary of the line's root (``lexical``).
    """

    __slots__ = (
        "alike",
        "base",
        "base_rank",
        "calls",
        "depth",
        "failing",
        "failures",
        "keys",
        "lexical",
        "parent",
        "run",
        "signed",
        "size",
        "tool",
    )

    def __init__(self) -> None:
        self.size = 0
        self.keys: dict[str, _Positions] = {}
        self.calls: dict[str, _Positions] = {}
        self.failures = 0
        self.alike: dict[tuple[str, tuple[str, ...]], tuple[list[int], list[int]]] = {}
        # The tools of those calls: a call of another tool has no anchors to look up.
        self.failing: set[str] = set()
        self.signed: dict[object, dict[int, object]] = {}
        self.lexical: MaskSigned | None = None
        # The line this one branched from (None: a line of its own), what of it is shared.
        self.parent: _Line | None = None
        self.base = 0
        self.base_rank = 0
        self.depth = 0
        # The cycle check's: the actions from ``run`` on are calls of ``tool``.
        self.tool: str | None = None
        self.run = 0

    @classmethod
    def of(cls, actions: Sequence[ActionRecord], failures: tuple[int, ...]) -> _Line:
        """The index of ``actions`` and ``failures`` (a restored state's), made from them."""
        line = cls()
        for position, action in enumerate(actions):
            line.add(position, action)
            if action.outcome in _SETTLED:
                line.settled(position, action)
        for rank, position in enumerate(failures):
            line.failed(rank, position, actions[position])
        return line

    @classmethod
    def branch(
        cls, parent: _Line, actions: Sequence[ActionRecord], failures: tuple[int, ...]
    ) -> _Line:
        """The index of a state of ``parent``'s line (``actions`` and ``failures``, a
        prefix of what ``parent`` covers) for a branch of its own: an overlay on
        ``parent`` capped at the state's length and failures, made without reading them."""
        size, rank = len(actions), len(failures)
        if not size:  # nothing shared (a run from a shared ``LoopState()``): a line of its own
            return cls()
        # A line whose own part the branch does not reach is passed over.
        while parent.parent is not None and size <= parent.base and rank <= parent.base_rank:
            parent = parent.parent
        if parent.depth >= _DEPTH:
            return cls.of(actions, failures)
        line = cls()
        line.parent, line.base, line.base_rank = parent, size, rank
        line.size, line.failures, line.depth = size, rank, parent.depth + 1
        line.failing = set(parent.failing)  # a superset of what it reads: only a filter
        return line

    def _below(self, position: int) -> _Line:
        """The line below this one whose own part holds ``position`` (below ``base``)."""
        line = self
        while position < line.base:
            parent = line.parent
            assert parent is not None  # base > 0: a branch, which has one
            line = parent
        return line

    def add(self, position: int, action: ActionRecord) -> None:
        """Take in the action recorded at ``position`` (the next one)."""
        self.size = position + 1
        _insert(self.calls, action.call_id, position)
        tool = action.tool
        if type(tool) is not str or tool != self.tool:  # another tool: a run starts here
            self.tool = tool if type(tool) is str else None
            self.run = position

    def settled(self, position: int, action: ActionRecord) -> None:
        """Note that the action at ``position`` is settled, under its keys."""
        line = self if position >= self.base else self._below(position)
        _insert(line.keys, action.exact, position)
        if action.key != action.exact:
            _insert(line.keys, action.key, position)

    def failed(self, rank: int, position: int, action: ActionRecord) -> None:
        """Note that the action at ``position`` failed (or was refused), the failure ``rank``."""
        self.failures = rank + 1
        self.failing.add(action.tool)
        found = self.alike.get((action.tool, call_anchors(action.text)))
        if found is None:
            self.alike[action.tool, call_anchors(action.text)] = ([rank], [position])
        else:
            found[0].append(rank)
            found[1].append(position)

    def alike_positions(
        self, key: tuple[str, tuple[str, ...]], count: int, oldest: int
    ) -> list[int]:
        """The positions of the failures with ``key`` (tool and anchors) whose rank is in
        ``oldest .. count - 1``, latest first."""
        found: list[int] = []
        line: _Line | None = self
        while line is not None and count > oldest:
            entry = line.alike.get(key)
            if entry is not None:
                ranks, positions = entry
                for at in range(bisect.bisect_left(ranks, count) - 1, -1, -1):
                    if ranks[at] < oldest:
                        return found
                    found.append(positions[at])
            if line.base_rank < count:
                count = line.base_rank
            line = line.parent
        return found

    def signature(self, signer: SignedSimilarity[Any], position: int, text: str) -> object:
        """The signature of the failed call at ``position`` (whose text is ``text``)."""
        # The same call in the line below, when it is shared: signed there.
        line = self if position >= self.base else self._below(position)
        signed = line.signed.get(signer)
        if signed is None:
            signed = line.signed[signer] = {}
        found = signed.get(position)
        if found is None:
            found = signed[position] = signer.signature(text)
        return found

    def lexical_signer(self) -> SignedSimilarity[Any]:
        """The lexical similarity signing with the trigram vocabulary of this line's root
        (shared by its branches, whose signatures are compared with those made there)."""
        line = self
        while line.parent is not None:
            line = line.parent
        signer = line.lexical
        if signer is None:
            signer = line.lexical = MaskSigned()
        return signer

    def latest(self, key: str, actions: Sequence[ActionRecord]) -> ActionRecord | None:
        """The latest action of ``actions`` settled with this key."""
        found = self.keys.get(key)
        if found is None and self.parent is None:  # nearly always, for a new call
            return None
        size = len(actions)
        line = self
        while True:
            if found is not None:
                positions = _below(found, size)
                # Each position was settled in some state of the line: the walk passes
                # over only the actions settled in another state and not (or not yet) in
                # this one.
                for at in range(len(positions) - 1, -1, -1):
                    action = actions[positions[at]]
                    if action.outcome in _SETTLED:
                        return action
            parent = line.parent
            if parent is None:
                return None
            if line.base < size:
                size = line.base
            line = parent
            found = line.keys.get(key)

    def call(self, call_id: str, size: int) -> int | None:
        """The position of the latest action with ``call_id`` among the first ``size``."""
        line = self
        while True:
            found = line.calls.get(call_id)
            if found is not None:
                positions = _below(found, size)
                if positions:
                    return positions[-1]
            parent = line.parent
            if parent is None:
                return None
            if line.base < size:
                size = line.base
            line = parent


class VerdictRecord(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """A verdict other than continue, as the run's history shows it."""

    step: int
    hook: Hook
    verdict: Verdict
    check: str
    reason: str


class _LoopFields(BaseModel, frozen=True, extra="forbid", defer_build=True, title="LoopState"):
    """What ``LoopState(...)``, ``model_validate`` and a checkpoint's loader check a loop
    memory's values by: the pydantic model ``LoopState`` was (the same fields, types,
    lax conversions, refusals and error texts, titled ``LoopState``). Its instances live
    only while a ``LoopState`` is made from them; ``model_dump`` writes through it."""

    actions: ActionLog = EMPTY_LOG
    evidence: tuple[str, ...] = ()
    tool_iterations: int = 0
    low_gain_streak: int = 0
    finalize: str = ""
    paused: str = ""
    verdicts: tuple[VerdictRecord, ...] = ()
    flags: tuple[str, ...] = ()
    failures: tuple[int, ...] = ()


@attrs.define(frozen=True, init=False, eq=False, weakref_slot=False, getstate_setstate=False)
class LoopState:
    """The governor's memory of one run; immutable, carried by every phase.

    ``finalize`` holds the reason of a finalize verdict reached after an action,
    for the next step to act on; ``paused`` the reason the run waits for a person.

    A slotted frozen class, not a pydantic model. ``LoopState(...)`` (and
    ``attrs.evolve``, ``model_validate`` and ``model_copy``) checks its values as the
    pydantic model it was did (the same types, conversions and refusals, a
    ``pydantic.ValidationError`` titled ``LoopState``); ``model_dump`` and
    ``model_dump_json`` write what that model wrote, so checkpoints are unchanged.
    """

    actions: ActionLog = EMPTY_LOG
    evidence: tuple[str, ...] = ()
    tool_iterations: int = 0
    low_gain_streak: int = 0
    finalize: str = ""
    paused: str = ""
    verdicts: tuple[VerdictRecord, ...] = ()
    flags: tuple[str, ...] = ()
    # Positions of the actions that failed or were refused (the semantic tier's window).
    failures: tuple[int, ...] = ()

    # Where each key and call id sits in ``actions`` (see _Line); shared by a state
    # and its successors. ``None``: not made yet (a restored state makes it on first use).
    _index: _Line | None = attrs.field(default=None, init=False, repr=False)
    # The trigram bitmasks of the semantic and convergence checks (a cache), shared the
    # same way.
    _grams: GramMasks | None = attrs.field(default=None, init=False, repr=False)

    model_fields: ClassVar[dict[str, Any]]

    if TYPE_CHECKING:  # the constructor as type checkers read it (the fields' types)

        def __init__(
            self,
            *,
            actions: ActionLog = EMPTY_LOG,
            evidence: tuple[str, ...] = (),
            tool_iterations: int = 0,
            low_gain_streak: int = 0,
            finalize: str = "",
            paused: str = "",
            verdicts: tuple[VerdictRecord, ...] = (),
            flags: tuple[str, ...] = (),
            failures: tuple[int, ...] = (),
        ) -> None: ...

    else:

        def __init__(self, /, **values: Any) -> None:
            _fill(self, _LoopFields(**values).__dict__, None, None)

    @classmethod
    def model_validate(cls, value: Any) -> Self:
        """A state from a dict of its fields, checked as ``LoopState(...)`` checks them;
        a ``LoopState`` (of this class) is given back as it is, as pydantic gives it."""
        if isinstance(value, cls):
            return value
        made: Self = _new(cls)
        _fill(made, _LoopFields.model_validate(value).__dict__, None, None)
        return made

    @classmethod
    def model_validate_json(cls, text: str | bytes | bytearray) -> Self:
        """A state from the JSON ``model_dump_json`` writes, checked as ``model_validate``."""
        made: Self = _new(cls)
        _fill(made, _LoopFields.model_validate_json(text).__dict__, None, None)
        return made

    @classmethod
    def model_construct(cls, **values: Any) -> Self:
        """A state of these values, unchecked (as pydantic's ``model_construct``: for
        values known valid, and for tests); the fields not given take their defaults."""
        unknown = set(values) - _LOOP_FIELD_SET
        if unknown:  # pydantic kept them as extras; a slotted class has nowhere to
            raise TypeError(f"LoopState has no field {', '.join(sorted(unknown))}")
        made: Self = _new(cls)
        _fill(made, {**_LOOP_DEFAULTS, **values}, None, None)
        return made

    def _fields(self) -> dict[str, Any]:
        """Its fields, in their order, as a new dict."""
        return {name: getter(self) for name, getter in _LOOP_GETTERS}

    def model_dump(self, **options: Any) -> dict[str, Any]:
        """Its fields as the pydantic model it was dumped them (the same options)."""
        return _LoopFields.model_construct(**self._fields()).model_dump(**options)

    def model_dump_json(self, **options: Any) -> str:
        """Its fields as JSON, as the pydantic model it was wrote them (the same options)."""
        return _LoopFields.model_construct(**self._fields()).model_dump_json(**options)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy (a ``LoopState`` itself), its ``update`` checked as ``LoopState(...)``
        checks values (the pydantic model took them unchecked). One with other
        ``actions`` or ``failures`` indexes them anew; the very log and failures this
        state holds are not other: the copy shares this state's index (it branches from it
        when it records). ``deep``: its fields deep-copied, its caches made anew."""
        values = self._fields()
        if deep:
            values = copy.deepcopy(values)
        if update:
            checked = _LoopFields(**{**values, **update}).__dict__
            for name in update:  # the fields not updated: this state's own (valid) objects
                values[name] = checked[name]
        made: Self = _new(type(self))
        same = (
            not deep and values["actions"] is self.actions and values["failures"] is self.failures
        )
        _fill(made, values, self._index if same else None, None if deep else self._grams)
        return made

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # In a pydantic model's field: validated by model_validate (a state as it is, a
        # dict checked), written as model_dump writes it in the model's mode.
        return core_schema.no_info_plain_validator_function(
            cls.model_validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _dump_in_mode, info_arg=True
            ),
        )

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle or a copy keeps: its fields (the caches are made anew)."""
        return self._fields()

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A pickle's or a copy's state: its fields as kept, its caches not made yet."""
        _fill(self, state, None, None)

    def __eq__(self, other: object) -> bool:
        """Equal when every field is: the private index is only a cache of ``actions``."""
        if not isinstance(other, LoopState):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        """The hash of its fields (as the frozen pydantic model's)."""
        return hash(tuple(getter(self) for _, getter in _LOOP_GETTERS))

    def _evolve(self, *, _index: _Line | None = None, **changes: Any) -> LoopState:
        """This state with ``changes`` (known valid: made by the library); it shares the
        private index (or takes ``_index``). A ``LoopState`` itself, whatever this one is."""
        values = self._fields()
        values.update(changes)
        made: LoopState = _new(LoopState)
        _fill(made, values, self._index if _index is None else _index, self._grams)
        return made

    def _line(self) -> _Line:
        line: _Line | None = self._index
        if line is None or line.size < len(self.actions):
            line = _Line.of(self.actions, self.failures)
            object.__setattr__(self, "_index", line)
        return line

    def _call_free(self, call_id: str) -> bool:
        actions: Any = self.actions
        size = (
            len(actions._chunks) * CHUNK + len(actions._tail)
            if type(actions) is ActionLog
            else len(actions)
        )
        line: _Line | None = self._index
        if line is None or line.size < size:
            line = self._line()
        if line.parent is None and call_id not in line.calls:
            return True
        return line.call(call_id, size) is None

    def _masks(self) -> GramMasks:
        masks: GramMasks | None = self._grams
        if masks is None:
            masks = GramMasks()
            object.__setattr__(self, "_grams", masks)
        return masks

    def earlier(self, key: str) -> ActionRecord | None:
        """The latest settled action (not pending or suppressed) with this key."""
        return self._line().latest(key, self.actions)

    def record(self, action: ActionRecord, *, iteration: bool = True) -> LoopState:
        """A state with ``action`` added (a tool iteration unless told otherwise).

        A ``LoopState`` itself (by exact type) holding an ``ActionLog`` and an ``int``
        count and an index (a ``_Line`` itself) that covers exactly its actions (a run
        recording its next call, nearly always), is done here in one frame: what
        ``_recorded`` makes (the log's append, ``_evolve`` and the index's ``add``),
        without their frames.
        Anything else goes through ``_recorded``.
        """
        if type(self) is LoopState:  # its slots read (made by model_construct: any values)
            actions: Any = self.actions
            count: Any = self.tool_iterations
            line: Any = self._index
            if type(actions) is ActionLog and type(count) is int and type(line) is _Line:
                chunks, tail = actions._chunks, actions._tail
                position = len(chunks) * CHUNK + len(tail)  # ActionLog.__len__
                if line.size == position:
                    # ActionLog.appended, its _of written out (the class defines no __new__).
                    log: ActionLog = _new(ActionLog)
                    if len(tail) < CHUNK:
                        log._chunks, log._tail = chunks, tail + (action,)  # noqa: RUF005
                        log._grown = (tail, log._tail)
                    else:
                        log._chunks, log._tail = chunks + (tail,), (action,)  # noqa: RUF005
                        log._grown = None
                    # _evolve's state: made as its making class, every slot stored as
                    # object stores it (the two changes in their places), then its class.
                    made: Any = _new(_MakingLoop)
                    made.actions = log
                    made.evidence = self.evidence
                    made.tool_iterations = count + (1 if iteration else 0)
                    made.low_gain_streak = self.low_gain_streak
                    made.finalize = self.finalize
                    made.paused = self.paused
                    made.verdicts = self.verdicts
                    made.flags = self.flags
                    made.failures = self.failures
                    made._index = line
                    made._grams = self._grams
                    made.__class__ = LoopState
                    # _Line.add: the size first, then the call id's position.
                    line.size = position + 1
                    calls = line.calls
                    call_id = action.call_id
                    if calls.get(call_id) is None:  # _insert's first case, nearly always
                        calls[call_id] = position
                    else:
                        _insert(calls, call_id, position)
                    tool = action.tool  # the cycle check's run of one tool
                    if type(tool) is not str or tool != line.tool:
                        line.tool = tool if type(tool) is str else None
                        line.run = position
                    evolved: LoopState = made
                    return evolved
        return self._recorded(action, iteration)

    def _recorded(self, action: ActionRecord, iteration: bool) -> LoopState:
        """What ``record`` makes, for any state (its plain path)."""
        position = len(self.actions)
        line = self._index
        if line is None or line.size < position:  # not made yet (a restored state)
            line = _Line.of(self.actions, self.failures)
        elif line.size != position:
            # A later state of this line recorded already: a branch (the default
            # ``LoopState()``, shared by every run that starts from it, makes one), which
            # reads what it shares with this line from this line's index.
            line = _Line.branch(line, self.actions, self.failures)
        actions = self.actions.appended(action)
        evolved = self._evolve(
            actions=actions,
            tool_iterations=self.tool_iterations + (1 if iteration else 0),
            _index=line,
        )
        line.add(position, action)
        return evolved

    def settle(
        self,
        call_id: str,
        outcome: Literal["ok", "failed", "refused"],
        result: str,
        gain: float | None = None,
    ) -> LoopState:
        """A state where the action ``call_id`` ended with ``outcome``."""
        changes = self._settled(call_id, outcome, result, gain)
        return self if changes is None else self._evolve(**changes)

    def _settled(
        self,
        call_id: str,
        outcome: Literal["ok", "failed", "refused"],
        result: str,
        gain: float | None,
    ) -> dict[str, Any] | None:
        """The changes that settle the action ``call_id``; ``None`` if there is no such action."""
        actions = self.actions
        line = self._line()
        tail = actions.tail
        if tail and tail[-1].call_id == call_id:
            # The latest action (nearly always: a run settles the call it just recorded)
            # is the latest with this call id: no index look-up.
            position, action = len(actions) - 1, tail[-1]
        else:
            found = line.call(call_id, len(actions))
            if found is None:
                return None
            position, action = found, actions[found]
        settled = _settled_record(action, outcome, result, gain)
        changed = actions.replaced(position, settled)
        line.settled(position, action)
        if outcome == "ok":
            return {"actions": changed}
        rank = len(self.failures)
        failures = self.failures + (position,)  # noqa: RUF005
        if rank == line.failures:
            line.failed(rank, position, settled)
            return {"actions": changed, "failures": failures}
        # Another state of the line failed a call first: the failures part ways (a branch,
        # which shares this state's actions and its failures before this one).
        branch = _Line.branch(line, changed, self.failures)
        branch.failed(rank, position, settled)
        return {"actions": changed, "failures": failures, "_index": branch}

    def _observed(
        self, call_id: str, result: str, gain: float, evidence: tuple[str, ...], streak: int
    ) -> LoopState | None:
        """``settle(call_id, "ok", result, gain)`` with ``evidence`` and ``low_gain_streak``
        set, made in one step, when the action is the latest (nearly always: a run settles
        the call it just recorded), this state a ``LoopState`` itself, its log an
        ``ActionLog`` itself and its index
        ``None`` or a ``_Line`` (made here, as ``_settled`` makes it, when it does not
        cover the action); ``None`` otherwise (the caller takes ``_settled`` and
        ``_evolve``, whose result this is)."""
        if type(self) is not LoopState:
            return None
        return _observed_in(self, call_id, result, gain, evidence, streak)

    def noted(self, step: int, hook: Hook, decision: Decision, **changes: Any) -> LoopState:
        """A state that remembers ``decision`` (a verdict other than continue)."""
        record = VerdictRecord(
            step=step,
            hook=hook,
            verdict=decision.verdict,
            check=decision.check,
            reason=decision.reason,
        )
        return self._evolve(verdicts=self.verdicts + (record,), **changes)  # noqa: RUF005


_LOOP_FIELDS = tuple(a.name for a in attrs.fields(LoopState) if a.init)
# Its fields' names and defaults (pydantic's ``model_fields``, kept for callers).
LoopState.model_fields = _LoopFields.model_fields
_LOOP_DEFAULTS: dict[str, Any] = {a.name: a.default for a in attrs.fields(LoopState) if a.init}
_LOOP_GETTERS = tuple((name, attrgetter(name)) for name in _LOOP_FIELDS)
# Its slots' descriptors' stores, every field then the two caches, for _fill.
_LOOP_SETTERS = tuple(
    (name, LoopState.__dict__[name].__set__) for name in (*_LOOP_FIELDS, "_index", "_grams")
)
assert tuple(_LoopFields.model_fields) == _LOOP_FIELDS
# ActionLog.__new__ (object's: neither it nor its bases define one), for record.
_new = object.__new__


def _fill(
    made: LoopState, values: Mapping[str, Any], index: _Line | None, grams: GramMasks | None
) -> None:
    """Store ``values`` (every field) and the two caches in ``made``'s slots."""
    setters = _LOOP_SETTERS
    for name, store in setters[:-2]:
        store(made, values[name])
    setters[-2][1](made, index)
    setters[-1][1](made, grams)


def _dump_in_mode(state: LoopState, info: core_schema.SerializationInfo) -> dict[str, Any]:
    return state.model_dump(mode=info.mode)


_LOOP_FIELD_SET = frozenset(_LOOP_FIELDS)
# A LoopState being made by record and _observed (see making_class): its slots stored as
# object stores them, then its class.
_MakingLoop: Any = making_class(LoopState)


def _observed_in(
    loop: LoopState,
    call_id: str,
    result: str,
    gain: float,
    evidence: tuple[str, ...],
    streak: int,
) -> LoopState | None:
    """``LoopState._observed`` for ``loop``, a ``LoopState`` itself."""
    actions: Any = loop.actions
    line: Any = loop._index
    grams = loop._grams
    if type(actions) is not ActionLog:
        return None
    # The log's tail and length, and its copy with the last record replaced, as
    # ActionLog's tail, __len__ and replaced make them (by their code, without their
    # frames).
    tail = actions._tail
    if not tail or tail[-1].call_id != call_id:
        return None
    chunks = actions._chunks
    position = len(chunks) * CHUNK + len(tail) - 1
    # _line()'s index, read without its frames while it covers the actions.
    if line is None or (type(line) is _Line and line.size <= position):
        line = loop._line()  # made here if it does not cover the actions (as _settled)
    elif type(line) is not _Line:
        return None
    action = tail[-1]
    # _settled_record(action, "ok", result, gain), without its frame nor _record's
    # (its body: the record's slots stored as object stores them, then its class).
    making: Any = _new(_MakingRecord)
    making.call_id = action.call_id
    making.tool = action.tool
    making.effect = action.effect
    making.exact = action.exact
    making.key = action.key
    making.text = action.text
    making.outcome = "ok"
    making.result = result[:_RESULT_CHARS]
    making.gain = gain
    making.__class__ = ActionRecord
    settled: ActionRecord = making
    # ActionLog._of(chunks, ...), without its frame.
    log = _new(ActionLog)
    log._chunks = chunks
    # The tail before the action was appended, when the log says it holds the others
    # (its _grown: this very tail, made from one a record shorter): one tuple made, not
    # a slice and a tuple.
    grown: Any = actions._grown
    if (
        type(grown) is tuple
        and len(grown) == 2
        and grown[1] is tail
        and type(before := grown[0]) is tuple
        and len(before) + 1 == len(tail)
    ):
        log._tail = before + (settled,)  # noqa: RUF005
    else:
        log._tail = tail[:-1] + (settled,)  # noqa: RUF005
    log._grown = (tail, log._tail)
    if position >= line.base:
        # line.settled(position, action), without its frame (nor _insert's for a key
        # not seen before: nearly always).
        keys, exact, key = line.keys, action.exact, action.key
        if exact in keys:
            _insert(keys, exact, position)
        else:
            keys[exact] = position
        if key != exact:
            if key in keys:
                _insert(keys, key, position)
            else:
                keys[key] = position
    else:
        line.settled(position, action)
    # _evolve's state, without its frame: made as its making class, every slot stored
    # (the three changes in their places), then its class.
    made: Any = _new(_MakingLoop)
    made.actions = log
    made.evidence = evidence
    made.tool_iterations = loop.tool_iterations
    made.low_gain_streak = streak
    made.finalize = loop.finalize
    made.paused = loop.paused
    made.verdicts = loop.verdicts
    made.flags = loop.flags
    made.failures = loop.failures
    made._index = line
    made._grams = grams
    made.__class__ = LoopState
    observed: LoopState = made
    return observed


class Check(Protocol):
    """An agent's own check at the start of each step; may pause, finalize or abort."""

    def __call__(self, loop: LoopState, ctx: Any) -> Decision:
        """The verdict for the next step (``CONTINUE`` to stay out of the way)."""
        ...


CompletionSignal = Callable[[LoopState, Any], str | None]


def _fraction(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise SetupError(f"{attribute.name} must be between 0 and 1, got {value}")


def _positive_or_none(
    _: object, attribute: attrs.Attribute[float | None], value: float | None
) -> None:
    if value is not None and not value > 0:
        raise SetupError(
            f"{attribute.name} must be more than 0 (or None for no baseline), got {value}"
        )


def _factor(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 1:
        raise SetupError(f"{attribute.name} must be 1 or more, got {value}")


def _at_least(minimum: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_: object, attribute: attrs.Attribute[int], value: int) -> None:
        if value < minimum:
            raise SetupError(f"{attribute.name} must be at least {minimum}, got {value}")

    return check


@lru_cache(maxsize=256)
def _case_insensitive(model: type[BaseModel]) -> tuple[str, ...]:
    """The string fields of an arguments model marked ``case_insensitive``."""
    found = []
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra
        if isinstance(extra, dict) and extra.get("case_insensitive") is True:
            found.append(name)
    return tuple(found)


def _was(outcome: str) -> str:
    return "failed" if outcome == "failed" else f"was {outcome}"


def _quote(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _lexical_named(similarity: Similarity | None) -> Similarity | None:
    """``similarity``, with the deprecated name of the lexical one taken as the new."""
    if similarity is trigram_similarity:
        warnings.warn(
            "trigram_similarity is now lexical_similarity (the same function); "
            "pass LoopGovernor(similarity=lexical_similarity)",
            DeprecationWarning,
            stacklevel=3,
        )
        return lexical_similarity
    return similarity


def _lexical_evidence(similarity: Similarity) -> Similarity:
    """The convergence check's ``similarity``, the deprecated lexical name taken as the new."""
    named = _lexical_named(similarity)
    return lexical_similarity if named is None else named


def _similarity_value(similarity: object, value: object) -> float:
    """A user's similarity's answer as a float, refused unless it is a finite number.

    A NaN or an infinity would settle an action with a gain no checkpoint can hold (a
    record's gain is finite) and that no plateau test ever finds below its threshold.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"the evidence similarity {similarity!r} returned {value!r}: a similarity "
            "returns a number (1.0 for texts the same, less for texts less alike)"
        )
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(
            f"the evidence similarity {similarity!r} returned {value!r}: a similarity "
            "returns a finite number (1.0 for texts the same, less for texts less alike); "
            "fix the similarity, or use the default, lexical_similarity"
        )
    return number


# The Budget a drive found with no limit at its start (a Budget itself, its four limits
# None when read: a frozen model refuses nothing then or later), or None. The library's
# own begin_step and before_action do not read this very object's limits (by identity;
# still of class Budget exactly): any other budget (one with a limit, a subclass, a copy,
# another equal Budget) is read as before. Written only by _hold_free, which checks what
# it stores; one slot for the process: a run whose free budget another run's write
# displaced reads its limits again (the plain way), never skips one.
_free_budget: Budget | None = None


def _hold_free(free: object, budget: object) -> None:
    """Keep ``free`` (a drive's budget found with no limit at its start: checked here
    again, a ``Budget`` itself with its four limits ``None``) as the free budget; ``free``
    ``None`` (the drive found ``budget`` limited, or is no drive's) forgets ``budget``
    if it is the one kept, so its limits are read again."""
    global _free_budget
    held = free
    if (
        type(held) is Budget
        and held.wall_clock is None
        and held.tool_calls is None
        and held.tokens is None
        and held.cost is None
    ):
        _free_budget = held
    elif _free_budget is budget or _free_budget is free:
        _free_budget = None


@final
@attrs.frozen(kw_only=True)
class LoopGovernor:
    """The checks of a run's loop, and their thresholds.

    ``similarity`` is the semantic tier's (default ``None``: the one configured by the
    ``STATEMACHINE_SIMILARITY`` variable, ``lexical`` (:func:`lexical_similarity`) unless
    it says ``embedding`` (an ``EmbeddingSimilarity``, the ``embeddings`` extra, which
    knows paraphrases); read at the governor's first semantic comparison, then kept) and
    ``evidence_similarity`` the convergence check's (default: lexical too);
    ``semantic_threshold`` is how similar a call must be to a failed or refused one of
    the same tool and the same anchors (identifiers and amounts, compared exactly: see
    :func:`call_anchors`) to be suppressed; a cycle is a block of 2 or more calls repeated twice
    within ``cycle_window`` calls whose latest repetition gained less than
    ``cycle_gain``; a plateau is ``plateau_steps`` results in a row each gaining
    less than ``plateau_gain`` over the last ``evidence_window`` results.
    ``completion`` is the agent's own "done" signal (a reason, or ``None``);
    ``checks`` run at the start of every step. ``baseline_steps`` is how many
    steps a run usually takes: a run past ``baseline_factor`` times that is
    flagged (a flag on the run, never a stop).
    """

    similarity: Similarity | None = attrs.field(default=None, converter=_lexical_named)
    evidence_similarity: Similarity = attrs.field(
        default=lexical_similarity, converter=_lexical_evidence
    )
    semantic_threshold: float = attrs.field(default=0.92, validator=_fraction)
    semantic_window: int = attrs.field(default=64, validator=_at_least(1))
    cycle_window: int = attrs.field(default=12, validator=_at_least(4))
    cycle_gain: float = attrs.field(default=0.2, validator=_fraction)
    plateau_gain: float = attrs.field(default=0.05, validator=_fraction)
    plateau_steps: int = attrs.field(default=3, validator=_at_least(1))
    evidence_window: int = attrs.field(default=32, validator=_at_least(1))
    completion: CompletionSignal | None = None
    checks: tuple[Check, ...] = ()
    baseline_steps: float | None = attrs.field(default=None, validator=_positive_or_none)
    baseline_factor: float = attrs.field(default=3.0, validator=_factor)
    # The semantic tier's similarity, and the same as one that signs each text once (None:
    # it cannot); the configured one is read at the first check that needs it, then kept.
    _similarities: tuple[Similarity, SignedSimilarity[Any] | None] | None = attrs.field(
        init=False, default=None, eq=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        if self.similarity is not None:
            object.__setattr__(self, "_similarities", (self.similarity, signer_of(self.similarity)))

    def _semantic_similarity(self) -> tuple[Similarity, SignedSimilarity[Any] | None]:
        """The semantic tier's similarity (the configured one if none is named: read once,
        at the first check that needs it), and its signing form (``None``: it cannot sign)."""
        found = self._similarities
        if found is None:
            similarity = configured_similarity()  # a ConfigError (not kept) if misspelled
            found = (similarity, signer_of(similarity))
            object.__setattr__(self, "_similarities", found)
        return found

    # -- begin_step ---------------------------------------------------------------

    def begin_step(
        self,
        loop: LoopState,
        *,
        ctx: Any,
        spent: Spend,
        budget: Budget,
        elapsed: float,
        max_steps: int,
        max_tool_iterations: int | None,
    ) -> Decision:
        """May the run take another planning step, and may it still use tools?"""
        # A Budget itself with no limit refuses nothing (each of refuse's tests needs one).
        # The very Budget a drive found with no limit at its start (_free_budget, by
        # identity: frozen, its limits are not read again); any other is read.
        held: object = budget
        if not (
            type(held) is Budget
            and (
                budget is _free_budget
                or (
                    budget.wall_clock is None
                    and budget.tool_calls is None
                    and budget.tokens is None
                    and budget.cost is None
                )
            )
        ):
            refusal = budget.refuse(
                spent, elapsed=elapsed, action="the next model call", open_ended=True
            )
            if refusal is not None:
                return Decision(Verdict.ABORT, refusal, check="budget")
        if spent.model_calls >= max_steps:
            reason = f"step cap: {spent.model_calls} model calls made, {max_steps} allowed"
            return Decision(Verdict.ABORT, reason, check="step_cap")
        for check in self.checks:
            decision = check(loop, ctx)
            if decision.verdict is Verdict.SUPPRESS:
                # Passed on, it would skip the caps below and be recorded nowhere.
                name = decision.check or getattr(check, "__name__", repr(check))
                raise SetupError(
                    f"check {name!r} answered suppress at the start of a step, where there "
                    "is no action to skip; a check answers continue, pause, finalize or abort"
                )
            if decision.verdict is not Verdict.CONTINUE:
                return decision
        if loop.finalize:
            # Reached after the last action; its reason starts with the check's name.
            reached_by = loop.finalize.split(":", 1)[0]
            return Decision(Verdict.FINALIZE, loop.finalize, check=reached_by)
        if spent.model_calls + 1 >= max_steps:
            reason = f"step cap: this is model call {max_steps} of {max_steps}, the last"
            return Decision(Verdict.FINALIZE, reason, check="step_cap")
        if max_tool_iterations is not None and loop.tool_iterations >= max_tool_iterations:
            reason = f"tool-iteration cap: {loop.tool_iterations} of {max_tool_iterations} used"
            return Decision(Verdict.FINALIZE, reason, check="tool_iterations")
        return CONTINUE

    def flag(self, loop: LoopState, step: int) -> LoopState:
        """The loop with a flag if this run is far longer than usual (once)."""
        if self.baseline_steps is None or any(f.startswith("long_run") for f in loop.flags):
            return loop
        if step > self.baseline_factor * self.baseline_steps:
            note = (
                f"long_run: {step} steps, about {self.baseline_factor:g}x the usual "
                f"{self.baseline_steps:g}"
            )
            return loop._evolve(flags=(*loop.flags, note))
        return loop

    # -- before_action ------------------------------------------------------------

    def action(self, call: ReadCall | WriteCall, raw_arguments: str, call_id: str) -> ActionRecord:
        """The record of ``call`` as the model sent it (``raw_arguments``)."""
        # _Call.name (the tool's name) without its frame, for the library's own call classes.
        kind = type(call)
        ours = kind is ReadCall or kind is WriteCall
        tool: Any = call.tool if ours else None
        name = tool.name if ours else call.name
        # SHA-256 in CPython's own C code (as the route's hash): the same digest as hashlib's.
        exact = _sha256(f"{name}\x00{raw_arguments}".encode()).hexdigest()
        if _case_insensitive(type(call.args)):
            canonical = _json.canonical(self._folded(call))
            key = f"{name}:{_sha256(canonical.encode()).hexdigest()}"
        else:  # nothing to fold: the call's own canonical text and hash are these
            canonical = call._canonical
            key = f"{name}:{call.args_hash}"
        # Its anchors (the semantic tier's) are read from this text when first needed:
        # only a run with failed or refused calls needs them.
        text = f"{name}({canonical})"
        # As ActionRecord(call_id=..., tool=..., effect=..., exact=..., key=..., text=...)
        # would make it: every value is a str made here (the call id the runner's).
        # A ReadTool itself (final) is no WriteTool: the isinstance only for the others.
        if not ours:
            tool = call.tool  # read here, as the plain path reads it
        held = type(tool)
        effect = (
            "read"
            if held is ReadTool
            else "write"
            if held is WriteTool or isinstance(tool, WriteTool)
            else "read"
        )
        # _record(call_id, name, effect, exact, key, text), without its frame: its slots
        # stored as object stores them, then the record's own class (_MakingRecord).
        making: Any = _new(_MakingRecord)
        making.call_id = call_id
        making.tool = name
        making.effect = effect
        making.exact = exact
        making.key = key
        making.text = text
        making.outcome = "pending"
        making.result = ""
        making.gain = None
        making.__class__ = ActionRecord
        made: ActionRecord = making
        return made

    @staticmethod
    def _folded(call: ReadCall | WriteCall) -> dict[str, Any]:
        """Arguments with case-insensitive string fields folded to lower case."""
        plain: dict[str, Any] = call.args.model_dump(mode="python")
        for name in _case_insensitive(type(call.args)):
            if isinstance(plain.get(name), str):
                plain[name] = plain[name].casefold()
        return plain

    def before_action(
        self,
        loop: LoopState,
        action: ActionRecord,
        *,
        spent: Spend,
        budget: Budget,
        elapsed: float,
        price: Any,
    ) -> Decision:
        """Run ``action``, or suppress it (a duplicate), or abort (no budget for it)."""
        # A Budget itself that certainly admits the call needs no words for a refusal: one
        # with no limit refuses nothing (each of refuse's tests needs one). The very Budget
        # a drive found with no limit at its start (_free_budget, by identity: frozen, its
        # limits are not read again); any other is read.
        held: object = budget
        if not (
            type(held) is Budget
            and (
                budget is _free_budget
                or (
                    budget.wall_clock is None
                    and budget.tool_calls is None
                    and budget.tokens is None
                    and budget.cost is None
                )
            )
        ) and not admits_call(budget, spent, elapsed, price):
            refusal = budget.refuse(
                spent, elapsed=elapsed, action=f"calling {action.tool}", tool_calls=1, cost=price
            )
            if refusal is not None:
                return Decision(Verdict.ABORT, refusal, check="budget")
        # A new call (nearly always) on a LoopState itself whose index, a line of its own,
        # covers its ActionLog: the look-ups of _checked read in place, without their
        # frames. Anything else (a subclass, a restored state without its index, a branch,
        # a key seen before) goes through _checked, the plain path.
        if type(loop) is LoopState and type(action) is ActionRecord:
            line = loop._index
            log = loop.actions
            if type(line) is _Line and line.parent is None and type(log) is ActionLog:
                tail = log._tail
                keys = line.keys
                size = len(log._chunks) * CHUNK + len(tail)  # ActionLog.__len__
                if (
                    line.size >= size  # _line's own test
                    and action.exact not in keys  # _Line.latest's first answer
                    and action.key not in keys
                ):
                    failures = loop.failures
                    if type(failures) is not tuple or failures:  # something failed
                        semantic = self._semantic(loop, line, action)
                        if semantic is not None:
                            return semantic
                    # _cycle's first answers (a write; the latest action settled and gaining
                    # enough), read here; otherwise _cycle itself.
                    if action.effect == "write":
                        return CONTINUE
                    if tail:
                        last = tail[-1]
                        if last.outcome != "pending" and not (last.gain or 0.0) < self.cycle_gain:
                            return CONTINUE
                    # Every action of the window (the last cycle_window - 1) a call of this
                    # action's tool, as the line's run of one tool says: one tool only, no
                    # block of two or more (_cycle's next answer, without its window).
                    tool, window = action.tool, self.cycle_window
                    if (
                        type(tool) is str
                        and tool == line.tool
                        and type(window) is int
                        and (line.run <= size - window + 1 or not line.run)
                    ):
                        return CONTINUE
                    return self._cycle(loop, action)
        return self._checked(loop, action)

    def _checked(self, loop: LoopState, action: ActionRecord) -> Decision:
        """``before_action``'s checks after the budget's, for any state (its plain path)."""
        line, actions = loop._line(), loop.actions
        earlier = line.latest(action.exact, actions)
        if earlier is not None:
            return self._duplicate(action, earlier, "exact")
        earlier = line.latest(action.key, actions)
        if earlier is not None:
            return self._duplicate(action, earlier, "canonical")
        semantic = self._semantic(loop, line, action)
        if semantic is not None:
            return semantic
        return self._cycle(loop, action)

    def _duplicate(self, action: ActionRecord, earlier: ActionRecord, check: str) -> Decision:
        if earlier.outcome == "ok":
            message = (
                f"You already called {earlier.tool} with these arguments and it returned: "
                f"{_quote(earlier.result)}. Use that result rather than calling it again."
            )
            if earlier.effect == "write":
                message += f" {earlier.tool} changes things, so it will not be done twice."
        else:
            message = (
                f"You already asked for {earlier.text} and it {_was(earlier.outcome)}: "
                f"{_quote(earlier.result)}. Do not ask for it again; tell the customer instead."
            )
        reason = f"{check} duplicate of {earlier.call_id} ({earlier.text}, {earlier.outcome})"
        return _suppress(reason, message, check)

    def _semantic(self, loop: LoopState, line: _Line, action: ActionRecord) -> Decision | None:
        # Only failed and refused calls of the same tool and anchors count, and only the
        # latest semantic_window failures: an index look-up, then a few comparisons.
        count = len(loop.failures)
        if not count or action.tool not in line.failing:
            return None
        anchored = (action.tool, call_anchors(action.text))
        if line.parent is None and anchored not in line.alike:  # nearly always
            return None
        oldest = count - self.semantic_window
        positions = line.alike_positions(anchored, count, oldest)
        if not positions:
            return None
        similarity, signer = self._semantic_similarity()
        if signer is LEXICAL:  # signatures as bitmasks, in the line's own vocabulary
            signer = line.lexical_signer()
        actions, threshold = loop.actions, self.semantic_threshold
        mine: object = None
        for position in positions:
            earlier = actions[position]
            if signer is None:
                score = similarity(action.text, earlier.text)
            else:
                if mine is None:
                    mine = signer.signature(action.text)
                score = signer.compare(mine, line.signature(signer, position, earlier.text))
            if score >= threshold:
                return self._near(earlier, score)
        return None

    def _near(self, earlier: ActionRecord, score: float) -> Decision:
        message = (
            f"This call is {score:.0%} the same as {earlier.text}, which "
            f"{_was(earlier.outcome)}: {_quote(earlier.result)}. Do not retry it in "
            "another form; tell the customer instead."
        )
        reason = (
            f"semantic duplicate ({score:.3f} >= {self.semantic_threshold}) of "
            f"{earlier.call_id} ({earlier.text}, {earlier.outcome})"
        )
        return _suppress(reason, message, "semantic")

    def _cycle(self, loop: LoopState, action: ActionRecord) -> Decision:
        if action.effect == "write":
            # Writes to different targets (refund A, then refund B) are not a loop, and
            # every write already waits for a person.
            return CONTINUE
        # The last cycle_window - 1 actions, read from the log's tail when it holds them.
        need = self.cycle_window - 1
        log = loop.actions
        tail = log.tail
        if tail:
            # Every repetition checked below ends with the latest settled action of the
            # window: when that is the log's last and it gained enough, none is a cycle.
            last = tail[-1]
            if last.outcome != "pending" and not (last.gain or 0.0) < self.cycle_gain:
                return CONTINUE
        window = tail[-need:] if len(tail) >= need else log[-need:]
        recent = list(compress(window, map(_NOT_PENDING, map(_OUTCOME, window))))
        tool = action.tool
        names = [*map(_TOOL, recent), tool]
        if names.count(tool) == len(names):  # one tool only: no block of two or more
            return CONTINUE
        for block in range(2, len(names) // 2 + 1):
            # A block repeated twice ends both times with this call's tool.
            if names[-1 - block] != tool:
                continue
            tail_names = names[-2 * block :]
            if tail_names[:block] != tail_names[block:] or len(set(tail_names[:block])) < 2:
                continue
            # The latest repetition: the new action and the block - 1 settled before it.
            repeat = recent[-(block - 1) :]
            if not all((a.gain or 0.0) < self.cycle_gain for a in repeat):
                continue
            steps = " -> ".join(tail_names[:block])
            message = (
                f"You are repeating the same steps ({steps} -> {steps}) and the last "
                "round found nothing new. Stop repeating them: answer from what you "
                "have, or try something different."
            )
            reason = f"cycle: {steps} repeated twice, last round gained nothing"
            return _suppress(reason, message, "cycle")
        return CONTINUE

    # -- after_action -------------------------------------------------------------

    def gain(self, loop: LoopState, result: str) -> float:
        """1 - the highest similarity of ``result`` to the evidence so far."""
        window = loop.evidence[-self.evidence_window :]
        if not window:
            return 1.0
        similarity = self.evidence_similarity
        if similarity is lexical_similarity:
            # The default, from bitmasks: each text of the window keeps its own (made when
            # its gain was measured), so only the new result's is made here. The masks
            # read from the private attributes in place (as _masks reads them) once made;
            # compared: start, then best, in one frame.
            masks = loop._grams
            if masks is None:
                masks = loop._masks()
            return 1.0 - masks.compared(result, window, self.evidence_window)
        if isinstance(similarity, SignedSimilarity):
            mine = similarity.signature(result)
            best = max(similarity.compare(mine, similarity.signature(s)) for s in window)
        else:
            best = max(similarity(result, seen) for seen in window)
        return 1.0 - _similarity_value(similarity, best)

    def after_action(
        self, loop: LoopState, *, call_id: str, effect: str, result: str, ctx: Any, step: int
    ) -> LoopState:
        """Settle the action, measure what it added, and finalize on a plateau or when done."""
        if effect == "write":  # a write's receipt is not evidence about the question
            return self._finished(loop.settle(call_id, "ok", result), ctx, step)
        if self.evidence_similarity is lexical_similarity:
            # gain(...) and the evidence after it in one pass, the window's masks kept;
            # the masks read from the private attributes in place (as _masks reads them)
            # once made.
            masks = loop._grams
            if masks is None:
                masks = loop._masks()
            # A LoopState itself: its two fields read from its slots, and _observed's body.
            if type(loop) is LoopState:
                best, evidence = masks.advance(
                    loop.evidence, result, result[:_RESULT_CHARS], self.evidence_window
                )
                gain = 1.0 - best
                streak = loop.low_gain_streak + 1 if gain < self.plateau_gain else 0
                observed = _observed_in(loop, call_id, result, gain, evidence, streak)
            else:
                best, evidence = masks.advance(
                    loop.evidence, result, result[:_RESULT_CHARS], self.evidence_window
                )
                gain = 1.0 - best
                streak = loop.low_gain_streak + 1 if gain < self.plateau_gain else 0
                observed = loop._observed(call_id, result, gain, evidence, streak)
        else:
            gain = self.gain(loop, result)
            evidence = (*loop.evidence, result[:_RESULT_CHARS])[-self.evidence_window :]
            streak = loop.low_gain_streak + 1 if gain < self.plateau_gain else 0
            # settle(...) and then the evidence, in one new state.
            observed = loop._observed(call_id, result, gain, evidence, streak)
        if observed is None:  # not the latest action, or a subclass: the general path
            settled = loop._settled(call_id, "ok", result, gain) or {}
            observed = loop._evolve(**settled, evidence=evidence, low_gain_streak=streak)
        loop = observed
        if streak >= self.plateau_steps:
            decision = Decision(
                Verdict.FINALIZE,
                f"plateau: {streak} results in a row added less than {self.plateau_gain:g}",
                check="plateau",
            )
            return loop.noted(step, "after_action", decision, finalize=decision.reason)
        if self.completion is None:  # _finished's first test, without its frame
            return loop
        return self._finished(loop, ctx, step)

    def _finished(self, loop: LoopState, ctx: Any, step: int) -> LoopState:
        if self.completion is None or loop.finalize:
            return loop
        done = self.completion(loop, ctx)
        if done is None:
            return loop
        decision = Decision(Verdict.FINALIZE, f"complete: {done}", check="complete")
        return loop.noted(step, "after_action", decision, finalize=decision.reason)


def _settled_record(
    action: ActionRecord, outcome: str, result: str, gain: float | None
) -> ActionRecord:
    """``action`` settled: as ``action.model_copy(update=...)`` makes it (outcome, result and
    gain checked by the signature: the runner's words, text and the gain it computed)."""
    return _record(
        action.call_id,
        action.tool,
        action.effect,
        action.exact,
        action.key,
        action.text,
        outcome,
        result[:_RESULT_CHARS],
        gain,
    )
