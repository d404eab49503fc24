"""The leases a runner holds on the saved runs it drives: claimed, renewed, handed back.

A saved run goes on under a lease, so that many workers can share one store: claimed
before it goes on (or already claimed by the caller, a worker's ``claim_next``),
renewed in the background every third of the lease, and released at the end. A lease
lost to another worker stops the run where it is, without changing its status.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, final

import anyio

from ._errors import RunClaimedError, SetupError

if TYPE_CHECKING:
    from ._runner import RunResult
    from .persist._protocol import Checkpointer

__all__ = ["DEFAULT_LEASE", "_Driving", "_Leases"]

R = TypeVar("R")

DEFAULT_LEASE = timedelta(minutes=1)


def _positive(lease: timedelta) -> timedelta:
    if lease <= timedelta(0):
        raise SetupError(f"lease must be a positive duration, got {lease!r}")
    return lease


class _Driving:
    """A run this runner is driving: its cancel scope, and how it ended when stopped.

    ``hand_back`` set: stop at the next checkpoint, leaving the run running. ``lost``:
    the lease went to another worker, so the run's status is no longer ours to set.
    """

    def __init__(self, hand_back: anyio.Event | None = None) -> None:
        self.scope = anyio.CancelScope()  # entered when the loop starts; cancel() may come first
        self.hand_back = hand_back
        self.lost = False
        self.finished = anyio.Event()
        self.result: RunResult[Any] | None = None


@final
class _Leases:
    """The runs one runner is driving (``running``, by id), and the leases it holds.

    ``lease`` is how long a claim lasts when a call gives none; ``agent`` and ``log``
    (a function giving the library's structlog logger) are for the warnings a renewal
    writes.
    """

    __slots__ = ("_agent", "_lease", "_log", "running")

    def __init__(self, lease: timedelta, *, agent: str, log: Callable[[], Any]) -> None:
        self._lease = _positive(lease)
        self._agent = agent
        self._log = log
        self.running: dict[str, _Driving] = {}

    def forget(self, run_id: str, driving: _Driving) -> None:
        """The run is no longer driven here: stop() has nothing to cancel."""
        if self.running.get(run_id) is driving:
            del self.running[run_id]
        driving.finished.set()

    async def hold(
        self,
        checkpointer: Checkpointer,
        run_id: str,
        owner: str | None,
        hand_back: anyio.Event | None,
        work: Callable[[], Awaitable[R]],
        *,
        lease: timedelta | None = None,
    ) -> R:
        """Do ``work`` (driving ``run_id``) while holding its lease, renewed in the background.

        ``owner`` is the caller's name for a lease it already holds (it releases it);
        ``None`` claims the run here and releases it at the end.
        """
        claimed_here = owner is None
        holder = uuid.uuid4().hex if owner is None else owner
        lease = _positive(self._lease if lease is None else lease)
        if run_id in self.running:
            raise RunClaimedError(run_id)  # this runner drives it already
        # Known before the claim, so that stop() finds the run from the start.
        driving = self.running[run_id] = _Driving(hand_back)
        result: R | None = None
        error: BaseException | None = None
        try:
            if claimed_here and not await checkpointer.claim(run_id, holder, lease=lease):
                claimed_here = False  # nothing to release
                raise RunClaimedError(run_id)
            async with anyio.create_task_group() as group:
                group.start_soon(self._keep, checkpointer, run_id, holder, lease, driving)
                try:
                    result = await work()
                except anyio.get_cancelled_exc_class():
                    raise
                except BaseException as exc:  # raised below as it is, not in an exception group
                    error = exc
                finally:
                    group.cancel_scope.cancel()
        finally:
            self.forget(run_id, driving)
            if claimed_here:
                with anyio.CancelScope(shield=True):
                    await checkpointer.release(run_id, holder)
        if error is not None:
            raise error
        if result is None:  # pragma: no cover - work either returns or raises
            raise AssertionError("the run neither returned nor raised")
        return result

    async def _keep(
        self,
        checkpointer: Checkpointer,
        run_id: str,
        owner: str,
        lease: timedelta,
        driving: _Driving,
    ) -> None:
        """Renew the lease every third of it; when it is lost, stop driving the run."""
        every = lease.total_seconds() / 3
        log = self._log().bind(run_id=run_id, agent=self._agent, owner=owner)
        while True:
            await anyio.sleep(every)  # real time, whatever sleep the phases are given
            try:
                kept = await checkpointer.renew(run_id, owner, lease=lease)
            except Exception as error:  # the store is briefly unreachable: try again
                log.warning("lease renewal failed", error=repr(error))
                continue
            if not kept:
                log.warning("lease lost: another worker may hold the run; stopping here")
                driving.lost = True
                driving.scope.cancel()
                return
