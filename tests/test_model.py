"""statemachine._model: the messages, requests and replies at the model boundary."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from statemachine import Message, ModelReply, Usage


def test_usage_tokens_are_input_plus_output() -> None:
    """Usage.tokens is what the token budget is charged: input and output together."""
    assert Usage(input_tokens=7, output_tokens=5).tokens == 12


def test_usage_cost_is_exact_money() -> None:
    """A usage cost is Money: text becomes an exact Decimal, a float is refused."""
    assert Usage(cost="0.0031").cost == Decimal("0.0031")
    with pytest.raises(ValidationError, match="money must be exact"):
        Usage(cost=0.0031)


def test_usage_refuses_negative_tokens() -> None:
    """A model cannot report negative usage to earn budget back."""
    with pytest.raises(ValidationError):
        Usage(input_tokens=-1)


def test_a_reply_defaults_to_an_empty_answer_with_no_usage() -> None:
    """ModelReply() is a stop with no text, no tool calls and zero usage."""
    assert ModelReply() == ModelReply(text="", tool_calls=(), finish_reason="stop", usage=Usage())


def test_a_message_has_one_of_the_four_roles() -> None:
    """Only system, user, assistant and tool messages exist."""
    with pytest.raises(ValueError, match="a message's role is one of system, user"):
        Message(role="robot")  # type: ignore[arg-type]
