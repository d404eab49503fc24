"""What ``ModelRetrying`` does, as functions the phase calls: the retries of a model call.

A model call that failed for now (the service is busy or down: 429, 5xx, 408, 409, a
connection refused or reset, the model's own time limit) is a transition, not an
ending: ``Planning.retry_model`` goes to ``ModelRetrying``, which waits (exponential
backoff with jitter, or what the service's ``Retry-After`` asked, whichever is longer)
and goes back to ``Planning`` to ask again::

    Planning -> ModelRetrying -> Planning -> ... -> Responding
                              -> Failed                (the run's budget or deadline)
                              raises ModelRetriesExhaustedError   (attempts ran out)

The policy is the agent's (``Agent.model_retry``), never the model's. Every attempt is
one model call counted in the run's spend; the budget is checked and the deadline kept
before each wait. When the attempts run out, or the service asks to wait longer than
the policy's ``max_delay``, ``advance`` raises :class:`ModelRetriesExhaustedError`: the
run is not over, its last checkpoint is this phase, and the runner leaves it
``failed_resumable`` (listed by ``needing_attention()``). A resume, by a person or a
worker (whose retries of one run are capped), restores the phase and starts a fresh
round of attempts.

A permanent failure (400, 401, 403, 404: the same request fails again) is never retried:
``Planning`` goes to ``Failed`` with the server's words and what to fix.

This module imports the phases for the type checkers only: ``_phases`` imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import ModelRetriesExhaustedError
from ._runtime import Runtime
from ._seal import _own_ticket

if TYPE_CHECKING:
    from ._phases import Failed, ModelRetrying, Phase, Planning

__all__ = ["_restored", "_retry_model"]

C = TypeVar("C")


def _restored(phase: Phase[Any]) -> bool:
    """Whether ``phase`` was restored from a checkpoint (a resume), not made by a transition."""
    return _own_ticket(phase, "restored").via == "restore"


async def _retry_model(retrying: ModelRetrying[C], rt: Runtime) -> Planning[C] | Failed[C]:
    """What ``ModelRetrying.retry`` does once the phase is left.

    A fallback model not yet asked in this round (``Runtime.fallback_models``, in order)
    is asked at once, as the same attempt. Then the round starts again at the runner's
    model, one attempt on, or at attempt 1 after a resume (a fresh round), after the
    policy's backoff or the ``Retry-After`` the service asked (up to ``max_delay``),
    whichever is longer.
    """
    fresh = _restored(retrying)
    if not fresh and retrying.model_choice < len(rt.fallback_models):
        return _go_on(retrying, rt, retrying.attempt, retrying.model_choice + 1)
    policy = retrying.agent.model_retry
    attempt = 1 if fresh else retrying.attempt + 1
    asked = retrying.retry_after
    if attempt > policy.max_attempts:
        raise ModelRetriesExhaustedError(
            retrying.error, attempts=retrying.attempt, cap=policy.max_attempts
        )
    if asked is not None and asked > policy.max_delay and not fresh:
        raise ModelRetriesExhaustedError(
            retrying.error, attempts=retrying.attempt, cap=policy.max_attempts, asked=asked
        )
    delay = policy.delay(1 if fresh else retrying.attempt, rt.rng)
    if asked is not None:
        delay = max(delay, min(asked, policy.max_delay))
    remaining = rt.remaining(retrying.agent.budget)
    if remaining is not None and delay >= remaining:
        return retrying._fail(
            f"wall-clock budget: {remaining:.2f}s left, not enough to wait {delay:.2f}s "
            f"and ask the model again; last error: {retrying.error}"
        )
    await rt.sleep(delay)
    return _go_on(retrying, rt, attempt, 0)


def _go_on(
    retrying: ModelRetrying[C], rt: Runtime, attempt: int, choice: int
) -> Planning[C] | Failed[C]:
    """``Planning`` asking model ``choice`` as ``attempt``, unless the budget refuses it."""
    refusal = retrying.agent.budget.refuse(
        retrying.spent, elapsed=rt.elapsed(), action="asking the model again", open_ended=True
    )
    if refusal is not None:
        return retrying._fail(f"{refusal}; last error: {retrying.error}")
    return retrying._next(
        retrying.agent.phases.planning, model_attempt=attempt, model_choice=choice
    )
