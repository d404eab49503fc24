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

``python -m statemachine worker --agent agents.support`` runs one worker; the agent
module names a factory ``worker_runner(checkpointer) -> Runner`` (or give
``module:function``). ``--help`` lists the settings.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import signal
import socket
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, cast

import anyio
import structlog

from ._crypto import ENV_VAR as KEYS_VAR
from ._crypto import CheckpointCipher
from ._errors import ConfigError
from ._runner import Runner
from ._store import Checkpointer, SQLiteCheckpointer

__all__ = ["Worker", "main"]

DB_VAR: Final = "STATEMACHINE_DB"
DSN_VAR: Final = "STATEMACHINE_DSN"
DEFAULT_DB: Final = "statemachine.db"
DEFAULT_LEASE: Final = timedelta(seconds=30)
DEFAULT_POLL: Final = timedelta(milliseconds=200)
FACTORY: Final = "worker_runner"

_log = structlog.wrap_logger(logging.getLogger("statemachine.worker"))

RunnerFactory = Callable[[Checkpointer], Runner[Any]]


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
        checkpointer: Checkpointer,
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


# --- the command ---------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\Z")
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(text: str) -> timedelta:
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; write a number with a unit: 200ms, 0.2s, 30s, 5m, 1h"
        )
    seconds = float(match[1]) * _UNIT_SECONDS[match[2] or "s"]
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration")
    return timedelta(seconds=seconds)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m statemachine worker",
        description=(
            "Process runs from a shared store until stopped (SIGTERM or SIGINT: the phase "
            "under way is finished and its run given back)."
        ),
    )
    parser.add_argument(
        "--agent",
        action="append",
        required=True,
        metavar="MODULE[:FUNCTION]",
        help=f"module whose {FACTORY}(checkpointer) builds a Runner (repeat for more agents)",
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--db", metavar="PATH", help=f"the runs' SQLite file (${DB_VAR}, else {DEFAULT_DB})"
    )
    store.add_argument("--dsn", help=f"a PostgreSQL connection string (${DSN_VAR})")
    parser.add_argument(
        "--key-file",
        metavar="PATH",
        help=f"keys of an encrypted store, id:base64key entries (or ${KEYS_VAR})",
    )
    parser.add_argument("--lease", type=_duration, default=DEFAULT_LEASE, help="default 30s")
    parser.add_argument("--poll", type=_duration, default=DEFAULT_POLL, help="default 200ms")
    parser.add_argument("--max-runs", type=_positive, metavar="N", help="stop after N runs")
    parser.add_argument(
        "--exit-when-idle", action="store_true", help="stop when no run is left to take"
    )
    parser.add_argument("--owner", help="this worker's name in the lease history (host:pid)")
    return parser


class _Refused(Exception):
    """A setting the worker cannot start with: one line on stderr, exit code 1."""


def _sealer(key_file: str | None) -> CheckpointCipher | None:
    if key_file:
        path = Path(key_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise _Refused(f"cannot read the key file {str(path)!r} ({error.strerror})") from None
        entries = ",".join(part.strip() for part in re.split(r"[,\n]", text) if part.strip())
        where = f"key file {path}"
        return CheckpointCipher.from_env(where, environ={where: entries})
    if os.environ.get(KEYS_VAR, "").strip():
        return CheckpointCipher.from_env()
    return None


def _open_store(args: argparse.Namespace) -> Checkpointer:
    sealer = _sealer(args.key_file)
    dsn = args.dsn or ("" if args.db else os.environ.get(DSN_VAR, ""))
    if dsn:
        try:
            postgres = importlib.import_module("statemachine._postgres")
            store: Checkpointer = postgres.PostgresCheckpointer(dsn, sealer=sealer)
        except (ImportError, AttributeError) as error:
            raise _Refused(
                f"the PostgreSQL store is not available here ({error}); install psycopg "
                "(pip install 'statemachine[postgres]'), or use --db for a SQLite file"
            ) from None
        return store
    return SQLiteCheckpointer(Path(args.db or os.environ.get(DB_VAR) or DEFAULT_DB), sealer=sealer)


def _factory(spec: str) -> RunnerFactory:
    module_name, _, function = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise _Refused(f"cannot import the agent module {module_name!r} ({error})") from None
    name = function or FACTORY
    found = getattr(module, name, None)
    if not callable(found):
        raise _Refused(
            f"{module_name} has no {name}(checkpointer) that builds a Runner; define one, "
            "or name the function as MODULE:FUNCTION"
        )
    factory = cast(RunnerFactory, found)
    return factory


async def _serve(args: argparse.Namespace, factories: Sequence[RunnerFactory]) -> Counter[str]:
    store = _open_store(args)
    try:
        try:  # a store that cannot be reached is refused now, not retried forever
            await store.registry(status=())
        except Exception as error:
            raise _Refused(f"cannot open the store ({error})") from error
        runners: list[Runner[Any]] = []
        for make in factories:
            runner = make(store)
            if not isinstance(runner, Runner):
                raise _Refused(f"{make!r} returned {type(runner).__name__}, not a Runner")
            runners.append(runner)
        worker = Worker(
            store,
            runners,
            owner=args.owner,
            lease=args.lease,
            poll=args.poll,
            max_runs=args.max_runs,
            exit_when_idle=args.exit_when_idle,
        )
        _log.info(
            "worker started",
            owner=worker.owner,
            agents=sorted(worker.runners),
            lease=str(args.lease),
        )
        outcomes = await worker.run(handle_signals=True)
        _log.info("worker stopped", owner=worker.owner, processed=worker.processed)
        return outcomes
    finally:
        aclose = getattr(store, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


def main(argv: Sequence[str]) -> int:
    """``python -m statemachine worker ...``: process runs until stopped; the exit code.

    ``argv[0]`` is the command's name. Prints one line at the end: how many runs the
    worker took, by outcome. Exit codes: 0 stopped as asked, 1 a setting it cannot start
    with (one line on stderr), 2 a command line it cannot read, 130 a second SIGINT.
    """
    args = _parser().parse_args(list(argv[1:]))
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        logging.getLogger("transitions").setLevel(logging.WARNING)  # the lifecycle's own chatter
    try:
        factories = [_factory(spec) for spec in args.agent]
        outcomes = anyio.run(_serve, args, factories)
    except (_Refused, ConfigError) as error:
        print(f"statemachine worker: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a second SIGINT: out at once; the lease lapses on its own
        print("statemachine worker: interrupted", file=sys.stderr)
        return 130
    said = ", ".join(f"{outcome} {count}" for outcome, count in sorted(outcomes.items()))
    print(f"processed {sum(outcomes.values())} runs" + (f": {said}" if said else ""))
    return 0
