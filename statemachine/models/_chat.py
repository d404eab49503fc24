"""The chat-completions documents: the request body's parts, and a completion read back.

What :class:`OpenAICompatibleModel` sends is written here from the library's
:class:`ModelRequest` and :class:`ModelSettings`, under the protocol's names; what a
server answers (a completion, or the one a stream's chunks make up) is read here
into a :class:`ModelReply`, checked field by field, so that a body of the wrong shape
is a clear :class:`Malformed` and never a half-read reply. The body is read by the
library's JSON reader (numbers as ``Decimal``), so a tool call's arguments that a
server sends as an object are written back with every digit.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from .. import _json
from .._errors import SetupError
from .._model import TOOL_CHOICE_MODES, Message, ModelReply, ModelSettings, ToolRequest, Usage
from ._prices import TokenPrices
from ._wire import clip

__all__ = [
    "Malformed",
    "message_json",
    "reply_of",
    "response_format",
    "sampling",
    "server_said",
    "tool_json",
    "tool_settings",
    "with_extra",
]

_FinishReason = Literal["stop", "length", "refusal", "content_filter", "tool_calls"]
_FINISH_REASONS: dict[str, _FinishReason] = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",  # the protocol's older name for a tool call
}
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")


# --- the request -----------------------------------------------------------------------


def message_json(message: Message) -> dict[str, Any]:
    """One conversation message as the protocol's message.

    An assistant message that only calls tools has ``"content": ""``, which every such
    server accepts, not ``null``, which llama-cpp-python's server refuses.
    """
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.name:
        out["name"] = message.name
    return out


def tool_json(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's schema (name, description, parameters) as a chat-completions tool."""
    if schema.get("type") == "function":
        return schema
    return {"type": "function", "function": schema}


def _tool_name(schema: dict[str, Any]) -> str:
    function = schema.get("function") if schema.get("type") == "function" else schema
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else ""


def tool_settings(
    settings: ModelSettings, tools: tuple[dict[str, Any], ...], *, required: bool = True
) -> dict[str, Any]:
    """``tool_choice`` and ``parallel_tool_calls``, for a request that offers ``tools``.

    ``required=False`` (a server that refuses ``"required"``): a ``"required"`` choice
    is sent as the one tool offered, named, or as ``"auto"`` when there are several.
    """
    out: dict[str, Any] = {}
    choice = settings.tool_choice
    offered = [_tool_name(schema) for schema in tools]
    if choice == "required" and not required:
        choice = offered[0] if len(offered) == 1 else "auto"
    if choice in TOOL_CHOICE_MODES:
        out["tool_choice"] = choice
    elif choice is not None:
        if choice not in offered:
            raise SetupError(
                f"tool_choice names the tool {choice!r}, which this request does not offer "
                f"(it offers {', '.join(map(repr, offered))}); name one of those, or use "
                f"one of {', '.join(map(repr, TOOL_CHOICE_MODES))}"
            )
        out["tool_choice"] = {"type": "function", "function": {"name": choice}}
    if settings.parallel_tool_calls is not None:
        out["parallel_tool_calls"] = settings.parallel_tool_calls
    return out


def sampling(settings: ModelSettings) -> dict[str, Any]:
    """The settings that apply to every request, under the protocol's names."""
    given = {
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        "seed": settings.seed,
        "stop": None if settings.stop is None else list(settings.stop),
    }
    return {key: value for key, value in given.items() if value is not None}


