"""The runner's shortcuts do exactly what the long way does.

A tool call that never waits runs without its deadline's cancel scope (``_within``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from statemachine import _runtime

pytestmark = pytest.mark.anyio


async def _within_plain(call: Any, seconds: float | None) -> Any:
    """``_within`` as it was: every call under a deadline within the cancel scope."""
    if seconds is None:
        return await call
    with anyio.CancelScope(deadline=anyio.current_time() + seconds):
        return await call
    raise TimeoutError


async def _returns() -> str:
    return "done"


async def _raises() -> str:
    raise ValueError("the tool failed")


async def _calls_sync_code() -> list[int]:
    def inner() -> list[int]:
        return [number * 2 for number in range(3)]

    return inner()


async def _waits() -> str:
    await anyio.lowlevel.checkpoint()
    return "waited"


async def _waits_past() -> str:
    await anyio.sleep(1)
    return "never"


class _Context:
    async def __aenter__(self) -> None:
        await anyio.lowlevel.checkpoint()

    async def __aexit__(self, *exc: object) -> None:
        return None


async def _enters_async_with() -> str:
    async with _Context():
        return "entered"


class _Numbers:
    def __init__(self) -> None:
        self.left = 2

    def __aiter__(self) -> _Numbers:
        return self

    async def __anext__(self) -> int:
        await anyio.lowlevel.checkpoint()
        self.left -= 1
        if self.left < 0:
            raise StopAsyncIteration
        return self.left


async def _iterates() -> list[int]:
    return [number async for number in _Numbers()]


async def _loops() -> int:
    total = 0
    async for number in _Numbers():
        total += number
    return total


async def _awaits_in_a_comprehension() -> list[str]:
    return [await _waits() for _ in range(2)]


class _Awaitable:
    def __await__(self) -> Any:
        yield from anyio.lowlevel.checkpoint().__await__()
        return "awaited"


_NEVER_WAIT = [_returns, _raises, _calls_sync_code]
_MAY_WAIT = [_waits, _waits_past, _enters_async_with, _iterates, _loops, _awaits_in_a_comprehension]


@pytest.mark.parametrize("function", _NEVER_WAIT, ids=lambda f: f.__name__)
def test_a_coroutine_without_a_wait_is_read_as_never_waiting(function: Callable[[], Any]) -> None:
    assert _runtime._never_waits(function.__code__)


@pytest.mark.parametrize("function", _MAY_WAIT, ids=lambda f: f.__name__)
def test_every_way_a_coroutine_can_wait_is_read_as_waiting(function: Callable[[], Any]) -> None:
    """await, async with, async for, an async comprehension, an await in a comprehension."""
    assert not _runtime._never_waits(function.__code__)


_CASES: list[tuple[Callable[[], Any], float | None]] = [
    (make, seconds)
    for make in (*_NEVER_WAIT, *_MAY_WAIT, _Awaitable)
    for seconds in (None, 5.0, 0.02, 0.0, -1.0)
]


@pytest.mark.parametrize(
    ("make", "seconds"), _CASES, ids=[f"{make.__name__}-{seconds}" for make, seconds in _CASES]
)
async def test_a_call_ends_as_it_did_wholly_within_the_cancel_scope(
    make: Callable[[], Any], seconds: float | None
) -> None:
    """Its value, its error or the deadline's ``TimeoutError``, the same either way,
    whatever the deadline (ahead, passed, none)."""

    async def ended(within: Any) -> tuple[str, object]:
        try:
            return "value", await within(make(), seconds)
        except Exception as error:
            return type(error).__name__, str(error)

    assert await ended(_runtime._within) == await ended(_within_plain)


@pytest.mark.parametrize("make", [_returns, _waits_past], ids=lambda f: f.__name__)
async def test_a_call_in_a_cancelled_run_ends_as_before(make: Callable[[], Any]) -> None:
    """Within a scope already cancelled (``Runner.stop``), a call that never waits ends
    with its value either way, and one that waits is cancelled either way."""
    outcomes: list[tuple[object, bool]] = []
    for within in (_runtime._within, _within_plain):
        value: object = None
        with anyio.CancelScope() as outer:
            outer.cancel()
            value = await within(make(), 5.0)
        outcomes.append((value, outer.cancelled_caught))
    assert outcomes[0] == outcomes[1]
