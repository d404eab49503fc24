"""The model boundary: the messages a run keeps, what a model is asked and what it answers.

A :class:`Model` is one async call. It receives the conversation, the tools'
schemas and the time it has left, and returns a :class:`ModelReply`: text or
tool calls, a finish reason, and usage (tokens and cost as ``Decimal``). Anything
else it returns is a :class:`ModelResponseError` (``_checked_reply``).

How the model should answer (temperature, length, tool use, ...) travels in the
request as :class:`ModelSettings`; each adapter maps them to its provider's wire
format, and refuses one its provider cannot honour rather than dropping it.

A :class:`StreamingModel` can also answer as it writes: ``stream(request)`` yields
:class:`ModelChunk` s, text deltas for display, the last one carrying the whole
reply. A run streams only while someone listens (``Runner.events``); the reply it
uses is the final one, checked as ``complete``'s is, never the deltas joined.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from itertools import chain, islice
from typing import (
    Any,
    Final,
    Literal,
    Protocol,
    TypeVar,
    cast,
    final,
    overload,
    runtime_checkable,
)

import attrs
from pydantic import BaseModel, Field, GetCoreSchemaHandler, field_validator
from pydantic_core import core_schema

from . import _json
from ._errors import ModelResponseError
from ._fast._tuple_like import TupleLike
from ._money import Money
from ._plain import plain_text

__all__ = [
    "Message",
    "Model",
    "ModelChunk",
    "ModelReply",
    "ModelRequest",
    "ModelSettings",
    "StreamingModel",
    "ToolRequest",
    "Transcript",
    "Usage",
    "_CHUNK",
    "_checked_reply",
]

M = TypeVar("M", bound=BaseModel)


class ToolRequest(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """A tool call as the model wrote it: a name and JSON arguments, not yet validated."""

    name: str
    arguments: str = "{}"
    id: str = ""


Role = Literal["system", "user", "assistant", "tool"]
_ROLES: Final = ("system", "user", "assistant", "tool")


def _role(_: object, attribute: attrs.Attribute[Role], role: Role) -> None:
    if role not in _ROLES:
        raise ValueError(
            f"a message's role is one of {', '.join(_ROLES)}, got {role!r}; a tool's result "
            "is a 'tool' message, the model's words an 'assistant' one"
        )


def _content(value: object) -> str:
    return plain_text(value, "a message", "content")


def _tool_call_id(value: object) -> str:
    return plain_text(value, "a message", "tool_call_id")


def _name(value: object) -> str:
    return plain_text(value, "a message", "name")


def _tool_requests(value: Iterable[ToolRequest | Mapping[str, Any]]) -> tuple[ToolRequest, ...]:
    """Tool calls as a tuple of :class:`ToolRequest` (a mapping is validated into one)."""
    if type(value) is tuple and all(type(item) is ToolRequest for item in value):
        return value  # every item checked just above
    if isinstance(value, str | bytes | Mapping):
        raise TypeError(f"a message's tool_calls is a sequence of ToolRequest, got {value!r}")
    return tuple(
        item if isinstance(item, ToolRequest) else ToolRequest.model_validate(item)
        for item in value
    )


@final
@attrs.frozen(kw_only=True)
class Message:
    """One entry of the conversation a run keeps in its state.

    A slotted frozen class, not a pydantic model: a run holds many, and makes one or two
    at every transition. ``Message(role=..., content=...)`` checks what it is given (a
    role that is not one of the four, or text that is not ``str``, is an error);
    ``model_dump``, ``model_dump_json`` and ``model_validate`` read and write the same
    JSON a pydantic model of these fields would, and a :class:`ModelRequest` validates
    its messages from that JSON.
    """

    role: Role = attrs.field(validator=_role)
    content: str = attrs.field(default="", converter=_content)
    tool_calls: tuple[ToolRequest, ...] = attrs.field(default=(), converter=_tool_requests)
    tool_call_id: str = attrs.field(default="", converter=_tool_call_id)
    name: str = attrs.field(default="", converter=_name)

    def model_dump(self, *, mode: Literal["python", "json"] = "python") -> dict[str, Any]:
        """The message as a dict of its fields (``tool_calls`` as dicts; a list in JSON mode)."""
        calls = tuple(call.model_dump(mode=mode) for call in self.tool_calls)
        return {
            "role": self.role,
            "content": self.content,
            "tool_calls": list(calls) if mode == "json" else calls,
            "tool_call_id": self.tool_call_id,
            "name": self.name,
        }

    def model_dump_json(self) -> str:
        """The message as compact JSON, in its fields' order."""
        return _MESSAGE_JSON.encode(self.model_dump(mode="json"))

    @classmethod
    def model_validate(cls, value: Any) -> Message:
        """A message from a dict of its fields (or the message itself); ``ValueError`` or
        ``TypeError`` for anything else, naming what is wrong."""
        if isinstance(value, Message):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"a message is read from an object of its fields, got {value!r}")
        fields = cast("Mapping[str, Any]", value)
        unknown = set(fields) - _MESSAGE_FIELDS
        if unknown:
            raise ValueError(
                f"a message has no field {', '.join(sorted(unknown))}; its fields are "
                f"{', '.join(sorted(_MESSAGE_FIELDS))}"
            )
        return cls(**fields)

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Message:
        """This message with the fields in ``update`` changed (checked as a new one is)."""
        return attrs.evolve(self, **(update or {}))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # Validated from a message or an object of its fields; written as that object.
        return core_schema.no_info_plain_validator_function(
            cls.model_validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _dump_message, info_arg=True
            ),
        )


