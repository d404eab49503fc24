"""Tool coroutines and the plain deadline, shared by the tests that pin the tool call's
deadline shortcuts (tests/test_fast_calls.py, test_fast_paths.py, test_runner_fast_paths.py)
against the whole call within anyio's cancel scope."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel


async def within_plain(call: Any, seconds: float | None) -> Any:
    """The plain version of ``_within``: the whole call within anyio's cancel scope with
    the deadline ``seconds`` from now (``None``: no deadline)."""
    if seconds is None:
        return await call
    with anyio.CancelScope(deadline=anyio.current_time() + seconds):
        return await call
    raise TimeoutError


async def returns() -> str:
    return "done"


async def raises() -> str:
    raise ValueError("the tool failed")


async def waits(times: int, each: float) -> str:
    for _ in range(times):
        await anyio.sleep(each)
    return f"waited {times}"


async def waits_then_raises() -> str:
    await anyio.lowlevel.checkpoint()
    raise KeyError("after a wait")


async def cleans_up() -> str:
    try:
        await anyio.sleep(10)
    except anyio.get_cancelled_exc_class():
        await anyio.lowlevel.checkpoint()  # a cleanup that waits, then the cancellation goes on
        raise
    return "never"
