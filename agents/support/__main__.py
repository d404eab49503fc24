"""Demo: ``python -m agents.support`` runs every scenario offline and prints what happened."""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio

from statemachine import Done, Failed

from ._scenarios import (
    Outcome,
    approved_refund,
    denied_then_retried,
    duplicate_refund,
    waits_then_resumes,
)


def _show(number: int, outcome: Outcome) -> None:
    print(f"\n{number}. {outcome.title}")
    for index, result in enumerate(outcome.results):
        label = "states:" if index == 0 else "resumed:"
        print(f"   {label:<10} {result.trace()}")
    refunded = ", ".join(f"${amount}" for amount in outcome.refunded) or "nothing"
    print(f"   refunded:  {refunded}")
    print(f"   approvals: {outcome.approvals_asked} asked")
    print(f"   verified:  the verification service was asked {outcome.verifications_asked} time(s)")
    final = outcome.result.final
    print(f"   spent:     {final.spent.tool_calls} tool calls, ${final.spent.cost}")
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


if __name__ == "__main__":
    anyio.run(main)
