"""The model boundary: the messages a run keeps, what a model is asked and what it answers.

A :class:`Model` is one async call. It receives the conversation, the tools'
schemas and the time it has left, and returns a :class:`ModelReply`: text or
tool calls, a finish reason, and usage (tokens and cost as ``Decimal``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, Field

from ._money import Money

__all__ = ["Message", "Model", "ModelReply", "ModelRequest", "ToolRequest", "Usage"]

M = TypeVar("M", bound=BaseModel)


# Used by the governor, the phases and the budget (pyright counts uses in this module only).
def _trusted(  # pyright: ignore[reportUnusedFunction]
    cls: type[M],
    values: dict[str, Any],
    fields_set: set[str],
    private: dict[str, Any] | None = None,
) -> M:
    """An instance of ``cls`` holding ``values``, made as ``model_construct`` makes one.

    For the hot path, with values that are valid already (taken from validated models
    or made by the library): nothing is validated and no default is filled in, so
    ``values`` holds every field, in the order the fields are declared (``model_dump``
    follows it). ``fields_set`` is the new instance's own set; ``private`` its private
    attributes (``None`` for a model without any). ``cls`` must not allow extra fields.
    """
    model = cls.__new__(cls)
    _set_dict(model, values)
    _set_fields_set(model, fields_set)
    _set_extra(model, None)
    _set_private(model, private)
    return model


# BaseModel's own slots, set through their descriptors: what object.__setattr__ finds for
# these names on any model class, without looking them up on every call.
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


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
