"""``loads`` returns JSON, not ``Any``: what it read is narrowed before it is used."""

from __future__ import annotations

from decimal import Decimal
from typing import assert_type

from statemachine import Phase, Planning, ReadCall, ToolCalling, WriteCall, loads

from ._fixtures import Ctx, lookup


def approve_later(call: WriteCall) -> None:
    """Something that takes a write call."""


def resume(state: Phase[Ctx]) -> None:
    """Something that takes a phase."""


def json_is_not_a_call_or_a_phase(planning: Planning[Ctx], text: str) -> None:
    # Rule: a value read from JSON is not a WriteCall.
    approve_later(loads(text))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: nor a ReadCall that Planning would run.
    planning.call_tool(loads(text))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: nor a phase.
    resume(loads(text))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: nor a tool's arguments until it is known to be an object.
    lookup.call(loads(text))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def narrowed_json_is_usable(planning: Planning[Ctx], text: str) -> ToolCalling[Ctx] | None:
    value = loads(text)
    if isinstance(value, Decimal):
        assert_type(value, Decimal)
    if isinstance(value, str):
        assert_type(value, str)
    if isinstance(value, dict):
        call = lookup.call(value)
        assert_type(call, ReadCall)
        return planning.call_tool(call)
    return None
