"""A call awaited under a deadline, as ``anyio.CancelScope(deadline=...)`` bounds it.

``_within(call, seconds)`` is what ``_runtime._within`` does (the call awaited inside a
cancel scope whose deadline is ``seconds`` from now; ``TimeoutError`` when the deadline
cancelled it), and ``_until`` the same with a value in place of that ``TimeoutError``
(the model call's, ``_planning._answered``), cheaper on asyncio, where every call
under a deadline pays for its scope:

- the asyncio backend's ``CancelScope`` class is made directly, and its clock read
  from the loop (``anyio.CancelScope(...)`` and ``anyio.current_time()`` each look the
  backend up first);
- the scope is entered as anyio's own, before the call takes its first step, so every
  scope and task group the call opens nests inside it; only its deadline's timer is
  not the scope's own: the scope is entered without one (no timer scheduled), its
  deadline then set where anyio keeps it (``current_effective_deadline`` reads it),
  and one timer per event loop (``_Deadlines``) serves every scope running on it,
  rescheduled only when a new deadline comes before the one it waits for. When it
  fires, each scope whose deadline has passed is cancelled as anyio's own timer
  cancels it (``cancel("deadline exceeded")``).

A deadline already passed (``seconds <= 0``), a backend other than asyncio, or an
anyio whose asyncio scope does not keep its deadline as ``_deadline`` takes the long
way (``anyio.CancelScope(deadline=...)``). Pinned against the long way by
``tests/test_fast_calls.py``.
"""

from __future__ import annotations

import math
import sys
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

if TYPE_CHECKING:
    import asyncio

_library: Callable[[], str] | None
try:  # anyio asks sniffio which library runs the task when sniffio is installed
    from sniffio import current_async_library as _library
except ModuleNotFoundError:  # pragma: no cover - depends on the environment
    _library = None

__all__ = ["_until", "_within"]

T = TypeVar("T")
E = TypeVar("E")


async def _within(call: Awaitable[T], seconds: float | None) -> T:
    """Await ``call``; one still running ``seconds`` from now is cancelled (``TimeoutError``).

    ``None``: no deadline. As ``anyio.CancelScope(deadline=anyio.current_time() +
    seconds)`` around ``await call`` (the module's docstring says how it is cheaper).
    ``_until``'s body, written out: a coroutine more around every tool call costs.
    """
    if seconds is None:
        return await call
    loop = _asyncio_loop()
    scope_class = None if loop is None else _SCOPE[0] if _SCOPE else _scope_class()
    if loop is None or not seconds > 0 or scope_class is None:
        with anyio.CancelScope(deadline=anyio.current_time() + seconds):
            return await call
        raise TimeoutError
    deadline = loop.time() + seconds
    deadlines = _deadlines(loop)
    with scope_class() as scope:
        scope._deadline = deadline
        deadlines.add(scope, deadline)
        try:
            return await call
        finally:
            deadlines.discard(scope)
    # Reached only when the scope caught its own cancellation: its deadline passed.
    raise TimeoutError


async def _until(call: Awaitable[T], seconds: float, expired: E) -> T | E:
    """What ``call`` returns, or ``expired`` when the deadline ``seconds`` from now
    cancelled it first (a ``TimeoutError`` the call raises itself propagates)."""
    loop = _asyncio_loop()
    scope_class = None if loop is None else _SCOPE[0] if _SCOPE else _scope_class()
    if loop is None or not seconds > 0 or scope_class is None:
        with anyio.CancelScope(deadline=anyio.current_time() + seconds):
            return await call
        return expired
    deadline = loop.time() + seconds
    deadlines = _deadlines(loop)
    with scope_class() as scope:
        scope._deadline = deadline
        deadlines.add(scope, deadline)
        try:
            return await call
        finally:
            deadlines.discard(scope)
    # Reached only when the scope caught its own cancellation: its deadline passed.
    return expired


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop when anyio runs this task on its asyncio backend."""
    # Read from sys.modules: no asyncio loop runs where asyncio was never imported, and
    # importing it here would load it (and what it loads) with the package.
    asyncio = sys.modules.get("asyncio")
    loop = None if asyncio is None else asyncio._get_running_loop()
    if loop is None or _library is None:
        return loop
    try:
        name = _library()
    except Exception:  # sniffio's AsyncLibraryNotFoundError: anyio would refuse too
        return None
    return loop if name == "asyncio" else None


def _scope_class() -> Callable[[], Any] | None:
    """The asyncio backend's ``CancelScope`` class, when it keeps its deadline in the
    ``_deadline`` slot this module sets; else ``None`` (every call takes the long way).
    Read on first use (it imports the backend, as anyio does on its first call)."""
    try:
        from anyio._backends._asyncio import CancelScope
    except ImportError:  # pragma: no cover - depends on anyio's version
        found = None
    else:
        found = CancelScope if "_deadline" in getattr(CancelScope, "__slots__", ()) else None
    _SCOPE.append(found)
    return found


# The class _scope_class found, once it has been asked.
_SCOPE: list[Callable[[], Any] | None] = []


class _Deadlines:
    """The deadlines of the scopes ``_within`` entered on one event loop, behind one timer."""

    __slots__ = ("__weakref__", "_at", "_handle", "_loop", "_scopes")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weakly: the timer's handle refers to this object, which must not keep the loop.
        self._loop = weakref.ref(loop)
        self._scopes: dict[Any, float] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._at = math.inf  # when the timer fires (inf: no timer)

    def add(self, scope: Any, deadline: float) -> None:
        self._scopes[scope] = deadline
        if deadline < self._at:
            self._arm(deadline)

    def discard(self, scope: Any) -> None:
        self._scopes.pop(scope, None)

    def _arm(self, at: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        loop = self._loop()
        if loop is not None:
            self._handle = loop.call_at(at, self._fire)
            self._at = at

    def _fire(self) -> None:
        """Cancel every scope whose deadline has passed; wait for the next one."""
        self._handle, self._at = None, math.inf
        loop = self._loop()
        if loop is None:  # pragma: no cover - a closed loop runs no timer
            return
        now = loop.time()
        due = [scope for scope, deadline in self._scopes.items() if deadline <= now]
        for scope in due:
            del self._scopes[scope]
            scope.cancel("deadline exceeded")
        if self._scopes:
            self._arm(min(self._scopes.values()))


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines] = (
    weakref.WeakKeyDictionary()
)


def _deadlines(loop: asyncio.AbstractEventLoop) -> _Deadlines:
    """The deadlines of ``loop`` (made on first use; forgotten with the loop)."""
    last = _LAST[0]
    if last is not None and last._loop() is loop:  # nearly always: one loop at a time
        return last
    deadlines = _LOOPS.get(loop)
    if deadlines is None:
        deadlines = _LOOPS[loop] = _Deadlines(loop)
    _LAST[0] = deadlines
    return deadlines


# The deadlines _deadlines gave last (their loop held weakly, as in _LOOPS).
_LAST: list[_Deadlines | None] = [None]
