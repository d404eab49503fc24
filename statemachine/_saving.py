"""What one drive keeps: each phase saved as the run's next checkpoint, and the phases
it went through (all of them, or only their kinds and steps)."""

from __future__ import annotations

import sys
from types import MethodType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from ._phases import (
    Active,
    AnyPhase,
    Done,
    Failed,
    Observing,
    Phase,
    Planning,
    Runtime,
    ToolCalling,
)
from .persist._lifecycle import RunStatus

if TYPE_CHECKING:
    from .persist._delta import PhaseDumper
    from .persist._protocol import Checkpointer, RunRecord

__all__ = ["_Saver", "_Went", "_status", "_stop_asked"]

C = TypeVar("C")


def _stop_asked(record: RunRecord | None) -> bool:
    """Whether a saved row says the run was stopped from elsewhere while it was driven."""
    return record is not None and (record.stop_requested or record.status is RunStatus.CANCELLED)


def _rounded(seconds: Any) -> Any:
    """``round(seconds, 6)``, the clock's reading as it is saved; for an exact ``float``
    in (0, 1e9) without ``round``'s decimal conversion (its text made and read back, ~0.25
    us alone, more inside a run), by float arithmetic that gives the same float.

    ``round(x, 6)`` is the float nearest the decimal ``n / 10**6``, ``n`` the integer
    nearest the exact product ``x * 10**6`` (half to even). Below 1e9 the float product
    ``y = x * 1e6`` is below 2**50, so ``k + 0.5`` (``k`` its floor) is a float and ``y %
    1.0`` is exact; rounding to nearest keeps order, so ``y < k + 0.5`` only when the
    exact product is below it (then ``n`` is ``k``) and ``y > k + 0.5`` only when it is
    above (``n`` is ``k + 1``). ``n`` (an exact float) divided by 1e6 (exact) is the float
    nearest ``n / 10**6``: IEEE division rounds as ``round``'s reading of the text does
    (to nearest, ties to even). At ``y == k + 0.5`` (the exact product may be either
    side), at or below zero, at 1e9 or above, or anything but an exact ``float`` (an
    ``int`` clock's reading stays an ``int``): ``round`` itself
    (tests/test_dump_fast25c.py)."""
    if type(seconds) is float and 0.0 < seconds < 1e9:
        scaled = seconds * 1e6
        part = scaled % 1.0
        if part < 0.5:
            return (scaled - part) / 1e6
        if part > 0.5:
            return (scaled - part + 1.0) / 1e6
    return round(seconds, 6)


def _status(state: Phase[Any]) -> tuple[RunStatus, str]:
    """The run's status and what it waits for, as :func:`_status_plain` tells them; for a
    phase of exactly one of the library's three running classes (each ``Active``, none
    ``Done`` or ``Failed``) without its two ``isinstance`` checks and their union."""
    cls = type(state)
    if cls is Planning or cls is ToolCalling or cls is Observing:
        running: Any = state  # an Active, which mypy does not tell from ``cls``
        waiting = running.waiting_for
        if waiting:
            return RunStatus.INTERRUPTED, waiting
        return RunStatus.RUNNING, ""
    return _status_plain(state)


def _status_plain(state: Phase[Any]) -> tuple[RunStatus, str]:
    if isinstance(state, Done | Failed):
        # A Failed run ended on purpose (a budget, a cap, a refusal): it is complete.
        return RunStatus.COMPLETED, ""
    waiting = state.waiting_for if isinstance(state, Active) else ""
    if waiting:
        return RunStatus.INTERRUPTED, waiting
    return RunStatus.RUNNING, ""


class _Went(Generic[C]):
    """The phases one ``drive`` went through: all of them, or only their kinds and steps."""

    __slots__ = ("_keep", "_path", "_states")

    def __init__(self, first: Phase[C], *, keep: bool) -> None:
        self._keep = keep
        self._states: list[Phase[C]] = [first] if keep else []
        self._path = [(first.kind, first.step)]

    def add(self, state: Phase[C]) -> None:
        self._path.append((state.kind, state.step))
        if self._keep:
            self._states.append(state)

    def ended(
        self, final: Phase[C]
    ) -> tuple[AnyPhase[C], tuple[AnyPhase[C], ...], tuple[tuple[str, int], ...]]:
        """The run's final phase, the phases kept and the path, as ``RunResult`` takes them."""
        # Every phase a runner drives is one of the agent's Phases or Failed/Done, so one
        # of AnyPhase's members (Phases refuses any other class).
        states = cast("tuple[AnyPhase[C], ...]", tuple(self._states) if self._keep else (final,))
        closed = cast("AnyPhase[C]", final)
        return closed, states, tuple(self._path)


