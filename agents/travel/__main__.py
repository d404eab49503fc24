"""Demo: ``python -m agents.travel`` runs every scenario offline and prints what happened.

``--local`` runs the agent on a real model instead (see :mod:`agents.travel._local`).
``--trace`` prints every span with OpenTelemetry's console exporter, and ``--log`` one
readable log line per transition. On a terminal, the current phase of a running
scenario is shown on one line that updates in place.
"""

from __future__ import annotations

import argparse
from functools import partial

import anyio

from statemachine import Done, Failed, ProgressLine

from .._demo import add_output_flags, apply_output_flags, dollars, spent_line
from ._handoff import HandoffAccepted, HandoffRejected
from ._local import local_demo
from ._scenarios import (
    HandoffOutcome,
    OnTransition,
    Outcome,
    budget_stops_before_spending,
    flaky_weather,
    handoff,
    prompt_flip,
    weather_down,
)


def _show(number: str, outcome: Outcome) -> None:
    result = outcome.result
    print(f"\n{number}. {outcome.title}")
    print(f"   states:    {result.trace()}")
    charged = ", ".join(dollars(amount) for amount in outcome.charged) or "nothing"
    print(f"   charged:   {charged}")
    print(f"   approvals: {outcome.approvals_asked} asked")
    print(f"   spent:     {spent_line(result.final.spent, outcome.charged)}")
    match result.final:
        case Done(answer=answer):
            print(f"   answer:    {answer}")
        case Failed(reason=reason):
            print(f"   failed:    {reason}")


def _show_handoff(number: str, outcome: HandoffOutcome) -> None:
    print(f"\n{number}. {outcome.title}")
    print(f"   researcher: {outcome.handoff.researcher.trace()}")
    match outcome.handoff:
        case HandoffAccepted(brief=brief, booking=booking, booker=booker):
            found = ", ".join(f"{c.city} {c.forecast} {c.high_c}°C" for c in brief.cities)
            print(f"   brief:      {found}")
            print(f"   booker:     {booker.trace()}")
            print(f"   chosen:     {booking.destination} (by code, from the typed forecasts)")
            print(f"   notes:      {brief.notes!r} (kept for a person, never sent to the booker)")
        case HandoffRejected(reason=reason, paths=paths):
            print(f"   rejected:   {reason}")
            print(f"   paths:      {', '.join(paths)}")
            print("   booker:     never ran")
    charged = ", ".join(dollars(amount) for amount in outcome.charged) or "nothing"
    print(f"   charged:    {charged}")
    print(f"   approvals:  {outcome.approvals_asked} asked")


async def main(on_transition: OnTransition = None) -> None:
    """Run the scenarios one after the other; ``on_transition`` sees every transition."""
    print("statemachine travel agent: three ways a `while True` agent breaks, handled")
    seen = on_transition
    _show("1a", await prompt_flip(approve=False, on_transition=seen))
    _show("1b", await prompt_flip(approve=True, on_transition=seen))
    _show("2a", await flaky_weather(on_transition=seen))
    _show("2b", await weather_down(on_transition=seen))
    _show("3", await budget_stops_before_spending(on_transition=seen))
    _show_handoff("4a", await handoff(lookups_fail=False))
    _show_handoff("4b", await handoff(lookups_fail=True))


def cli(argv: list[str] | None = None) -> None:
    """The command line: the scripted scenarios, or ``--local`` for a real local model."""
    parser = argparse.ArgumentParser(prog="python -m agents.travel", description=__doc__)
    parser.add_argument(
        "--local",
        action="store_true",
        help="run the agent on SmolLM2-135M through llama.cpp (needs statemachine-agents[local])",
    )
    parser.add_argument(
        "--unconstrained",
        action="store_true",
        help="with --local: no grammar; the library validates whatever the model writes",
    )
    add_output_flags(parser)
    args = parser.parse_args(argv)
    # Spans and log lines are printed mid-run: a progress line would be cut through them.
    quiet = apply_output_flags(args)
    if args.local:
        anyio.run(partial(local_demo, constrained=not args.unconstrained))
        return
    with ProgressLine(label="   running:   ") as progress:
        anyio.run(main, None if quiet else progress)


if __name__ == "__main__":
    cli()
