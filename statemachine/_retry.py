"""``RetryPolicy``: how many attempts a tool gets and how long to wait between them.

The policy belongs to the ``Retrying`` phase, never to the model: the model does
not see a failed attempt and cannot ask for another one.
"""

from __future__ import annotations

import random

import attrs

from ._errors import SetupError, ToolError

__all__ = ["RetryPolicy"]


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
