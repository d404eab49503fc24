"""``statemachine worker --agent MODULE``: a :class:`statemachine.Worker` in this process.

Each ``--agent`` module names a factory ``worker_runner(checkpointer) -> Runner`` (or
give ``MODULE:FUNCTION``); the worker takes only those agents' runs. SIGTERM or SIGINT
finish the phase under way and give the run back; a second one ends the process at
once. At the end one line says how many runs the worker took, by outcome.

The store is opened, and checked to answer, before the runners are built: a store
that cannot be reached is refused now (exit 1), not retried forever. A SQLite file
that does not exist yet is created: the worker may start before the first run is
submitted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from .. import Checkpointer, Runner
from .._worker import DEFAULT_LEASE, DEFAULT_POLL, Worker, _log
from ._options import Refusal, close_store, open_store, runner_factory

__all__ = ["run"]

_Factory = Callable[[Checkpointer], Runner[Any]]


def run(args: argparse.Namespace) -> int:
    """Process runs until stopped; print how the runs went; the exit code."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        logging.getLogger("transitions").setLevel(logging.WARNING)  # the lifecycle's own chatter
    factories = [runner_factory(spec) for spec in args.agent]
    outcomes: Counter[str] = anyio.run(_serve, args, factories)
    said = ", ".join(f"{outcome} {count}" for outcome, count in sorted(outcomes.items()))
    print(f"processed {sum(outcomes.values())} runs" + (f": {said}" if said else ""))
    return 0


async def _serve(args: argparse.Namespace, factories: Sequence[_Factory]) -> Counter[str]:
    store = open_store(args, create=True)  # a worker may start before the first run
    try:
        try:
            await store.registry(status=())
        except Exception as error:
            raise Refusal(f"cannot open the store ({error})") from error
        worker = Worker(
            store,
            [make(store) for make in factories],
            owner=args.owner,
            max_runs=args.max_runs,
            exit_when_idle=args.exit_when_idle,
            # Not given: the Worker's own defaults, which the tree's help repeats.
            lease=DEFAULT_LEASE if args.lease is None else args.lease,
            poll=DEFAULT_POLL if args.poll is None else args.poll,
        )
        _log.info(
            "worker started",
            owner=worker.owner,
            agents=sorted(worker.runners),
            lease=str(worker.lease),
        )
        outcomes = await worker.run(handle_signals=True)
        _log.info("worker stopped", owner=worker.owner, processed=worker.processed)
        return outcomes
    finally:
        await close_store(store)
