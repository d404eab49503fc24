"""Writes tests/data/pre-batch-phases.json: phase documents as the library wrote them
before a reply's tool calls were queued (phases with no ``pending`` field).

Run from a checkout of the commit before batched tool calls (``PYTHONPATH=<that
checkout> python tests/data/make_pre_batch_phases.py OUT``). It runs two travel
scenarios (a booking approved, and a flaky weather lookup that is retried) and keeps
the first document of each phase kind (and of a ToolCalling and an Observing that hold
an approved write); ``tests/test_batch_calls.py`` loads them with today's code.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from agents.travel import _scenarios as travel
from statemachine import dump_phase, dumps


async def documents() -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for outcome in (
        await travel.prompt_flip(approve=True, sleep=_no_sleep),
        await travel.flaky_weather(sleep=_no_sleep),
    ):
        for state in outcome.result.states:
            document = dump_phase(state)
            call = document["fields"].get("call")
            approved = call is not None and call["type"] == "approved"
            kept.setdefault(f"{state.kind} (approved)" if approved else state.kind, document)
    return kept


async def _no_sleep(seconds: float) -> None:
    return None


def main(out: str) -> None:
    kept = anyio.run(documents)
    with open(out, "w", encoding="utf-8") as file:
        file.write(dumps(kept))
        file.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
