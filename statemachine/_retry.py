"""``RetryPolicy``: how many attempts a tool gets and how long to wait between them.

The policy belongs to the ``Retrying`` phase (a tool's) or the ``ModelRetrying``
phase (the model's, ``MODEL_RETRY`` by default), never to the model: the model does
not see a failed attempt and cannot ask for another one. ``_transient_words`` says
which failures of a model call may pass.
"""

from __future__ import annotations

import random
from typing import Final

import attrs

from ._errors import ModelRequestError, ModelUnavailableError, SetupError, ToolError

__all__ = ["MODEL_RETRY", "RetryPolicy", "_transient_words", "_Unanswered"]


def _positive_attempts(_: object, __: object, value: int) -> None:
    if value < 1:
        raise SetupError(f"max_attempts must be at least 1 (one try, no retry), got {value}")


def _seconds(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:  # also refuses NaN
        raise SetupError(f"{attribute.name} must be zero or more seconds, got {value}")


def _multiplier(_: object, __: object, value: float) -> None:
    if not value >= 1:
        raise SetupError(f"multiplier must be 1 or more (1 keeps the delay constant), got {value}")


def _fraction(_: object, __: object, value: float) -> None:
    if not 0 <= value <= 1:
        raise SetupError(
            f"jitter must be a fraction from 0 (none) to 1 (anywhere from 0 to the delay), "
            f"got {value}"
        )


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """Attempts cap and exponential backoff with jitter.

    The delay before attempt ``n + 1`` is ``base_delay * multiplier ** (n - 1)``,
    capped at ``max_delay``, then spread by ``jitter`` (a fraction: 0.5 means the
    delay is drawn uniformly from 50% to 100% of that value) so that many runs
    retrying one service do not hit it in step. ``retry_on`` lists the exception
    types that earn another attempt; a :class:`ToolError` with ``retryable=False``
    never does, whatever the list says.
    """

    max_attempts: int = attrs.field(default=3, validator=_positive_attempts)
    base_delay: float = attrs.field(default=0.2, validator=_seconds)
    multiplier: float = attrs.field(default=2.0, validator=_multiplier)
    max_delay: float = attrs.field(default=10.0, validator=_seconds)
    jitter: float = attrs.field(default=0.5, validator=_fraction)
    retry_on: tuple[type[BaseException], ...] = (TimeoutError, ToolError)

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` is of a kind that earns another attempt."""
        if isinstance(error, ToolError) and not error.retryable:
            return False
        return isinstance(error, self.retry_on)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        try:
            grown = self.base_delay * self.multiplier ** (attempt - 1)
        except OverflowError:  # a very late attempt: the cap applies anyway
            grown = self.max_delay
        ceiling = min(self.max_delay, grown)
        low = ceiling * (1.0 - self.jitter)
        return (rng or random).uniform(low, ceiling)


# HTTP statuses of a refused request that may succeed when sent again as it is: the
# server timed out waiting for it (408), or it met a conflicting request (409).
_TRANSIENT_REFUSALS: Final = frozenset({408, 409})

MODEL_RETRY: Final = RetryPolicy(
    max_attempts=4,
    base_delay=1.0,
    multiplier=2.0,
    max_delay=30.0,
    jitter=0.5,
    retry_on=(ModelUnavailableError, TimeoutError),
)
"""The default ``Agent.model_retry``: 4 attempts, 1s, 2s, 4s apart (jittered down to
half), a ``Retry-After`` of up to 30s honoured."""


class _Unanswered(str):
    """Why a model call gave no reply (it is that text), and whether asking again may help.

    ``transient`` is the error of a failure that may pass (``None``: it will not, or the
    run's own deadline cancelled the call); ``retry_after`` what the service asked to wait.
    """

    transient: BaseException | None
    retry_after: float | None

    def __new__(
        cls, text: str, transient: BaseException | None = None, retry_after: float | None = None
    ) -> _Unanswered:
        made = super().__new__(cls, text)
        made.transient = transient
        made.retry_after = retry_after
        return made


def _transient_words(error: BaseException, policy: RetryPolicy) -> _Unanswered:
    """Why the model could not be asked, marked transient when ``policy`` retries ``error``."""
    if isinstance(error, ModelRequestError):
        if error.status in _TRANSIENT_REFUSALS:
            return _Unanswered(f"the model could not be asked: {error}", error)
        return _Unanswered(
            f"the model could not be asked, and asking again would fail the same way "
            f"(not retried): {error}"
        )
    if not policy.retries(error):
        return _Unanswered(f"the model could not be asked: {error}")
    if isinstance(error, TimeoutError):
        said = str(error) or "it raised TimeoutError"
        return _Unanswered(f"the model did not answer within its own time limit ({said})", error)
    retry_after = error.retry_after if isinstance(error, ModelUnavailableError) else None
    return _Unanswered(f"the model could not be asked: {error}", error, retry_after)
