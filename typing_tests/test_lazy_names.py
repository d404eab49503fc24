"""Names the package imports on first use keep their types; an unknown name stays an error."""

from __future__ import annotations

from typing import assert_type

import statemachine
from statemachine import (
    AgentConfig,
    CheckpointCipher,
    OpenAICompatibleModel,
    RetrySettings,
    TokenPrices,
    generate_key,
)


def lazy_names_keep_their_types() -> None:
    # Rule: a name loaded on first use is typed as the class or function it is.
    assert_type(generate_key(), bytes)
    assert_type(statemachine.Worker, type[statemachine.Worker])
    cipher = CheckpointCipher({"k1": generate_key()}, "k1")
    assert_type(cipher.seal(b"x", aad=b""), bytes)
    OpenAICompatibleModel("http://127.0.0.1:8080/v1", "m", prices=TokenPrices())
    assert_type(AgentConfig().retry, RetrySettings)
    assert_type(AgentConfig().max_steps, int)
    # Rule: the wrong argument to a lazily imported class is still refused.
    OpenAICompatibleModel("http://127.0.0.1:8080/v1", "m", prices=1)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def unknown_names_are_errors() -> None:
    # Rule: the package's lazy loader is invisible to the checkers, so a typo is caught.
    statemachine.CheckpointCiphr  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
