"""Demo: ``python -m agents.support`` runs every scenario offline and prints what happened.

``python -m agents.support submit [--db PATH | --dsn DSN] [--count N] [--seed S]``
submits ``N`` customers' requests to a store for workers
(``python -m statemachine worker --agent agents.support``) and prints their run ids.

``--trace`` prints every span with OpenTelemetry's console exporter, and ``--log`` one
readable log line per transition.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import anyio

from statemachine import (
    CheckpointCipher,
    Checkpointer,
    Done,
    Failed,
    PostgresCheckpointer,
    SQLiteCheckpointer,
)

from .._demo import add_output_flags, apply_output_flags, count, dollars, spent_line
from ._payments import PaymentsService
from ._scenarios import (
    Outcome,
    approved_refund,
    denied_then_retried,
    duplicate_refund,
    waits_then_resumes,
)
from ._worker import support_requests, worker_runner


def _show(number: int, outcome: Outcome) -> None:
    print(f"\n{number}. {outcome.title}")
    for index, result in enumerate(outcome.results):
        label = "states:" if index == 0 else "resumed:"
        print(f"   {label:<10} {result.trace()}")
    refunded = ", ".join(dollars(amount) for amount in outcome.refunded) or "nothing"
    print(f"   refunded:  {refunded}")
    print(f"   approvals: {outcome.approvals_asked} asked")
    asked = count(outcome.verifications_asked, "time")
    print(f"   verified:  the verification service was asked {asked}")
    final = outcome.result.final
    print(f"   spent:     {spent_line(final.spent, outcome.refunded)}")
    match final:
        case Done(answer=answer):
            print(f"   answer:    {answer}")
        case Failed(reason=reason):
            print(f"   failed:    {reason}")


async def main() -> None:
    """Run the scenarios one after the other, each in a fresh directory."""
    print("statemachine support agent: refunds a person approves, paid exactly once")
    scenarios = (approved_refund, duplicate_refund, denied_then_retried, waits_then_resumes)
    for number, scenario in enumerate(scenarios, start=1):
        with tempfile.TemporaryDirectory(prefix="support-") as workdir:
            _show(number, await scenario(Path(workdir)))


async def submit(store: Checkpointer, count: int, *, seed: int = 0) -> list[str]:
    """Submit ``count`` requests (:func:`support_requests`) to ``store``; their run ids."""
    with PaymentsService(":memory:") as unused:  # submitting pays nothing
        runner = worker_runner(store, payments=unused)
        return [await runner.submit(ctx, text) for ctx, text in support_requests(count, seed=seed)]


def _submit_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agents.support submit",
        description="Submit support requests to a store for workers to run.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--db", help="the runs' SQLite file ($STATEMACHINE_DB, else statemachine.db)"
    )
    where.add_argument("--dsn", help="a PostgreSQL connection string ($STATEMACHINE_DSN)")
    parser.add_argument("--count", type=int, default=10, help="how many requests (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="which mix of requests (default 0)")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error(f"--count must be a positive number, got {args.count}")
    sealer = CheckpointCipher.from_env() if os.environ.get("STATEMACHINE_CHECKPOINT_KEYS") else None
    dsn = args.dsn or ("" if args.db else os.environ.get("STATEMACHINE_DSN", ""))
    store: PostgresCheckpointer | SQLiteCheckpointer = (
        PostgresCheckpointer(dsn, sealer=sealer)
        if dsn
        else SQLiteCheckpointer(
            args.db or os.environ.get("STATEMACHINE_DB") or "statemachine.db", sealer=sealer
        )
    )

    async def go() -> list[str]:
        async with store:
            return await submit(store, args.count, seed=args.seed)

    for run_id in anyio.run(go):
        print(run_id)
    return 0


def cli(argv: list[str] | None = None) -> int:
    """The command line: the scripted scenarios, or ``submit`` to feed workers."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["submit"]:
        return _submit_command(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m agents.support", description=__doc__)
    add_output_flags(parser)
    apply_output_flags(parser.parse_args(argv))
    anyio.run(main)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