def with_extra(body: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``extra`` added; :class:`SetupError` for a key the body has already."""
    taken = sorted(set(body) & set(extra))
    if taken:
        raise SetupError(
            f"the settings' extra would replace {', '.join(map(repr, taken))}, which this "
            "adapter writes itself from the request and its settings; set the ModelSettings "
            "field or the request's part instead"
        )
    return {**body, **extra}


def response_format(
    schema: dict[str, Any], kind: Literal["json_schema", "json_object"]
) -> dict[str, Any]:
    """An output schema as ``response_format``: strict ``json_schema``, or ``json_object``
    with the schema, which llama-cpp-python's and llama.cpp's servers read."""
    if kind == "json_object":
        return {"type": "json_object", "schema": schema}
    return {
        "type": "json_schema",
        "json_schema": {"name": _schema_name(schema), "schema": schema, "strict": True},
    }


def _schema_name(schema: dict[str, Any]) -> str:
    title = schema.get("title")
    name = _SCHEMA_NAME.sub("_", title)[:64] if isinstance(title, str) else ""
    return name or "output"


# --- the reply -------------------------------------------------------------------------


class Malformed(Exception):
    """A reply body that does not have the shape of a chat completion."""


def reply_of(document: Any, prices: TokenPrices, *, max_tokens: int | None = None) -> ModelReply:
    """The reply a chat completion ``document`` holds; :class:`Malformed` if it holds none.

    ``message.refusal`` is ``finish_reason="refusal"`` with its text. ``max_tokens``
    is the cap the request sent: a tool call whose arguments are not JSON, in a reply
    that used every token of it, was cut off there (a server that decoded a forced
    call says ``tool_calls``, not ``length``), and is reported as ``length``.
    """
    choices = _field(document, "choices", list, "the body")
    if not choices:
        raise Malformed("'choices' is empty")
    message = _field(choices[0], "message", dict, "choices[0]")
    content = _optional(message, "content", str, "the message") or ""
    refusal = _optional(message, "refusal", str, "the message")
    listed = _optional(message, "tool_calls", list, "the message") or []
    calls = tuple(_tool_request(call, index) for index, call in enumerate(listed))
    stated = _optional(choices[0], "finish_reason", str, "choices[0]")
    usage = _optional(document, "usage", dict, "the body") or {}
    input_tokens = _tokens(usage, "prompt_tokens")
    output_tokens = _tokens(usage, "completion_tokens")
    finish: _FinishReason
    if refusal:
        content, finish = refusal, "refusal"
    elif stated in _FINISH_REASONS:
        finish = _FINISH_REASONS[stated]
    else:  # missing, or a server's own word: say what the reply holds
        finish = "tool_calls" if calls else "stop"
    if finish in ("tool_calls", "stop") and _cut(calls, output_tokens, max_tokens):
        finish = "length"
    try:
        cost = prices.cost(input_tokens, output_tokens)
    except ValueError as problem:
        raise Malformed(f"usage cannot be priced: {problem}") from None
    return ModelReply(
        text=content,
        tool_calls=calls,
        finish_reason=finish,
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens, cost=cost),
    )


def _cut(calls: tuple[ToolRequest, ...], used: int, cap: int | None) -> bool:
    """Whether a call of ``calls`` was cut at the token cap: ``used`` reached ``cap``
    and some call's arguments are not a whole JSON value."""
    if cap is None or used < cap or not calls:
        return False
    for call in calls:
        try:
            _json.loads(call.arguments, bounded=True)
        except (ValueError, RecursionError):
            return True
    return False


def _field(container: Any, key: str, kind: type[Any], where: str) -> Any:
    value = _optional(container, key, kind, where)
    if value is None:
        raise Malformed(f"{where} has no {key!r}")
    return value


def _optional(container: Any, key: str, kind: type[Any], where: str) -> Any:
    if not isinstance(container, dict):
        raise Malformed(f"{where} is not a JSON object")
    value = container.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise Malformed(f"{where}'s {key!r} is {_json.dumps(value)[:60]}, not {_kind(kind)}")
    return value


def _kind(kind: type[Any]) -> str:
    return {str: "a string", list: "a list", dict: "an object", int: "an integer"}[kind]


def _tool_request(call: Any, index: int) -> ToolRequest:
    where = f"tool_calls[{index}]"
    kind = _optional(call, "type", str, where)
    if kind not in (None, "function"):
        raise Malformed(f"{where} is of type {kind!r}; only function tools were offered")
    function = _field(call, "function", dict, where)
    name = _field(function, "name", str, f"{where}.function")
    arguments = function.get("arguments")
    if arguments is None:
        arguments = "{}"
    elif isinstance(arguments, dict):
        # Some servers send the object itself; it was read exactly, so write it back.
        arguments = _json.dumps(arguments)
    elif not isinstance(arguments, str):
        raise Malformed(f"{where}.function's 'arguments' is not a string")
    return ToolRequest(name=name, arguments=arguments, id=_optional(call, "id", str, where) or "")


def _tokens(usage: dict[str, Any], key: str) -> int:
    value = _optional(usage, key, int, "usage")
    if value is None:
        return 0
    if value < 0:
        raise Malformed(f"usage's {key!r} is negative")
    return int(value)


def server_said(body: bytes) -> str | None:
    """The server's own words in an error body, from the shapes servers use; ``None``
    when the body holds no message field (``""`` when it holds an empty one)."""
    try:
        document = _json.loads(body, bounded=True)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    error = document.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    if isinstance(message, str):
        return clip(message)
    for said in (error, document.get("message"), document.get("detail")):
        if isinstance(said, str):
            return clip(said)
    return None
