"""Workers: processes that take runnable runs from a shared store and drive them.

A :class:`Worker` loops: ``claim_next`` (a run no live lease holds: submitted, whose
worker died, failed_resumable, or approved by a person), resume it with the runner of
its agent (which renews the lease while it drives), release the lease; when nothing
is runnable it waits ``poll`` and asks again. Any number of workers, in any number of
processes, may share one store: each run is held by one at a time.

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
from typing import Any, Final, cast

import anyio
import structlog

from ._errors import ConfigError
from ._runner import Runner
from .persist._protocol import Leases

__all__ = ["Worker"]

DEFAULT_LEASE: Final = timedelta(seconds=30)
DEFAULT_POLL: Final = timedelta(milliseconds=200)

_log = structlog.wrap_logger(logging.getLogger("statemachine.worker"))


class Worker:
    """Takes runnable runs from ``checkpointer`` and drives each with its agent's runner.

    ``runners`` are the runners to drive runs with, one per agent (a mapping keyed by
    agent name, or the runners themselves); only those agents' runs are taken. ``owner``
    names this worker in the lease history (default ``host:pid``); ``lease`` is how
    long a run stays held without a renewal (renewed every third of it); ``poll`` how
    long to wait when nothing is runnable. ``max_runs`` stops the worker after that many
    runs; ``exit_when_idle`` stops it the first time nothing is runnable.
    """

    def __init__(
        self,
        checkpointer: Leases,
        runners: Mapping[str, Runner[Any]] | Iterable[Runner[Any]],
        *,
        owner: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        poll: timedelta = DEFAULT_POLL,
        max_runs: int | None = None,
        exit_when_idle: bool = False,
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
        if problems:
            raise ConfigError(tuple(problems))
        self.checkpointer = checkpointer
        self.runners = chosen
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.lease = lease
        self.poll = poll
        self.max_runs = max_runs
        self.exit_when_idle = exit_when_idle
        self.outcomes: Counter[str] = Counter()
        self._stopping = anyio.Event()

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
        (waiting for a person), ``stopped`` (stopped, or given back at shutdown) and
        ``error`` (a phase or the store raised; the run is left as the runner marked it).
        With ``handle_signals`` SIGTERM and SIGINT stop the worker as :meth:`stop` does.
        """
        async with anyio.create_task_group() as group:
            if handle_signals:
                group.start_soon(self._watch_signals)
            try:
                await self._loop()
            finally:
                group.cancel_scope.cancel()
        return self.outcomes

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
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
                await self._pause()
                continue
            await self._process(record.run_id, record.agent)

    async def _process(self, run_id: str, agent: str) -> None:
        runner = self.runners[agent]
        log = _log.bind(owner=self.owner, run_id=run_id, agent=agent)
        try:
            result = await runner.resume(
                run_id, owner=self.owner, hand_back=self._stopping, lease=self.lease
            )
        except Exception as error:
            # The runner has recorded what it could (failed_resumable, or interrupted for
            # a person); a pause keeps a run that fails at once from spinning the loop.
            self.outcomes["error"] += 1
            log.warning("run raised", error=repr(error))
            await self._pause()
        else:
            self.outcomes[result.status] += 1
            log.info("run processed", status=result.status, phase=result.final.kind)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self.checkpointer.release(run_id, self.owner)
                except Exception as error:  # it lapses on its own
                    log.warning("release failed", error=repr(error))

    async def _pause(self) -> None:
        with anyio.move_on_after(self.poll.total_seconds()):
            await self._stopping.wait()
