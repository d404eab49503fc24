"""The run lifecycle: every legal status change works, every other one is refused."""

from __future__ import annotations

import itertools

import pytest
from support import exactly

from statemachine import IllegalStatusChangeError, RunLifecycle, RunStatus, StatemachineError

S = RunStatus
LEGAL: dict[RunStatus, set[RunStatus]] = {
    S.RUNNING: {S.INTERRUPTED, S.CANCELLED, S.FAILED_RESUMABLE, S.COMPLETED, S.ABORTED},
    S.INTERRUPTED: {S.RUNNING, S.CANCELLED, S.ABORTED},
    S.CANCELLED: {S.RUNNING, S.ABORTED},
    S.FAILED_RESUMABLE: {S.RUNNING, S.CANCELLED, S.ABORTED},
    S.COMPLETED: set(),
    S.ABORTED: set(),
}
PAIRS = [(here, there) for here, there in itertools.product(S, S) if here != there]
TRIGGERS = {
    "interrupt": S.INTERRUPTED,
    "cancel": S.CANCELLED,
    "fail": S.FAILED_RESUMABLE,
    "resume": S.RUNNING,
    "complete": S.COMPLETED,
    "abort": S.ABORTED,
}


def test_statuses_are_the_six_of_the_design() -> None:
    """Six statuses, spelled as the registry stores them; only completed and aborted end a run."""
    assert [status.value for status in S] == [
        "running",
        "interrupted",
        "cancelled",
        "failed_resumable",
        "completed",
        "aborted",
    ]
    assert {status for status in S if status.is_ending} == {S.COMPLETED, S.ABORTED}
    assert {status for status in S if status.needs_attention} == {
        S.INTERRUPTED,
        S.CANCELLED,
        S.FAILED_RESUMABLE,
    }


def test_a_new_lifecycle_is_running() -> None:
    """A run starts running."""
    assert RunLifecycle("r1").status is S.RUNNING


@pytest.mark.parametrize(("here", "there"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_pair_is_allowed_exactly_when_the_table_says(
    here: RunStatus, there: RunStatus
) -> None:
    """move_to follows a legal move, and refuses any other, leaving the status as it was."""
    lifecycle = RunLifecycle("r1", here)
    if there in LEGAL[here]:
        assert lifecycle.move_to(there) is there
        assert lifecycle.status is there
    else:
        with pytest.raises(IllegalStatusChangeError) as caught:
            lifecycle.move_to(there)
        assert lifecycle.status is here
        error = caught.value
        assert (error.run_id, error.current, error.target) == ("r1", here, there)
        assert set(error.legal) == LEGAL[here]


@pytest.mark.parametrize("here", list(S))
@pytest.mark.parametrize("trigger", list(TRIGGERS))
def test_every_named_trigger_from_every_status(here: RunStatus, trigger: str) -> None:
    """A trigger works only from its sources; transitions' MachineError never escapes."""
    lifecycle = RunLifecycle("r1", here)
    there = TRIGGERS[trigger]
    if there in LEGAL[here]:
        assert getattr(lifecycle, trigger)() is there
    else:
        with pytest.raises(IllegalStatusChangeError):
            getattr(lifecycle, trigger)()
        assert lifecycle.status is here


@pytest.mark.parametrize("status", list(S))
def test_moving_to_the_current_status_changes_nothing(status: RunStatus) -> None:
    """Setting the status a run already has is not a change, so it is never refused."""
    lifecycle = RunLifecycle("r1", status)
    assert lifecycle.move_to(status) is status


def test_legal_moves_lists_the_table() -> None:
    """legal_moves() is what a person may do next, for every status."""
    for status in S:
        assert set(RunLifecycle("r1", status).legal_moves()) == LEGAL[status]


def test_the_refusal_names_the_run_and_the_legal_moves() -> None:
    """An illegal change says which run, from where to where, and what is possible."""
    with pytest.raises(
        IllegalStatusChangeError,
        match=exactly(
            "run 'trip-7' cannot go from interrupted to completed; its status is still "
            "interrupted. From interrupted it may only go to: cancelled, running, aborted."
        ),
    ):
        RunLifecycle("trip-7", S.INTERRUPTED).move_to("completed")


def test_an_ending_refusal_says_to_start_a_new_run() -> None:
    """Nothing leaves an ending, and the message says what to do instead."""
    with pytest.raises(
        IllegalStatusChangeError,
        match=exactly(
            "run 'trip-7' cannot go from completed to running; its status is still completed. "
            "An ending never changes: start a new run instead of reopening 'trip-7'."
        ),
    ) as caught:
        RunLifecycle("trip-7", S.COMPLETED).resume()
    assert isinstance(caught.value, StatemachineError)
    assert isinstance(caught.value, RuntimeError)
