"""The structured door: every model call of the research agent, with a schema per role.

The agent's model calls happen in ``Planning`` (the library's one place that asks
the model). :class:`StructuredDoor` wraps the model the runner is given, so every
call goes through it. Each reply is read as one of three roles, each with its schema:

==========  ==========================================  =====================
role        what the model sends                        schema
==========  ==========================================  =====================
planner     a ``run_searches`` call                     :class:`~._plan.Plan`
searcher    a ``search`` or ``fetch`` call              ``SearchArgs`` / ``FetchArgs``
writer      the answer, as text (also the last step)    :class:`WriterOutput`
==========  ==========================================  =====================

A tool call's schema is its tool's arguments model, so the library routes it: a bad
call becomes an ``InvalidCall`` and the model is told what to fix in the next
planning step (a step counted against the cap). The writer's text has no such route
in the library yet, so the door checks it here: valid JSON of
:class:`WriterOutput`, citing only documents that the run's tools returned; if not,
the door asks once more, with the problems, before the reply leaves the door.

Tokens: the reply the door returns carries the usage of every call it made (a
re-ask included), and ``Planning`` charges that usage to the run's ``Spend``, which
the agent's ``Budget(tokens=...)`` (the contract's) limits. ``calls`` records each
call: its role, whether it passed, the problems, the tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, final

import attrs
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from statemachine import (
    Message,
    Model,
    ModelReply,
    ModelRequest,
    ToolRegistry,
    Transcript,
    Usage,
    loads,
    money_sum,
)

from ._agent import returned_documents

__all__ = ["DoorCall", "Role", "StructuredDoor", "WriterOutput", "answer_of", "role_of"]

Role = Literal["planner", "searcher", "writer"]
_ROLE_OF_TOOL: Mapping[str, Role] = {
    "run_searches": "planner",
    "search": "searcher",
    "fetch": "searcher",
}


def role_of(reply: ModelReply, request: ModelRequest) -> Role:
    """The role a reply plays: a plan, a search or fetch, or the answer."""
    if not request.tools or not reply.tool_calls:
        return "writer"
    # An unknown tool name fails the searcher's schema (there is no such tool).
    return _ROLE_OF_TOOL.get(reply.tool_calls[0].name, "searcher")


class WriterOutput(BaseModel):
    """The writer's answer and the documents it used."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    answer: str = Field(min_length=1)
    sources: tuple[str, ...] = Field(description="ids of the documents the answer used")


@final
@attrs.frozen
class DoorCall:
    """One model call through the door: its role, whether its output passed, its tokens."""

    role: Role
    ok: bool
    problems: tuple[str, ...]
    tokens: int


def _unfenced(text: str) -> str:
    """The text without a surrounding Markdown code fence (the one mechanical repair)."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```"):
        inner = stripped[3:-3]
        return inner.split("\n", 1)[1] if "\n" in inner else inner
    return stripped


def _sum(first: Usage, second: Usage) -> Usage:
    return Usage(
        input_tokens=first.input_tokens + second.input_tokens,
        output_tokens=first.output_tokens + second.output_tokens,
        cost=money_sum(first.cost, second.cost),
    )


@final
class StructuredDoor:
    """A model wrapper that reads every reply as its role's schema; see the module doc.

    ``tools`` are the agent's (their argument models are the planner's and searcher's
    schemas); ``attempts`` bounds the writer's tries per call.
    """

    __slots__ = ("attempts", "calls", "model", "tools")

    def __init__(self, model: Model, *, tools: ToolRegistry, attempts: int = 2) -> None:
        self.model = model
        self.tools = tools
        self.attempts = attempts
        self.calls: list[DoorCall] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Ask the model; check the reply against its role's schema; re-ask a bad answer."""
        messages = request.messages
        usage = Usage()
        for attempt in range(1, self.attempts + 1):
            asked = request.model_copy(update={"messages": messages})
            reply = await self.model.complete(asked)
            usage = _sum(usage, reply.usage)
            role = role_of(reply, request)
            problems: tuple[str, ...]
            if role == "writer":
                answer, problems = self._writer(reply, request.messages)
            else:
                answer, problems = None, self._tool_call(reply)
            self.calls.append(DoorCall(role, not problems, problems, reply.usage.tokens))
            if answer is not None:
                return reply.model_copy(update={"text": answer.model_dump_json(), "usage": usage})
            if role != "writer" or attempt == self.attempts:
                # A bad tool call goes on to the library's routing, which tells the model.
                return reply.model_copy(update={"usage": usage})
            # A transcript of its own: one appended to the request's would extend the list it
            # shares with the run's conversation, and the run's next message would copy it.
            messages = Transcript(
                (
                    *messages,
                    Message(role="assistant", content=reply.text),
                    Message(
                        role="system",
                        content=(
                            "Your answer was not accepted: "
                            + "; ".join(problems)
                            + '. Reply again with JSON only: {"answer": "...", "sources": '
                            '["d01", ...]}, citing only documents returned to you.'
                        ),
                    ),
                )
            )
        raise AssertionError("unreachable: attempts is at least 1")  # pragma: no cover

    def _tool_call(self, reply: ModelReply) -> tuple[str, ...]:
        call = reply.tool_calls[0]
        if call.name not in self.tools:
            return (f"unknown tool {call.name!r}",)
        schema = self.tools.get(call.name).args_model
        try:
            schema.model_validate(loads(call.arguments))
        except ValidationError as error:
            return tuple(e["msg"] for e in error.errors(include_url=False))
        except ValueError as error:
            return (f"arguments are not JSON: {error}",)
        return ()

    def _writer(
        self, reply: ModelReply, messages: Transcript
    ) -> tuple[WriterOutput | None, tuple[str, ...]]:
        if reply.tool_calls:
            return None, ("a tool call was sent where the answer was due",)
        try:
            answer = WriterOutput.model_validate_json(_unfenced(reply.text))
        except ValidationError as error:
            return None, tuple(
                f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}"
                for e in error.errors(include_url=False)
            )
        returned = returned_documents(messages)
        unseen = [source for source in answer.sources if source not in returned]
        if unseen:
            return None, (
                f"sources {', '.join(unseen)} were not returned by any search or fetch "
                f"(returned: {', '.join(sorted(returned)) or 'none'})",
            )
        if returned and not answer.sources:
            return None, ("sources is empty: cite the documents the answer used",)
        return answer, ()


def answer_of(text: str) -> WriterOutput | None:
    """The writer's output in a run's answer, or ``None`` if the answer is not one."""
    try:
        return WriterOutput.model_validate_json(text)
    except ValidationError:
        return None
