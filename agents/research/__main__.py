"""Demo: ``python -m agents.research`` runs every scenario offline and prints what happened.

``--trace`` prints every span with OpenTelemetry's console exporter, and ``--log`` one
readable log line per transition.
"""

from __future__ import annotations

import argparse

import anyio

from statemachine import Done, Failed

from .._demo import add_output_flags, apply_output_flags, count
from ._agent import missing_points
from ._corpus import CORPUS
from ._scenarios import (
    Outcome,
    cyclic_plan,
    plateau,
    repeated_queries,
    rubric_coverage,
    tight_search_budget,
)


def _show(number: int, outcome: Outcome) -> None:
    result = outcome.result
    final = result.final
    print(f"\n{number}. {outcome.title}")
    print(f"   contract:  sha256 {outcome.contract.contract_hash[:16]}")
    print(f"   states:    {result.trace()}")
    for verdict in result.verdicts:
        said = f"{verdict.hook}: {verdict.verdict} ({verdict.check})"
        print(f"   verdict:   {said}, {verdict.reason}")
    roles = " -> ".join(f"{c.role}{'' if c.ok else ' (refused)'}" for c in outcome.door.calls)
    print(f"   roles:     {roles}")
    print(f"   searched:  {'; '.join(outcome.backend.queries) or 'nothing'}")
    spend = final.spent
    print(
        f"   spent:     {count(spend.model_calls, 'model call')}, {count(spend.tokens, 'token')}, "
        f"{count(spend.tool_calls, 'tool call')}"
    )
    missing = missing_points(final.loop, outcome.contract.contract.rubric)
    if missing:
        print(f"   uncovered: {'; '.join(missing)}")
    match final:
        case Done():
            answer = outcome.answer
            print(f"   answer:    {answer.answer if answer else final.answer}")
            for source in answer.sources if answer else ():
                document = CORPUS.fetch(source)
                print(f"   source:    [{source}] {document.title if document else '?'}")
        case Failed(reason=reason):
            print(f"   failed:    {reason}")
        case _:
            print(f"   paused:    {final.loop.paused}")


async def main() -> None:
    """Run the scenarios one after the other."""
    print("statemachine research agent: a hashed contract, parallel searches, a cited answer")
    _show(1, await rubric_coverage())
    _show(2, await repeated_queries())
    _show(3, await plateau())
    _show(4, await tight_search_budget())
    _show(5, await cyclic_plan())


def cli(argv: list[str] | None = None) -> None:
    """The command line: the scripted scenarios, with ``--trace`` or ``--log`` if asked."""
    parser = argparse.ArgumentParser(prog="python -m agents.research", description=__doc__)
    add_output_flags(parser)
    apply_output_flags(parser.parse_args(argv))
    anyio.run(main)


if __name__ == "__main__":
    cli()
