"""statemachine._retry: attempt caps, backoff with jitter, and which errors earn a retry."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import exactly

from statemachine import RetryPolicy, SetupError, ToolError

# --- validation -------------------------------------------------------------------------


@pytest.mark.parametrize("attempts", [0, -1])
def test_fewer_than_one_attempt_is_a_setup_error(attempts: int) -> None:
    """max_attempts counts the first try, so it must be at least 1."""
    message = f"max_attempts must be at least 1 (one try, no retry), got {attempts}"
    with pytest.raises(SetupError, match=exactly(message)):
        RetryPolicy(max_attempts=attempts)


@pytest.mark.parametrize("field", ["base_delay", "max_delay"])
def test_a_negative_delay_is_a_setup_error(field: str) -> None:
    """A delay is a number of seconds, zero or more."""
    message = f"{field} must be zero or more seconds, got -0.5"
    with pytest.raises(SetupError, match=exactly(message)):
        RetryPolicy(**{field: -0.5})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0.5, -1.0, float("nan")])
def test_a_multiplier_below_one_is_a_setup_error(value: float) -> None:
    """A delay that shrinks with each attempt is not backoff: the multiplier is at least 1."""
    with pytest.raises(SetupError) as caught:
        RetryPolicy(multiplier=value)
    assert str(caught.value) == (
        f"multiplier must be 1 or more (1 keeps the delay constant), got {value}"
    )


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
def test_a_jitter_outside_zero_to_one_is_a_setup_error(value: float) -> None:
    """The jitter is a fraction of the delay, from 0 to 1."""
    with pytest.raises(SetupError) as caught:
        RetryPolicy(jitter=value)
    assert str(caught.value) == (
        f"jitter must be a fraction from 0 (none) to 1 (anywhere from 0 to the delay), got {value}"
    )


@pytest.mark.parametrize("field", ["multiplier", "jitter"])
def test_the_error_for_a_multiplier_or_jitter_does_not_call_it_seconds(field: str) -> None:
    """A multiplier and a jitter fraction are plain numbers; the message must not say seconds."""
    with pytest.raises(SetupError) as caught:
        RetryPolicy(**{field: -1.0})  # type: ignore[arg-type]
    assert "seconds" not in str(caught.value)


def test_the_defaults_are_three_attempts_with_growing_delays() -> None:
    """RetryPolicy() tries three times, 0.2 s doubling up to 10 s, half-jittered."""
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.base_delay, policy.multiplier) == (3, 0.2, 2.0)
    assert (policy.max_delay, policy.jitter) == (10.0, 0.5)
    assert policy.retry_on == (TimeoutError, ToolError)


# --- delay ------------------------------------------------------------------------------


def test_delay_without_jitter_grows_by_the_multiplier() -> None:
    """With no jitter, the delays after attempts 1, 2, 3, 4 are 0.2, 0.4, 0.8, 1.6 s."""
    policy = RetryPolicy(base_delay=0.2, multiplier=2.0, jitter=0.0)
    assert [policy.delay(attempt) for attempt in (1, 2, 3, 4)] == pytest.approx(
        [0.2, 0.4, 0.8, 1.6]
    )


def test_delay_is_capped_at_max_delay() -> None:
    """1 s growing tenfold would be 100 s after attempt 3; max_delay=5 caps it at 5 s."""
    policy = RetryPolicy(base_delay=1.0, multiplier=10.0, max_delay=5.0, jitter=0.0)
    assert policy.delay(3) == 5.0


def test_delay_is_capped_for_a_very_late_attempt() -> None:
    """Attempt 2000 of a doubling policy waits max_delay (jittered), it does not overflow."""
    policy = RetryPolicy(max_attempts=5000, base_delay=0.2, multiplier=2.0, max_delay=10.0)
    assert 5.0 <= policy.delay(2000, random.Random(0)) <= 10.0


def test_full_jitter_spreads_the_delay_down_to_zero_at_most() -> None:
    """A jitter of 1 draws the delay from [0, ceiling]: never negative."""
    policy = RetryPolicy(base_delay=1.0, multiplier=1.0, jitter=1.0)
    delays = [policy.delay(1, random.Random(seed)) for seed in range(50)]
    assert all(0.0 <= delay <= 1.0 for delay in delays)


def test_delay_with_the_same_seed_is_repeatable() -> None:
    """Two generators with one seed give the same jittered delays."""
    policy = RetryPolicy()
    first = [policy.delay(attempt, random.Random(7)) for attempt in range(1, 6)]
    second = [policy.delay(attempt, random.Random(7)) for attempt in range(1, 6)]
    assert first == second


@settings(max_examples=200, deadline=None)
@given(
    attempt=st.integers(min_value=1, max_value=60),
    seed=st.integers(min_value=0, max_value=2**32),
    base_delay=st.floats(min_value=0.0, max_value=5.0),
    multiplier=st.floats(min_value=1.0, max_value=10.0),
    max_delay=st.floats(min_value=0.0, max_value=60.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
)
def test_delay_stays_between_the_jitter_floor_and_the_capped_ceiling(
    attempt: int,
    seed: int,
    base_delay: float,
    multiplier: float,
    max_delay: float,
    jitter: float,
) -> None:
    """Every delay lies in [ceiling * (1 - jitter), ceiling], and the ceiling is <= max_delay."""
    policy = RetryPolicy(
        base_delay=base_delay, multiplier=multiplier, max_delay=max_delay, jitter=jitter
    )
    ceiling = min(max_delay, base_delay * multiplier ** (attempt - 1))
    low = ceiling * (1.0 - jitter)
    delay = policy.delay(attempt, random.Random(seed))
    # random.uniform may round to one ulp past either end; allow that and nothing more.
    slack = 1e-12 * max(ceiling, 1.0)
    assert low - slack <= delay <= ceiling + slack
    assert delay <= max_delay + slack


# --- retries ----------------------------------------------------------------------------


class SlowService(TimeoutError):
    """A subclass of TimeoutError, as a tool's client library might raise."""


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (TimeoutError(), True),
        (SlowService(), True),
        (ToolError("503 from the airline"), True),
        (ToolError("503 from the airline", retryable=True, status=503), True),
        (ToolError("card declined", retryable=False), False),
        (ValueError("bad input"), False),
        (KeyError("city"), False),
        (KeyboardInterrupt(), False),
    ],
)
def test_the_default_policy_retries_timeouts_and_retryable_tool_errors(
    error: BaseException, retried: bool
) -> None:
    """Timeouts and ToolError(retryable=True) earn another attempt; anything else does not."""
    assert RetryPolicy().retries(error) is retried


def test_retry_on_chooses_the_kinds_of_error_that_are_retried() -> None:
    """retry_on=(ValueError,) retries a ValueError and no longer retries a timeout."""
    policy = RetryPolicy(retry_on=(ValueError,))
    assert policy.retries(ValueError("flaky parse")) is True
    assert policy.retries(TimeoutError()) is False


def test_a_non_retryable_tool_error_is_never_retried_whatever_retry_on_says() -> None:
    """ToolError(retryable=False) says another attempt cannot help; retry_on cannot override it."""
    policy = RetryPolicy(retry_on=(ToolError, Exception))
    assert policy.retries(ToolError("card declined", retryable=False)) is False
