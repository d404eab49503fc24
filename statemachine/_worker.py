"""Workers: processes that take runnable runs from a shared store and drive them.

A :class:`Worker` loops: ``claim_next`` (a run no live lease holds: submitted, whose
worker died, failed_resumable and due for a retry, or approved by a person), resume it
with the runner of its agent (which renews the lease while it drives), release the
lease; when nothing is runnable it waits ``poll`` and asks again. Any number of
workers, in any number of processes, may share one store: each run is held by one at a
time.

A worker never spins on a run it cannot go on with. A run whose checkpoint cannot be
loaded (corrupt, sealed with a key this worker lacks, written by code this worker does
not have, of an agent it has no runner for) is *held* for a person at once
(``hold``: the reason is in its registry row, ``runs show`` and ``runs list`` show it),
logged once, and never taken again until a person resumes it. A run whose phase raises
is ``failed_resumable``; the store counts its failures in a row and keeps it from every
worker until its retry time (at once, then 1s, 2s, 4s ... at most 5 minutes); after
``max_failures`` failures in a row the worker holds it too. With ``exit_when_idle`` a
worker stops the first time nothing is runnable, which is also when only held runs, or
failed ones waiting for their retry time, are left.

On SIGTERM or SIGINT (:meth:`Worker.run` with ``handle_signals=True``, as the
command does) a worker finishes the phase under way, saves it, releases its lease
and exits: the run stays ``running`` and the next worker goes on from that
checkpoint. A second signal ends the process at once (the default handlers are
back); its lease then lapses and another worker takes the run.

``python -m statemachine worker --agent agents.support`` (``statemachine/cli/_worker.py``)
runs one worker; the agent module names a factory ``worker_runner(checkpointer) ->
Runner`` (or give ``module:function``). ``--help`` lists the settings.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Final, Protocol, cast

import anyio
import anyio.abc
import structlog

from ._errors import CheckpointError, ConfigError, SetupError
from ._runner import Runner
from .persist._lifecycle import RunStatus
from .persist._protocol import Leases, Registry, RunRecord

__all__ = ["Worker"]

DEFAULT_LEASE: Final = timedelta(seconds=30)
DEFAULT_POLL: Final = timedelta(milliseconds=200)
_COUNT_EVERY: Final = 10.0  # seconds between idle readings of the approvals gauge
DEFAULT_MAX_FAILURES: Final = 5
# What a resume raises when the run cannot be loaded here, or when going on with it
# needs a person (code or keys to deploy, a damaged store to repair): retrying it is no
# use. A checkpoint that is not what this code reads, a key missing, code missing.
_NEEDS_A_PERSON: Final = (CheckpointError, SetupError, ImportError)


class _Store(Leases, Registry, Protocol):
    """What a worker uses of a store: leases, and the registry to hold a run."""


_log = structlog.wrap_logger(logging.getLogger("statemachine.worker"))


class Worker:
    """Takes runnable runs from ``checkpointer`` and drives each with its agent's runner.

    ``runners`` are the runners to drive runs with, one per agent (a mapping keyed by
    agent name, or the runners themselves); only those agents' runs are taken. ``owner``
    names this worker in the lease history (default ``host:pid``); ``lease`` is how
    long a run stays held without a renewal (renewed every third of it); ``poll`` how
    long to wait when nothing is runnable. ``max_runs`` stops the worker after that many
    runs; ``exit_when_idle`` stops it the first time nothing is runnable (held runs,
    and failed runs before their retry time, are not). ``max_failures`` is how many
    failures in a row of one run the worker retries before it holds the run for a
    person.
    """

    def __init__(
        self,
        checkpointer: _Store,
        runners: Mapping[str, Runner[Any]] | Iterable[Runner[Any]],
        *,
        owner: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        poll: timedelta = DEFAULT_POLL,
        max_runs: int | None = None,
        exit_when_idle: bool = False,
        max_failures: int = DEFAULT_MAX_FAILURES,
    ) -> None:
        chosen: dict[str, Runner[Any]] = (
            dict(cast("Mapping[str, Runner[Any]]", runners))
            if isinstance(runners, Mapping)
            else {runner.agent.name: runner for runner in runners}
        )
        problems: list[str] = []
        if not chosen:
            problems.append("a worker needs at least one runner")
        for name, runner in chosen.items():
            if runner.agent.name != name:
                problems.append(f"the runner under {name!r} runs the agent {runner.agent.name!r}")
        if lease <= timedelta(0):
            problems.append(f"lease must be a positive duration, got {lease!r}")
        if poll < timedelta(0):
            problems.append(f"poll must not be negative, got {poll!r}")
        if max_runs is not None and max_runs < 1:
            problems.append(f"max_runs must be a positive int, got {max_runs!r}")
        if max_failures < 1:
            problems.append(f"max_failures must be a positive int, got {max_failures!r}")
        if problems:
            raise ConfigError(tuple(problems))
        self.checkpointer = checkpointer
        self.runners = chosen
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.lease = lease
        self.poll = poll
        self.max_runs = max_runs
        self.exit_when_idle = exit_when_idle
        self.max_failures = max_failures
        self.outcomes: Counter[str] = Counter()
        # Runs whose resume raised before anything was recorded (the store counts no
        # failure for them), by how many times in a row, so that they are held too.
        self._unrecorded: Counter[str] = Counter()
        self._stopping = anyio.Event()
        self._counted_at: float | None = None  # when the approvals gauge was last read

    @property
    def processed(self) -> int:
        """How many runs this worker took so far."""
        return sum(self.outcomes.values())

    def stop(self) -> None:
        """Stop soon: the run under way stops at its next checkpoint and is given back."""
        self._stopping.set()

    async def run(self, *, handle_signals: bool = False) -> Counter[str]:
        """Process runs until stopped, ``max_runs`` is reached, or (``exit_when_idle``) idle.

        Returns how the runs it took went, by outcome: ``done``, ``failed``, ``paused``
        (waiting for a person), ``stopped`` (stopped, or given back at shutdown),
        ``error`` (a phase or the store raised; the run is left as the runner marked it,
        to be retried) and ``held`` (the run cannot go on without a person: held).
        With ``handle_signals`` SIGTERM and SIGINT stop the worker as :meth:`stop` does.
        """
        async with anyio.create_task_group() as group:
            if handle_signals:
                # Watched before the first claim: a signal from here on stops the worker.
                await group.start(self._watch_signals)
            try:
                await self._loop()
            finally:
                group.cancel_scope.cancel()
        return self.outcomes

    async def _watch_signals(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Stop the worker at the first SIGTERM or SIGINT; ``task_status`` is told once
        the handlers are in place (from then on a signal is a stop, not the default end)."""
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for received in signals:
                _log.info(
                    "stopping: finishing the phase under way",
                    owner=self.owner,
                    signal=signal.Signals(received).name,
                )
                self.stop()
                return  # leaving the receiver restores the default handlers

    async def _loop(self) -> None:
        agents = sorted(self.runners)
        while not self._stopping.is_set():
            if self.max_runs is not None and self.processed >= self.max_runs:
                return
            try:
                record = await self.checkpointer.claim_next(
                    self.owner, agents=agents, lease=self.lease
                )
            except Exception as error:  # the store is briefly unreachable: wait and retry
                _log.warning("claim failed", owner=self.owner, error=repr(error))
                await self._pause()
                continue
            if record is None:
                if self.exit_when_idle:
                    return
                await self._count_waiting()
                await self._pause()
                continue
            await self._process(record)

    async def _count_waiting(self) -> None:
        """While idle, read the runs waiting for an approval into the gauge (each runner
        reads at the end of its drives), at most every ``_COUNT_EVERY`` seconds: a
        decision or an abort made elsewhere shows without a run going by."""
        now = anyio.current_time()
        if self._counted_at is not None and now - self._counted_at < _COUNT_EVERY:
            return
        self._counted_at = now
        for runner in self.runners.values():
            await runner.count_waiting()

    async def _process(self, record: RunRecord) -> None:
        run_id = record.run_id
        log = _log.bind(owner=self.owner, run_id=run_id, agent=record.agent)
        try:
            await self._drive(record, log)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self.checkpointer.release(run_id, self.owner)
                except Exception as error:  # it lapses on its own
                    log.warning("release failed", error=repr(error))

    async def _drive(self, record: RunRecord, log: Any) -> None:
        """Resume the claimed run; hold it instead when it cannot go on without a person."""
        run_id = record.run_id
        runner = self.runners.get(record.agent)
        if runner is None:  # claim_next was told this worker's agents: a store that ignored it
            await self._hold(record, f"no runner for its agent {record.agent!r}", log)
            return
        if record.status is RunStatus.FAILED_RESUMABLE and record.failures >= self.max_failures:
            # Counted by another worker, or one that stopped before it could hold it.
            await self._hold(record, self._too_many(record.failures, None), log)
            return
        try:
            result = await runner.resume(
                run_id, owner=self.owner, hand_back=self._stopping, lease=self.lease
            )
        except Exception as raised:
            error = _unwrapped(raised)
            if isinstance(error, _NEEDS_A_PERSON):
                said = f"a worker cannot go on with it: {type(error).__name__}: {error}"
                await self._hold(record, said, log)
                return
            # The runner has recorded what it could (failed_resumable, or interrupted for
            # a person); a pause keeps a run that fails at once from spinning the loop.
            self.outcomes["error"] += 1
            log.warning("run raised", error=repr(error))
            await self._hold_if_failing(record, error, log)
            await self._pause()
        else:
            self._unrecorded.pop(run_id, None)
            self.outcomes[result.status] += 1
            log.info("run processed", status=result.status, phase=result.final.kind)

    def _too_many(self, failures: int, error: BaseException | None) -> str:
        last = "" if error is None else f", the last time with {type(error).__name__}: {error}"
        times = "1 time" if failures == 1 else f"{failures} times"
        return f"failed {times} in a row{last} (this worker retries {self.max_failures})"

    async def _hold_if_failing(self, claimed: RunRecord, error: BaseException, log: Any) -> None:
        """Hold the run when this failure was its ``max_failures``-th in a row.

        The store counts a failure the runner marked (``failed_resumable``); one raised
        before the runner recorded anything (the run is as it was claimed) is counted
        here, by this worker, so that it cannot be taken again and again either.
        """
        run_id = claimed.run_id
        try:
            record = await self.checkpointer.record(run_id)
        except Exception as unread:  # the store is briefly unreachable: the next claim checks
            log.warning("record unread", error=repr(unread))
            return
        failures = 0
        if record.status is RunStatus.FAILED_RESUMABLE:
            failures = record.failures
        elif (record.status, record.seq) == (claimed.status, claimed.seq) and not record.held:
            self._unrecorded[run_id] += 1
            failures = self._unrecorded[run_id]
        if failures >= self.max_failures:
            self._unrecorded.pop(run_id, None)
            await self._hold(record, self._too_many(failures, error), log, count=False)

    async def _hold(self, record: RunRecord, reason: str, log: Any, *, count: bool = True) -> None:
        """Hold the run for a person with ``reason``, and say so once."""
        if count:
            self.outcomes["held"] += 1
        held: RunRecord | None = None
        with anyio.CancelScope(shield=True):  # a stop does not leave the run to spin
            try:
                held = await self.checkpointer.hold(record.run_id, reason)
            except Exception as error:  # not held: the next claim finds it again, and retries
                log.warning("hold failed", reason=reason, error=repr(error))
        if held is None:
            await self._pause()
            return
        if not held.held:  # stopped by a person meanwhile: theirs already
            log.info("run not held", status=held.status.value)
            return
        log.warning(
            "run held for a person",
            reason=held.reason,
            status=held.status.value,
            resume=f"statemachine runs resume {record.run_id}",
        )

    async def _pause(self) -> None:
        with anyio.move_on_after(self.poll.total_seconds()):
            await self._stopping.wait()


def _unwrapped(error: BaseException) -> BaseException:
    """The one error inside task groups' exception groups (the runner drives in one)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
