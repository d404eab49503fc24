"""The model boundary: the messages a run keeps, what a model is asked and what it answers.

A :class:`Model` is one async call. It receives the conversation, the tools'
schemas and the time it has left, and returns a :class:`ModelReply`: text or
tool calls, a finish reason, and usage (tokens and cost as ``Decimal``). Anything
else it returns is a :class:`ModelResponseError` (``_checked_reply``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, Field, field_validator

from ._errors import ModelResponseError
from ._money import Money

__all__ = [
    "Message",
    "Model",
    "ModelReply",
    "ModelRequest",
    "ToolRequest",
    "Usage",
    "_checked_reply",
]

M = TypeVar("M", bound=BaseModel)


class ToolRequest(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """A tool call as the model wrote it: a name and JSON arguments, not yet validated."""

    name: str
    arguments: str = "{}"
    id: str = ""


class Message(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """One entry of the conversation a run keeps in its state."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolRequest, ...] = ()
    tool_call_id: str = ""
    name: str = ""


class Usage(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """What one model call used."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost: Money = Decimal(0)

    @field_validator("cost")
    @classmethod
    def _cost_not_negative(cls, cost: Decimal) -> Decimal:
        if cost < 0:
            raise ValueError(
                f"a model call's cost must not be negative, got {cost}, or calls would give "
                "budget back; report Decimal(0) for a free call"
            )
        return cost

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class ModelRequest(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """What a model is asked: the conversation, the tools, and the time left.

    ``output_schema``, when set, is the JSON schema the reply must match, for a
    backend that enforces it while decoding (a guard in ``constrained`` mode sets it).
    """

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    timeout: float | None = Field(default=None, description="seconds left for this call")
    output_schema: dict[str, Any] | None = Field(
        default=None, description="JSON schema a constrained decoder must enforce"
    )


class ModelReply(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """What a model answered."""

    text: str = ""
    tool_calls: tuple[ToolRequest, ...] = ()
    finish_reason: Literal["stop", "length", "refusal", "content_filter", "tool_calls"] = "stop"
    usage: Usage = Usage.model_construct()


@runtime_checkable
class Model(Protocol):
    """A language model: one async call per planning step."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Answer ``request``; must return before ``request.timeout`` seconds."""
        ...


def _checked_reply(model: object, reply: object) -> ModelReply:
    """``reply``, when it is a :class:`ModelReply`; else :class:`ModelResponseError`
    naming ``model``, what a model must return, and what came instead."""
    if isinstance(reply, ModelReply):
        return reply
    name = f"{type(model).__module__}.{type(model).__qualname__}"
    came = "None" if reply is None else f"a {type(reply).__qualname__}"
    excerpt = "" if reply is None else _shortened(repr(reply))
    raise ModelResponseError.in_process(name, came=came, excerpt=excerpt)


def _shortened(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
