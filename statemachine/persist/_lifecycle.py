"""A run's lifecycle: its status, and the only changes of status that make sense.

::

    running ──interrupt──> interrupted ──resume──> running
    running ──cancel─────> cancelled   ──resume──> running      (interrupted, failed_resumable too)
    running ──fail───────> failed_resumable ──resume──> running
    running ──complete───> completed                              (an ending)
    any status but an ending ──abort──> aborted                   (an ending)

The table is a ``transitions`` machine, so a change it does not list is refused at
run time with ``IllegalStatusChangeError``; nothing leaves ``completed`` or ``aborted``.

Beside its status a run's row keeps its retry state (:func:`retry_fields`): how many
times in a row it failed, when a worker may retry it (at once after the first failure,
1s after the second, then twice as long each time, at most 5 minutes:
:func:`retry_delay`), and the ``reason`` a
run is *held*: a worker found it could not go on with it (its checkpoint cannot be
loaded, or it failed too many times in a row), so it waits for a person, ``interrupted``
(or ``failed_resumable``, if that is where it was), and no worker takes it until a
person resumes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

from .._errors import IllegalStatusChangeError

if TYPE_CHECKING:
    from transitions import Machine

    from ._protocol import RunRecord

__all__ = [
    "ATTENTION",
    "ENDINGS",
    "RETRY_FIRST",
    "RETRY_LONGEST",
    "RunLifecycle",
    "RunStatus",
    "held_record",
    "retry_delay",
    "retry_fields",
]


class RunStatus(StrEnum):
    """Where a run stands, as the registry shows it."""

    RUNNING = "running"
    INTERRUPTED = "interrupted"  # waiting on a person
    CANCELLED = "cancelled"  # stop pressed; may be resumed
    FAILED_RESUMABLE = "failed_resumable"  # a phase raised; may be resumed
    COMPLETED = "completed"
    ABORTED = "aborted"

    @property
    def is_ending(self) -> bool:
        """``completed`` and ``aborted``: the run is over and its status never changes again."""
        return self in ENDINGS

    @property
    def needs_attention(self) -> bool:
        """``interrupted``, ``failed_resumable`` and ``cancelled``: a person should look."""
        return self in ATTENTION


ENDINGS: Final = frozenset({RunStatus.COMPLETED, RunStatus.ABORTED})
ATTENTION: Final = frozenset(
    {RunStatus.INTERRUPTED, RunStatus.FAILED_RESUMABLE, RunStatus.CANCELLED}
)

_S = RunStatus
# trigger -> (sources, destination). Each (source, destination) pair has one trigger.
_MOVES: Final[dict[str, tuple[tuple[RunStatus, ...], RunStatus]]] = {
    "interrupt": ((_S.RUNNING,), _S.INTERRUPTED),
    "cancel": ((_S.RUNNING, _S.INTERRUPTED, _S.FAILED_RESUMABLE), _S.CANCELLED),
    "fail": ((_S.RUNNING,), _S.FAILED_RESUMABLE),
    "resume": ((_S.INTERRUPTED, _S.CANCELLED, _S.FAILED_RESUMABLE), _S.RUNNING),
    "complete": ((_S.RUNNING,), _S.COMPLETED),
    "abort": ((_S.RUNNING, _S.INTERRUPTED, _S.CANCELLED, _S.FAILED_RESUMABLE), _S.ABORTED),
}


class _Model:
    """What the ``transitions`` machine moves: only its ``state`` attribute."""

    state: str


class RunLifecycle:
    """The status of one run, changed only along the legal moves.

    ``move_to(status)`` finds the move that leads there (moving to the current status
    changes nothing); the named triggers (``interrupt()``, ``resume()``, ...) are the
    same moves by name. Either way an illegal change raises
    ``IllegalStatusChangeError`` and leaves the status as it was.
    """

    def __init__(self, run_id: str, status: RunStatus = RunStatus.RUNNING) -> None:
        # Imported here, not at the top: ``import statemachine`` should not pay for
        # ``transitions`` before a run's status is first tracked.
        from transitions import Machine

        self.run_id = run_id
        self._model = _Model()
        self._machine: Machine = Machine(
            model=self._model,
            states=[member.value for member in RunStatus],
            transitions=[
                {"trigger": trigger, "source": [s.value for s in sources], "dest": dest.value}
                for trigger, (sources, dest) in _MOVES.items()
            ],
            initial=RunStatus(status).value,
            auto_transitions=False,
        )

    @property
    def status(self) -> RunStatus:
        """The current status."""
        return RunStatus(self._model.state)

    def legal_moves(self) -> tuple[RunStatus, ...]:
        """The statuses this run may go to from where it is now, in declaration order."""
        here = self.status
        return tuple(dest for sources, dest in _MOVES.values() if here in sources)

    def move_to(self, status: RunStatus | str) -> RunStatus:
        """Change to ``status`` along the one legal move that leads there; return it."""
        target = RunStatus(status)
        here = self.status
        if target == here:
            return here
        for trigger, (sources, dest) in _MOVES.items():
            if dest == target and here in sources:
                return self._fire(trigger, target)
        raise IllegalStatusChangeError(
            self.run_id, current=here, target=target, legal=self.legal_moves()
        )

    def interrupt(self) -> RunStatus:
        """running -> interrupted: the run waits on a person."""
        return self._fire("interrupt", RunStatus.INTERRUPTED)

    def cancel(self) -> RunStatus:
        """running, interrupted or failed_resumable -> cancelled: stop was pressed."""
        return self._fire("cancel", RunStatus.CANCELLED)

    def fail(self) -> RunStatus:
        """running -> failed_resumable: a phase raised."""
        return self._fire("fail", RunStatus.FAILED_RESUMABLE)

    def resume(self) -> RunStatus:
        """interrupted, cancelled or failed_resumable -> running."""
        return self._fire("resume", RunStatus.RUNNING)

    def complete(self) -> RunStatus:
        """running -> completed (an ending)."""
        return self._fire("complete", RunStatus.COMPLETED)

    def abort(self) -> RunStatus:
        """Any status but an ending -> aborted (an ending)."""
        return self._fire("abort", RunStatus.ABORTED)

    def _fire(self, trigger: str, target: RunStatus) -> RunStatus:
        from transitions import MachineError  # loaded already: __init__ built the machine

        here = self.status
        try:
            self._machine.events[trigger].trigger(self._model)
        except MachineError:
            # transitions' own error names neither the run nor the way out.
            raise IllegalStatusChangeError(
                self.run_id, current=here, target=target, legal=self.legal_moves()
            ) from None
        return self.status


# --- the retry state ----------------------------------------------------------------------

RETRY_FIRST: Final = timedelta(seconds=1)  # the wait after a run's second failure in a row
RETRY_LONGEST: Final = timedelta(minutes=5)  # the longest wait between two retries
_CLEARED: Final[Mapping[str, Any]] = {"reason": "", "failures": 0, "retry_at": None}


def retry_delay(failures: int) -> timedelta:
    """How long a run that failed ``failures`` times in a row waits before a worker retries
    it: not at all after the first failure (most are passing), 1s after the second, then
    twice as long each time, at most 5 minutes."""
    if failures <= 1:
        return timedelta(0)
    return min(RETRY_FIRST * (1 << min(failures - 2, 30)), RETRY_LONGEST)


def retry_fields(
    before: RunRecord | None, status: RunStatus, now: datetime, *, saved: bool
) -> Mapping[str, Any]:
    """The row's ``reason``, ``failures`` and ``retry_at`` once the run goes from ``before``
    to ``status``, by a checkpoint saved (``saved``) or a change of status alone.

    A move to ``failed_resumable`` is one more failure in a row (the first, if a
    checkpoint was saved with it), to be retried after :func:`retry_delay`. A worker's
    retry (``failed_resumable`` -> ``running``, not held) keeps the count: the run has
    not got further yet. A checkpoint saved (it got further) and every other change of
    status (a person resumed, stopped or ended it) start the count over and lift a hold;
    setting the status a run has already changes none of them.
    """
    if before is None:  # a new run
        if status is RunStatus.FAILED_RESUMABLE:
            return {"reason": "", "failures": 1, "retry_at": now}
        return _CLEARED
    same = status is before.status
    if same and not saved:
        return {"reason": before.reason, "failures": before.failures, "retry_at": before.retry_at}
    if status is RunStatus.FAILED_RESUMABLE:
        if same:  # a checkpoint saved by a run still failed: it stays as it was
            return {"reason": "", "failures": before.failures, "retry_at": before.retry_at}
        failures = 1 if saved else before.failures + 1
        return {"reason": "", "failures": failures, "retry_at": now + retry_delay(failures)}
    if (
        status is RunStatus.RUNNING
        and before.status is RunStatus.FAILED_RESUMABLE
        and not before.reason
        and not saved
    ):
        return {"reason": "", "failures": before.failures, "retry_at": None}
    return _CLEARED


def held_record(record: RunRecord, reason: str, now: datetime) -> RunRecord:
    """The row of a run held for a person with ``reason`` (``hold``, every store).

    Called only for a run not held yet and not cancelled (the reason is made one line,
    and never empty): a running run becomes
    ``interrupted``, waiting for ``a person``; an interrupted or failed_resumable run
    keeps its status and what it waits for; an ended one is refused
    (``IllegalStatusChangeError``).
    """
    # One line, as the command line shows it; never empty, which would mean "not held".
    said = " ".join(reason.split()) or "no reason given"
    update: dict[str, Any] = {"reason": said, "retry_at": None, "updated_at": now}
    if record.status is RunStatus.RUNNING or record.status.is_ending:
        RunLifecycle(record.run_id, record.status).move_to(RunStatus.INTERRUPTED)
        update.update(status=RunStatus.INTERRUPTED, waiting_for="a person")
    return record.model_copy(update=update)