_MESSAGE_FIELDS: Final = frozenset(("role", "content", "tool_calls", "tool_call_id", "name"))
_MESSAGE_JSON: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _dump_message(message: Message, info: core_schema.SerializationInfo) -> dict[str, Any]:
    return message.model_dump(mode="json" if info.mode_is_json() else "python")


# How many messages a full chunk of a transcript holds: appending copies at most the
# tail (fewer than ``_CHUNK`` messages) and, when a chunk fills, the tuple of chunks.
_CHUNK: Final = 32


def _unread(text: str) -> tuple[Message, ...]:
    raise RuntimeError("a transcript holds a chunk as text, and no reader is set")


# A full chunk is a tuple of messages or, in a transcript loaded from a checkpoint, the
# chunk's JSON text, read (through ``persist``'s reader, which it sets here, and which
# keeps what it read) when a message of it is first needed. Either is immutable.
_chunk_reader: Callable[[str], tuple[Message, ...]] = _unread


def _messages_of(chunk: tuple[Message, ...] | str) -> tuple[Message, ...]:
    return chunk if type(chunk) is tuple else _chunk_reader(cast(str, chunk))


@final
class Transcript(TupleLike[Message]):
    """A conversation that only grows: an immutable sequence of :class:`Message` s whose
    :meth:`appended` shares the messages already there instead of copying them.

    A phase's ``transcript`` and a :class:`ModelRequest`'s ``messages`` are
    transcripts, so a run's next phase costs the same whatever the conversation's
    length, and the phases of one run share one copy of it. Read it as a tuple: it
    indexes, slices (a slice is a tuple), iterates and has a length, and it is equal to
    a transcript or a tuple holding the same messages. ``Transcript(messages)`` makes
    one from any iterable of messages; ``prefixed`` puts messages before it (the system
    prompt a model is shown), sharing the rest.
    """

    # A transcript is ``_head``, then the messages of ``_chunks`` (full chunks of
    # ``_CHUNK`` messages each), then ``_tail`` (1 to ``_CHUNK`` messages; none when
    # there are no chunks either). All three are tuples: appending shares the chunks and
    # copies the tail, so no transcript holds anything another one (a model given it,
    # a branch) could change, and none depends on the order appends happen in.
    # ``_grown`` is ``None``, or, on a transcript :meth:`appended` made within a chunk,
    # the pair (the tail it appended to, the tail it made of it and the new messages):
    # while this ``_tail`` is that very tail, it holds the tail before's messages first,
    # the very objects, and the checkpoint's producer need not look at them one by one.
    # Only the library's appends set it (a copy, a pickle or a validation makes the
    # transcript again through ``__init__``: ``None``).
    __slots__ = ("_chunks", "_grown", "_head", "_tail")
    _ITEM = Message

    _head: tuple[Message, ...]
    _chunks: tuple[tuple[Message, ...] | str, ...]
    _tail: tuple[Message, ...]
    _grown: tuple[tuple[Message, ...], tuple[Message, ...]] | None

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        items = tuple(messages)
        cut = (len(items) - 1) // _CHUNK * _CHUNK if items else 0
        self._head = ()
        self._chunks = tuple(items[at : at + _CHUNK] for at in range(0, cut, _CHUNK))
        self._tail = items[cut:]
        self._grown = None

    @classmethod
    def _of(
        cls,
        head: tuple[Message, ...],
        chunks: tuple[tuple[Message, ...] | str, ...],
        tail: tuple[Message, ...],
    ) -> Transcript:
        made = cls.__new__(cls)
        made._head, made._chunks, made._tail = head, chunks, tail
        made._grown = None
        return made

    def appended(self, *messages: Message) -> Transcript:
        """This transcript with ``messages`` after it (this one is unchanged)."""
        before = self._tail
        tail = before + messages
        if len(tail) <= _CHUNK:  # Transcript._of(self._head, self._chunks, tail), inline
            made = _new_transcript(Transcript)
            made._head, made._chunks, made._tail = self._head, self._chunks, tail
            made._grown = (before, tail)
            return made
        cut = (len(tail) - 1) // _CHUNK * _CHUNK
        full = tuple(tail[at : at + _CHUNK] for at in range(0, cut, _CHUNK))
        return Transcript._of(self._head, self._chunks + full, tail[cut:])

    def prefixed(self, *messages: Message) -> Transcript:
        """``messages`` followed by this transcript, which they share."""
        # Transcript._of(messages + self._head, self._chunks, self._tail), inline
        made = _new_transcript(Transcript)
        made._head, made._chunks, made._tail = messages + self._head, self._chunks, self._tail
        made._grown = None
        return made

    def __len__(self) -> int:
        return len(self._head) + len(self._chunks) * _CHUNK + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        tail = self._tail
        if isinstance(index, slice):
            length = len(self)
            start, stop, step = index.indices(length)
            if step != 1:
                return tuple(self)[index]
            if stop <= start:
                return ()
            before = length - len(tail)
            if start >= before:  # within the tail (the runner reads the last messages)
                return tail[start - before : stop - before]
            return tuple(islice(self._from(start), stop - start))
        if -len(tail) <= index < 0:
            return tail[index]
        length = len(self)
        at = index + length if index < 0 else index
        if not 0 <= at < length:
            raise IndexError(f"transcript index {index} out of range (length {length})")
        head = len(self._head)
        if at < head:
            return self._head[at]
        chunk, inner = divmod(at - head, _CHUNK)
        chunks = self._chunks
        return _messages_of(chunks[chunk])[inner] if chunk < len(chunks) else tail[inner]

    def _from(self, start: int) -> Iterator[Message]:
        """The messages from ``start`` on, reading only the chunks from there."""
        head = len(self._head)
        if start < head:
            return chain(self._head[start:], self._chunked(self._chunks), self._tail)
        chunk, inner = divmod(start - head, _CHUNK)
        chunks = self._chunks
        if chunk >= len(chunks):
            return iter(self._tail[inner:])
        rest = self._chunked(chunks[chunk + 1 :])  # a slice: islice would walk
        return chain(_messages_of(chunks[chunk])[inner:], rest, self._tail)

    @staticmethod
    def _chunked(chunks: tuple[tuple[Message, ...] | str, ...]) -> Iterator[Message]:
        return chain.from_iterable(map(_messages_of, chunks))

    def __iter__(self) -> Iterator[Message]:
        if not self._chunks and not self._head:
            return iter(self._tail)
        return chain(self._head, self._chunked(self._chunks), self._tail)

    def _same_storage(self, other: Transcript) -> bool:
        return (
            other._chunks is self._chunks
            and other._tail is self._tail
            and other._head == self._head
        )


