"""``statemachine worker --agent MODULE``: a :class:`statemachine.Worker` in this process.

Each ``--agent`` module names a factory ``worker_runner(checkpointer) -> Runner`` (or
give ``MODULE:FUNCTION``); the worker takes only those agents' runs. SIGTERM or SIGINT
finish the phase under way and give the run back; a second one ends the process at
once. At the end one line says how many runs the worker took, by outcome.

The handlers are in place when the ``worker started`` line is logged. A signal before
it (while Python starts, the agents are imported, the store is opened) is not a stop:
SIGTERM ends the process at once (killed by it: no exit code of its own), SIGINT as an
interrupt does. The worker has taken no run by then, so none is left held.

The store is opened, and checked to answer, before the runners are built: a store
that cannot be reached is refused now (exit 1), not retried forever. A store option
that names no runs store (no file there, an empty file, another application's
database) is refused with exit 2, as by every command; ``--create`` makes the store
when there is none yet (as ``statemachine init`` does), for a worker started before
the first run is submitted.

A run the worker cannot go on with (its checkpoint cannot be loaded, or it failed
``--max-failures`` times in a row) is held for a person once, with the reason in its
registry row, and logged once; ``--exit-when-idle`` stops the worker when only such
runs, or failed ones waiting for their retry time, are left.
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
from .._worker import DEFAULT_LEASE, DEFAULT_MAX_FAILURES, DEFAULT_POLL, Worker, _log
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
    store = await open_store(args, create=args.create)
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
            max_failures=DEFAULT_MAX_FAILURES if args.max_failures is None else args.max_failures,
            # Not given: the Worker's own defaults, which the tree's help repeats.
            lease=DEFAULT_LEASE if args.lease is None else args.lease,
            poll=DEFAULT_POLL if args.poll is None else args.poll,
        )
        async with anyio.create_task_group() as group:
            # The handlers first: once "worker started" is said, a signal is a stop.
            await group.start(worker._watch_signals)
            _log.info(
                "worker started",
                owner=worker.owner,
                agents=sorted(worker.runners),
                lease=str(worker.lease),
            )
            try:
                await worker.run()
            finally:
                group.cancel_scope.cancel()
        _log.info("worker stopped", owner=worker.owner, processed=worker.processed)
        return worker.outcomes
    finally:
        await close_store(store)
