"""An agent's settings as configuration: read by :meth:`Agent.from_config`.

Apart from ``_phases``, so that ``import statemachine`` does not build these models;
``from statemachine import AgentConfig`` and ``Agent.from_config`` import this module.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ._budget import Budget

__all__ = ["AgentConfig", "RetrySettings"]


class RetrySettings(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """``RetryPolicy`` as configuration."""

    max_attempts: int = Field(default=3, ge=1)
    base_delay: float = Field(default=0.2, ge=0)
    multiplier: float = Field(default=2.0, ge=1)
    max_delay: float = Field(default=10.0, ge=0)
    jitter: float = Field(default=0.5, ge=0, le=1)


class AgentConfig(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """An agent's settings as they come from a file or the environment.

    Read with :meth:`Agent.from_config`: an unknown key (a typo) fails at start-up,
    naming the closest valid key, instead of leaving a default silently in force.
    """

    instructions: str = ""
    budget: Budget = Budget.model_construct()
    retry: RetrySettings = RetrySettings.model_construct()
    max_steps: int = Field(default=50, ge=1)
    max_tool_iterations: int | None = Field(default=None, ge=0)
    max_invalid_calls: int = Field(default=3, ge=1)
    answer_attempts: int = Field(default=3, ge=1)