# Transcript.__new__ (object's: the class defines none), for appended.
_new_transcript: Final = object.__new__

EMPTY_TRANSCRIPT: Final = Transcript()
"""The transcript with no message (shared: appending to it copies nothing that is there)."""


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


TOOL_CHOICE_MODES = ("auto", "required", "none")
"""The ``tool_choice`` values that are modes; any other value names a tool."""


class ModelSettings(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """How a model should answer; a setting left ``None`` keeps the backend's default.

    ``tool_choice`` is ``"auto"``, ``"required"`` (some tool must be called),
    ``"none"``, or the name of the one tool the model must call; like
    ``parallel_tool_calls`` (``False``: at most one call a reply) it applies only
    to a request that offers tools. ``stop`` holds stop sequences. ``extra`` is
    added to the provider's request body as it is, for an option that has no field
    here; a key the adapter writes itself is refused (:class:`SetupError`).
    Combine an agent's settings with a call's with :meth:`merged`.
    """

    temperature: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    tool_choice: str | None = Field(default=None, min_length=1)
    parallel_tool_calls: bool | None = None
    stop: tuple[str, ...] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("stop")
    @classmethod
    def _stops_not_empty(cls, stop: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if stop is not None and not all(stop):
            raise ValueError(f"a stop sequence must not be empty, got {stop!r}")
        return stop

    @field_validator("extra")
    @classmethod
    def _extra_is_json(cls, extra: dict[str, Any]) -> dict[str, Any]:
        try:
            _json.dumps(extra)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"extra must hold JSON values (str, int, Decimal, bool, None, lists and "
                f"objects of them), as it is sent as it is: {error}"
            ) from None
        return extra

    def merged(self, override: ModelSettings) -> ModelSettings:
        """These settings, with every one ``override`` sets (not ``None``) in its place.

        ``extra`` is merged key by key, ``override``'s winning.
        """
        changes = {name: value for name, value in override if value is not None}
        del changes["extra"]
        if override.extra:
            changes["extra"] = {**self.extra, **override.extra}
        return self.model_copy(update=changes) if changes else self


# Constructed, not validated: validating at import would build the model's schema and
# load pydantic's plugins, which ``import statemachine`` leaves for first use.
NO_SETTINGS = ModelSettings.model_construct()
"""Every setting left to the backend."""


class ModelRequest(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """What a model is asked: the conversation, the tools, the time left and the settings.

    ``output_schema``, when set, is the JSON schema the reply must match, for a
    backend that enforces it while decoding (a guard in ``constrained`` mode sets it).
    ``settings`` say how to answer; an adapter merges them over its own defaults
    (its ``settings=``), so that the request's win.
    """

    messages: Transcript
    tools: tuple[dict[str, Any], ...] = ()
    timeout: float | None = Field(default=None, description="seconds left for this call")
    output_schema: dict[str, Any] | None = Field(
        default=None, description="JSON schema a constrained decoder must enforce"
    )
    settings: ModelSettings = NO_SETTINGS


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


class ModelChunk(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """A piece of a streamed answer: ``text`` written since the last chunk, and, in the
    stream's last chunk only, the whole ``reply``.

    The deltas are for display; what the run uses is ``reply``, which repeats the text
    in full (a reply that only calls tools may stream no text at all).
    """

    text: str = ""
    reply: ModelReply | None = None


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A :class:`Model` that can also stream its answer as it writes it.

    ``stream`` is an async iterator (an ``async def`` with ``yield`` is one) of
    :class:`ModelChunk`: text deltas, then one chunk with the whole ``reply``, after
    which the run stops reading. It raises what ``complete`` raises, and must
    stop (be cancellable) when the run's task is cancelled. ``complete`` stays
    required: a run streams only while a listener wants the text.
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """Answer ``request`` piece by piece; the last chunk carries the whole reply."""
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
