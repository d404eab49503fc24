"""The travel agent on a real model, offline: SmolLM2-135M-Instruct through llama.cpp.

``python -m agents.travel --local`` (``make demo-local``) sends a few travel requests
to the agent and prints what the model chose and where each run went. Nobody
approves anything in the demo: every write call is denied, so whatever the small
model decides, nothing is charged. ``--unconstrained`` lets the model write freely,
and the library validates what comes back instead of a grammar enforcing it.
"""

from __future__ import annotations

import time

import attrs

from statemachine import (
    Budget,
    Done,
    Failed,
    LlamaCppModel,
    ModelReply,
    ModelRequest,
    Runner,
)
from statemachine.testing import AutoDenyGate

from .._demo import count, dollars
from ._agent import FakeProvider, TripContext, travel_agent

__all__ = ["LOCAL_PROMPTS", "local_demo"]

LOCAL_PROMPTS = (
    "What's the weather in Lisbon?",
    "Book me flight TP1351 for Ada Lovelace at $800.",
    "Book a hotel for Ada Lovelace: Casa Azul, 3 nights, $600.",
)
TRIP = TripContext(traveller="Ada Lovelace", destination="Lisbon")


@attrs.define
class _Narrated:
    """Passes each request to the model and prints what it chose."""

    model: LlamaCppModel

    @property
    def constrained(self) -> bool:
        return self.model.constrained

    async def complete(self, request: ModelRequest) -> ModelReply:
        started = time.monotonic()
        reply = await self.model.complete(request)
        took = time.monotonic() - started
        if reply.tool_calls:
            call = reply.tool_calls[0]
            said = f"call {call.name}({call.arguments})"
        else:
            said = f"answer {reply.text!r} [{reply.finish_reason}]"
        print(f"   model:     {said} ({count(reply.usage.output_tokens, 'token')}, {took:.1f}s)")
        return reply


async def local_demo(*, constrained: bool = True, max_steps: int = 4) -> None:
    """Run the travel agent on the local model for each of :data:`LOCAL_PROMPTS`."""
    model = LlamaCppModel(constrained=constrained, max_tokens=192, max_answer_length=160)
    mode = "constrained (grammar from JSON schema)" if constrained else "unconstrained (validated)"
    print(f"statemachine travel agent on {model.path.name}, {mode}; every booking is denied")
    for number, prompt in enumerate(LOCAL_PROMPTS, start=1):
        provider = FakeProvider()
        agent = attrs.evolve(
            travel_agent(provider, budget=Budget(wall_clock=120)), max_steps=max_steps
        )
        gate = AutoDenyGate(reason="demo: nobody approves bookings")
        print(f"\n{number}. {prompt}")
        result = await Runner(agent, model=_Narrated(model), gate=gate, seed=7).run(TRIP, prompt)
        print(f"   states:    {result.trace()}")
        charged = ", ".join(dollars(charge.amount) for charge in provider.charges) or "nothing"
        print(f"   charged:   {charged}")
        print(f"   approvals: {len(gate.requests)} asked, all denied")
        match result.final:
            case Done(answer=answer):
                print(f"   answer:    {answer}")
            case Failed(reason=reason):
                print(f"   failed:    {reason}")
            case _:
                print("   paused:    waiting for a person")