class _Saver:
    """Saves each phase of one run as the next checkpoint (when there is a checkpointer).

    ``seq`` is the checkpoint the run's current phase already has (a resumed run), or
    ``None`` for a new run, whose first phase is saved as checkpoint 0. For the
    library's own stores each phase is dumped from the one saved before it
    (:class:`PhaseDumper`) and the store is handed the delta with the document, so a
    save costs what changed, not the whole state.
    """

    def __init__(
        self,
        checkpointer: Checkpointer | None,
        rt: Runtime,
        agent: str,
        seq: int | None,
        loaded: tuple[Phase[Any], dict[str, Any]] | None = None,
    ) -> None:
        self._checkpointer = checkpointer
        self._rt = rt
        self._run_id = rt.run_id
        self._agent = agent
        self._seq = seq
        # The document saved last, to which the next save's ops apply (None: give no ops).
        self._saved: dict[str, Any] | None = None
        # The library's stores take ops and never change a document; other checkpointers
        # get a whole new document, alone: their save may not take ops. The dumper is
        # made for the former only, so a run without a store loads no codec or delta.
        self._dumper: PhaseDumper | None = None
        # The store's own save, run in this frame, for exactly the SQLite store whose
        # ``save`` reads _Store.save bound to it as this drive begins (nothing put on the
        # object or its class: see ``save``; read here, once a drive, as the object's
        # __dict__ is not: reading that makes CPython keep the object's attributes in a
        # dict, slower to read from then on); any other store, a subclass too, is awaited.
        self._direct: Any = None
        if getattr(type(checkpointer), "_takes_ops", False) is True:
            from .persist._delta import PhaseDumper

            self._dumper = PhaseDumper()
            # Loaded when such a store exists: a run with another store loads no sqlite3.
            sqlite = sys.modules.get("statemachine.persist._sqlite")
            if sqlite is not None and type(checkpointer) is sqlite.SQLiteCheckpointer:
                from .persist._base import _new_tuple, _Store
                from .persist._delta import FiniteOps
                from .persist._rows import _Change

                held: Any = checkpointer  # exactly the SQLite store
                bound: Any = held.save
                if (
                    type(bound) is MethodType
                    and bound.__func__ is _Store.save
                    and bound.__self__ is checkpointer
                ):
                    self._direct = (_new_tuple, _Change, FiniteOps)
        if loaded is not None and self._dumper is not None and seq is not None:
            from .persist._codec import DOCUMENT_VERSION

            # A resumed run: checkpoint ``seq`` is the phase ``loaded`` was decoded from
            # and the document the store loaded (which it remembers), so the next save
            # is a delta from it. A document of an older format is dumped afresh.
            phase, document = loaded
            if document.get("version") == DOCUMENT_VERSION and isinstance(phase, Phase):
                self._dumper.start_from(phase, document)
                self._saved = document

    async def save(self, state: Phase[Any], *, first: bool = False) -> RunRecord | None:
        """Save ``state`` as the next checkpoint; return the run's row (``None``: not saved)."""
        if self._checkpointer is None:
            return None
        if first:
            if self._seq is not None:
                return None  # resumed: this phase is the checkpoint it was loaded from
            self._seq = 0
        else:
            self._seq = 0 if self._seq is None else self._seq + 1
        status, waiting = _status(state)
        if self._dumper is not None:
            document, ops = self._dumper.dump(state)
            # The clock is part of what is saved: a resumed run's time goes on. Set in the
            # dumper's document itself: each dump's is a new dict, which nothing else holds
            # and whose ops never name it whole; its keys in the order {**document,
            # "elapsed": ...} gives them. The dumper reads only its other keys after.
            elapsed = _rounded(self._rt.elapsed())
            document["elapsed"] = elapsed
        else:  # a document of its own, which that checkpointer may keep or change
            from .persist._codec import dump_phase

            dumped, ops = dump_phase(state), None
            elapsed = round(self._rt.elapsed(), 6)
            document = {**dumped, "elapsed": elapsed}
        base = self._saved
        self._saved = None
        try:
            if ops is not None and base is not None:
                # x - x is 0.0 for a finite float only (nan for inf and nan): math.isfinite.
                if type(elapsed) is not float or elapsed - elapsed != 0.0:
                    # The dumper's ops vouch for a finite float everywhere (FiniteOps): not
                    # with this clock's reading in them; a plain list is read back and refused.
                    ops = list(ops)
                ops.append(["set", ["elapsed"], elapsed])
                direct = self._direct
                store: Any = self._checkpointer
                # For the SQLite store whose ``save`` was _Store.save bound to it when this
                # drive began (``_direct``), _Store.save's steps without its coroutine: the
                # status is a member already (_status), the change made as it makes it,
                # the save run at once or else in its thread.
                if direct is not None:
                    new_tuple, change_of, finite = direct
                    change = new_tuple(change_of, (base, ops, type(ops) is finite))
                    kind = state.kind
                    record = store._save_now(
                        self._run_id,
                        self._seq,
                        document,
                        self._agent,
                        status,
                        kind,
                        waiting,
                        change,
                    )
                    if record is None:
                        record = await store._call(
                            self._run_id,
                            store._save,
                            self._run_id,
                            self._seq,
                            document,
                            self._agent,
                            status,
                            kind,
                            waiting,
                            change,
                        )
                    self._saved = document
                    return record  # type: ignore[no-any-return]
                record = await self._checkpointer.save(
                    self._run_id,
                    self._seq,
                    document,
                    agent=self._agent,
                    status=status,
                    phase=state.kind,
                    waiting_for=waiting,
                    base=base,
                    ops=ops,
                )
            else:
                record = await self._checkpointer.save(
                    self._run_id,
                    self._seq,
                    document,
                    agent=self._agent,
                    status=status,
                    phase=state.kind,
                    waiting_for=waiting,
                )
        except BaseException:
            if self._dumper is not None:
                self._dumper.forget()  # not saved: the next save starts from nothing
            raise
        self._saved = document
        return record

    @property
    def run_id(self) -> str:
        """The run this saver saves."""
        return self._run_id

    async def mark(self, status: RunStatus, *, waiting_for: str = "") -> None:
        if self._checkpointer is not None and self._seq is not None:
            await self._checkpointer.set_status(self._run_id, status, waiting_for=waiting_for)
