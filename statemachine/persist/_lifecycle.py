"""A run's lifecycle: its status, and the only changes of status that make sense.

::

    running ──interrupt──> interrupted ──resume──> running
    running ──cancel─────> cancelled   ──resume──> running      (interrupted, failed_resumable too)
    running ──fail───────> failed_resumable ──resume──> running
    running ──complete───> completed                              (an ending)
    any status but an ending ──abort──> aborted                   (an ending)

The table is a ``transitions`` machine, so a change it does not list is refused at
run time with ``IllegalStatusChangeError``; nothing leaves ``completed`` or ``aborted``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Final

from .._errors import IllegalStatusChangeError

if TYPE_CHECKING:
    from transitions import Machine

__all__ = ["ATTENTION", "ENDINGS", "RunLifecycle", "RunStatus"]


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
