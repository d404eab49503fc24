"""An agent's settings as configuration: read by :meth:`Agent.from_config`.

Apart from ``_phases``, so that ``import statemachine`` does not build these models;
``from statemachine import AgentConfig`` and ``Agent.from_config`` import this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from ._budget import Budget
from ._governor import LoopGovernor
from ._retry import MODEL_RETRY, RetryPolicy
from ._schema import validate_config
from ._similarity import similarity_named

__all__ = ["AgentConfig", "GovernorSettings", "ModelRetrySettings", "RetrySettings", "_settings"]


class RetrySettings(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """``RetryPolicy`` as configuration."""

    max_attempts: int = Field(default=3, ge=1)
    base_delay: float = Field(default=0.2, ge=0)
    multiplier: float = Field(default=2.0, ge=1)
    max_delay: float = Field(default=10.0, ge=0)
    jitter: float = Field(default=0.5, ge=0, le=1)


class ModelRetrySettings(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """``Agent.model_retry`` as configuration (its defaults are ``MODEL_RETRY``'s)."""

    max_attempts: int = Field(default=MODEL_RETRY.max_attempts, ge=1)
    base_delay: float = Field(default=MODEL_RETRY.base_delay, ge=0)
    multiplier: float = Field(default=MODEL_RETRY.multiplier, ge=1)
    max_delay: float = Field(default=MODEL_RETRY.max_delay, ge=0)
    jitter: float = Field(default=MODEL_RETRY.jitter, ge=0, le=1)


class GovernorSettings(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """The loop governor's semantic tier as configuration (``LoopGovernor``'s defaults).

    ``similarity``: ``lexical`` or ``embedding`` (the ``embeddings`` extra); unset, the
    one ``STATEMACHINE_SIMILARITY`` names (lexical by default).
    """

    similarity: Literal["lexical", "embedding"] | None = None
    semantic_threshold: float = Field(default=0.92, ge=0, le=1)


class AgentConfig(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """An agent's settings as they come from a file or the environment.

    Read with :meth:`Agent.from_config`: an unknown key (a typo) fails at start-up,
    naming the closest valid key, instead of leaving a default silently in force.
    """

    instructions: str = ""
    budget: Budget = Budget.model_construct()
    retry: RetrySettings = RetrySettings.model_construct()
    model_retry: ModelRetrySettings = ModelRetrySettings.model_construct()
    max_steps: int = Field(default=50, ge=1)
    max_tool_iterations: int | None = Field(default=None, ge=0)
    max_invalid_calls: int = Field(default=3, ge=1)
    answer_attempts: int = Field(default=3, ge=1)
    governor: GovernorSettings | None = None


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``Agent`` arguments that ``config`` sets, once it is valid (else ``ConfigError``)."""
    settings = validate_config(AgentConfig, config)
    model_retry = settings.model_retry.model_dump()
    return {
        "instructions": settings.instructions,
        "budget": settings.budget,
        "retry": RetryPolicy(**settings.retry.model_dump()),
        "model_retry": RetryPolicy(**model_retry, retry_on=MODEL_RETRY.retry_on),
        "max_steps": settings.max_steps,
        "max_tool_iterations": settings.max_tool_iterations,
        "max_invalid_calls": settings.max_invalid_calls,
        "answer_attempts": settings.answer_attempts,
    } | _governor(settings.governor)


def _governor(settings: GovernorSettings | None) -> dict[str, Any]:
    """The governor ``settings`` make (none: the agent's default governor)."""
    if settings is None:
        return {}
    named = settings.similarity
    similarity = None if named is None else similarity_named(named)
    governor = LoopGovernor(similarity=similarity, semantic_threshold=settings.semantic_threshold)
    return {"governor": governor}
